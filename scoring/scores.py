"""``Scores``: what a score gives, its JSON document and its writing as one set (``crs.scoring.scoreset``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from crs.scoring import scoreset

METRIC_TABLE = "metric_table.parquet"  # written beside RESULTS/run_records


@dataclass(frozen=True)
class Scores:
    settings: dict
    encoders: pl.DataFrame  # one row per encoder, best CRS first
    per_dataset: pl.DataFrame  # one row per (encoder, dataset)
    rank_comparison: dict
    axes_by_seed: pl.DataFrame  # one row per (encoder, dataset, seed)
    # one row per (scope, encoder), scope a dataset or 'overall'
    pareto: pl.DataFrame = field(default_factory=pl.DataFrame)
    weight_grid: pl.DataFrame = field(default_factory=pl.DataFrame)  # one row per simplex point
    weight_leaders: pl.DataFrame = field(default_factory=pl.DataFrame)  # one row per leader
    # one row per (encoder, dataset, fraction, condition, metric): seed mean, std, count
    metric_table: pl.DataFrame = field(default_factory=pl.DataFrame)
    # per (encoder, dataset, seed, fraction, condition), from stored probabilities
    probe_metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    reliability: pl.DataFrame = field(default_factory=pl.DataFrame)  # reliability-diagram bins
    auroc_per_class: pl.DataFrame = field(default_factory=pl.DataFrame)  # per class / label
    robustness: pl.DataFrame = field(default_factory=pl.DataFrame)  # retention per condition
    label_efficiency: pl.DataFrame = field(default_factory=pl.DataFrame)  # AUROC vs fraction
    calibration_shift: pl.DataFrame = field(default_factory=pl.DataFrame)  # ECE clean vs shift
    # one row per (encoder, rank): share of bootstrap replicates giving that CRS rank
    rank_distribution: pl.DataFrame = field(default_factory=pl.DataFrame)
    # one row per (encoder, dataset): features left out, largest scaled value, tied conditions (crs.scoring.diagnostics)
    diagnostics: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the id of the set these scores are written as (crs.scoring.scoreset)
    generation: str = field(default_factory=scoreset.new_generation)
    provenance: dict = field(default_factory=dict)  # crs.foundations.provenance.collect(settings)
    verdict: dict | None = None  # crs.scoring.verdict.build(...)
    sites: dict | None = None  # merged results only: crs.scoring.sites.consortium(...)

    def to_json(self) -> dict:
        """Settings, rank comparison, the encoder and per-dataset tables and the comparisons (NaN -> None)."""
        pareto = {
            scope: sorted(g.filter(pl.col("pareto"))["encoder"].to_list())
            for (scope,), g in self.pareto.group_by("scope", maintain_order=True)
        } if self.pareto.height else {}
        sites = {} if self.sites is None else {"sites": self.sites}  # one site's own scores.json is unchanged
        return _plain(
            {
                "generation": self.generation,
                "tables": sorted(self.written_tables()),
                "provenance": self.provenance,
                "settings": self.settings,
                "verdict": self.verdict,
                "rank_comparison": self.rank_comparison,
                "encoders": self.encoders.to_dicts(),
                "per_dataset": self.per_dataset.to_dicts(),
                "pareto": pareto,
                "weight_sensitivity": self.weight_leaders.to_dicts(),
                "calibration_under_shift": self.calibration_shift.to_dicts(),
                "diagnostics": self.diagnostics.to_dicts(),
                "shift_targets": shift_targets(self.axes_by_seed, self.robustness),
                **sites,
            }
        )

    def tables(self) -> dict[str, pl.DataFrame]:
        return {
            "encoders": self.encoders,
            "per_dataset": self.per_dataset,
            "axes_by_seed": self.axes_by_seed,
            "pareto": self.pareto,
            "weight_sensitivity": self.weight_grid,
            "weight_leaders": self.weight_leaders,
            "probe_metrics": self.probe_metrics,
            "reliability": self.reliability,
            "auroc_per_class": self.auroc_per_class,
            "robustness": self.robustness,
            "label_efficiency": self.label_efficiency,
            "calibration_under_shift": self.calibration_shift,
            "rank_distribution": self.rank_distribution,
            "diagnostics": self.diagnostics,
        }

    def written_tables(self) -> dict[str, pl.DataFrame]:
        """The tables ``write`` puts in the set: the three core ones always, the others when not empty."""
        return {
            name: table for name, table in self.tables().items()
            if table.height or name in ("encoders", "per_dataset", "axes_by_seed")
        }

    def write(self, out_dir: Path, metric_table: Path | None = None) -> None:
        """Write every table as .parquet and .csv and scores.json as one set (``crs.scoring.scoreset``).

        A reader sees the whole previous set or the whole new one, whatever the kill point;
        a table this run does not have is not left over from an earlier run. The
        seed-aggregated metric table goes into the set when ``metric_table`` is None, else
        to that path (the CLI puts it beside the run records), written after the set and
        marked with the same generation in its Parquet metadata.
        """
        out_dir = Path(out_dir)
        tables = self.written_tables()
        if self.metric_table.height and metric_table is None:
            tables = {**tables, METRIC_TABLE.removesuffix(".parquet"): self.metric_table}
        doc = self.to_json()
        doc["tables"] = sorted(tables)
        scoreset.write_set(out_dir, tables, doc, self.generation)
        if self.metric_table.height and metric_table is not None:
            scoreset.write_table(Path(metric_table), self.metric_table, self.generation)


def shift_targets(axes_by_seed: pl.DataFrame, robustness: pl.DataFrame) -> dict[str, list[str]]:
    """dataset -> the shift targets its probes were evaluated on (each a target only, never scored itself)."""
    if not robustness.height or "condition" not in robustness.columns:
        return {}
    shifted = robustness.filter(pl.col("condition").str.starts_with("shift:")).select("dataset", "condition").unique()
    out: dict[str, list[str]] = {}
    for d, c in shifted.sort("dataset", "condition").iter_rows():
        out.setdefault(d, []).append(c.removeprefix("shift:"))
    return out


def _plain(value):
    """JSON-ready copy: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
