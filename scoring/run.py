"""``score``: run records -> CRS, components, ranks, bootstrap intervals and tiers.

The thin edge of the scoring stage: it picks the comparison set, turns the polars
tables into arrays for the numpy core, and assembles and writes the results.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from crs.files import atomic_write
from crs.names import VALIDATION
from crs.scoring import crs as core
from crs.scoring import analysis
from crs.scoring.axes import AXES, axes_by_seed, require_columns, seed_means, used_rows
from crs.scoring.bootstrap import (
    CONFIDENCE,
    draw_seeds,
    score_replicates,
    seed_means_of,
    seed_tensor,
    seed_weights,
    summarise,
)
from crs.scoring.ranks import compare, rank_desc
from crs.store import StoreError

CRS_VERSION = "1"
MEDIAN = core.MEDIAN
COMPONENTS = ("dominance", "balance", "worst_axis")
UNITS = ("seed", "image", "both")
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

    def to_json(self) -> dict:
        """Settings, rank comparison, the encoder and per-dataset tables and the comparisons (NaN -> None)."""
        pareto = {
            scope: sorted(g.filter(pl.col("pareto"))["encoder"].to_list())
            for (scope,), g in self.pareto.group_by("scope", maintain_order=True)
        } if self.pareto.height else {}
        return _plain(
            {
                "settings": self.settings,
                "rank_comparison": self.rank_comparison,
                "encoders": self.encoders.to_dicts(),
                "per_dataset": self.per_dataset.to_dicts(),
                "pareto": pareto,
                "weight_sensitivity": self.weight_leaders.to_dicts(),
                "calibration_under_shift": self.calibration_shift.to_dicts(),
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
        }

    def write(self, out_dir: Path, metric_table: Path | None = None) -> None:
        """Write every table as .parquet and .csv, then scores.json, each file atomically.

        The seed-aggregated metric table goes to ``metric_table`` (the CLI puts it beside
        the run records), or into ``out_dir`` when that is None.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, table in self.tables().items():
            if not table.height and name not in ("encoders", "per_dataset", "axes_by_seed"):
                continue
            atomic_write(out_dir / f"{name}.parquet", table.write_parquet)
            atomic_write(out_dir / f"{name}.csv", table.write_csv)
        if self.metric_table.height:
            target = Path(metric_table) if metric_table is not None else out_dir / METRIC_TABLE
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, self.metric_table.write_parquet)
        text = json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
        # scores.json last, so its presence marks a complete write
        atomic_write(out_dir / "scores.json", lambda p: p.write_text(text, encoding="utf-8"))


def comparison_set(
    records: pl.DataFrame, reference: str = MEDIAN
) -> tuple[list[str], list[str], dict]:
    """The encoders and datasets where every encoder has every dataset (docs/crs-v1.md section 2).

    When the records are not a full grid, the largest such block wins: most
    (encoder, dataset) cells, then most encoders, then the alphabetically first dataset
    list. It must hold at least 2 encoders, and the reference when one is named. A best
    block's datasets are the intersection of its encoders' dataset sets, so the
    candidates are the closure of those sets under intersection. Returns (encoders,
    datasets, excluded) with excluded = {'encoders': [...], 'datasets': [...]}.
    """
    pairs = records.select("encoder", "dataset").unique()
    have: dict[str, frozenset[str]] = {
        r["encoder"]: frozenset(r["dataset"])
        for r in pairs.group_by("encoder").agg("dataset").iter_rows(named=True)
    }
    sets = set(have.values())
    frontier = set(sets)
    while frontier:
        frontier = {a & b for a in frontier for b in have.values()} - sets - {frozenset()}
        sets |= frontier
    best: tuple[tuple[int, int], list[str], list[str]] | None = None
    for datasets in sorted(sorted(s) for s in sets):
        encoders = sorted(e for e, s in have.items() if s.issuperset(datasets))
        if len(encoders) < 2 or (reference != MEDIAN and reference not in encoders):
            continue
        key = (len(encoders) * len(datasets), len(encoders))
        if best is None or key > best[0]:
            best = (key, encoders, datasets)
    if best is None:
        need = "" if reference == MEDIAN else f", one of them the reference {reference!r},"
        raise ValueError(
            f"no dataset is shared by at least 2 encoders{need} (encoders and their datasets: "
            f"{ {e: sorted(s) for e, s in sorted(have.items())} }); CRS compares encoders on "
            "common datasets: probe at least two encoders on the same dataset"
        )
    _, encoders, datasets = best
    excluded = {
        "encoders": sorted(set(have) - set(encoders)),
        "datasets": sorted(set().union(*have.values()) - set(datasets)),
    }
    return encoders, datasets, excluded


def score(
    records: pl.DataFrame,
    *,
    reference: str = MEDIAN,
    weights: Sequence[float] = core.DEFAULT_WEIGHTS,
    n_bootstrap: int = 1000,
    seed: int = 0,
    bootstrap_unit: str = "seed",
    store=None,
    simplex_step: float = analysis.SIMPLEX_STEP,
) -> Scores:
    """Score run records by docs/crs-v1.md: axes, q, components, CRS, ranks, bootstrap and tiers.

    ``reference`` is an encoder name or 'median'; ``weights`` are (dominance, balance,
    worst_axis), non-negative and summing to 1. Encoders or datasets outside the
    comparison set are dropped and listed in ``settings['excluded']``.

    ``bootstrap_unit``: 'seed' resamples seeds (docs/crs-v1.md section 5), 'image' the test
    images of every dataset (the same draw for every encoder; needs ``store``, a
    ``crs.store.Store`` with the probe's test probabilities), 'both' the two at once.
    With a store, the metrics that need probabilities (balanced accuracy, kappa,
    classwise ECE, AURC, temperature scaling, reliability bins) are computed too. What
    the store lacks is said in ``settings['warnings']``, and the image bootstrap then
    falls back to seeds.
    """
    w = core.check_weights(weights)
    if int(n_bootstrap) < 1:
        raise ValueError(f"n_bootstrap must be at least 1, got {n_bootstrap!r}")
    if bootstrap_unit not in UNITS:
        raise ValueError(f"bootstrap unit must be one of {UNITS}, not {bootstrap_unit!r}")
    require_columns(records)
    # rows a probe may keep for its validation split serve temperature scaling, never the axes
    records = records.filter(pl.col("condition") != VALIDATION)
    present = sorted(records.get_column("encoder").unique().to_list())
    if len(present) < 2:
        raise ValueError(f"CRS compares encoders and needs at least 2, the records hold {present}")
    if reference != MEDIAN and reference not in present:
        raise ValueError(
            f"reference {reference!r} is not among the encoders in the records: {present}; "
            f"name one of them or use {MEDIAN!r}"
        )
    encoders, datasets, excluded = comparison_set(records, reference)
    records = records.filter(pl.col("encoder").is_in(encoders) & pl.col("dataset").is_in(datasets))
    by_seed = axes_by_seed(records)
    x_seed, seeds = seed_tensor(by_seed, encoders, datasets)  # [encoder, dataset, seed, axis]
    means = seed_means(by_seed)
    x = _grid(means, encoders, datasets)  # [encoder, dataset, axis]
    ref: int | str = MEDIAN if reference == MEDIAN else encoders.index(reference)

    point = core.score(x, ref, w)
    auroc = x[:, :, AXES.index("discrimination")].mean(axis=1)
    table = pl.DataFrame(
        {
            "encoder": encoders,
            "auroc": auroc,
            "auroc_rank": rank_desc(auroc),
            "crs": point.crs,
            "crs_rank": rank_desc(point.crs),
        }
    )
    warnings: list[str] = []
    used = used_rows(records)
    unit = bootstrap_unit
    draw = draw_seeds(len(seeds), int(n_bootstrap), seed)  # [replicate, draw]
    x_rep = None
    if unit != "seed":
        from crs.scoring.predictions import MissingPredictions, image_bootstrap_axes

        if store is None:
            warnings.append(
                f"bootstrap unit {unit!r} needs the stored test probabilities and no store was "
                "given (pass --store): fell back to the seed bootstrap"
            )
        else:
            try:
                x_rep = image_bootstrap_axes(
                    store, used, encoders, datasets, seeds, int(n_bootstrap),
                    np.random.default_rng([seed, 1]),
                )
            except (MissingPredictions, StoreError) as exc:
                warnings.append(f"{exc}; fell back to the seed bootstrap")
        if x_rep is None:
            unit = "seed"
    if x_rep is None:
        x_boot = np.einsum("bs,edsa->beda", seed_weights(draw, len(seeds)), x_seed)
    else:
        x_boot = seed_means_of(x_rep, draw if unit == "both" else None)
    reps = score_replicates(x_boot, ref, w)
    boot = summarise(reps, encoders, point.crs)
    overall = x.mean(axis=1)  # [encoder, axis]
    extra = pl.DataFrame(
        {
            "encoder": encoders,
            **{a: overall[:, k] for k, a in enumerate(AXES)},
            **{f"q_{a}": point.q[:, k] for k, a in enumerate(AXES)},
            "dominance": point.dominance,
            "balance": point.balance,
            "worst_axis": point.worst_axis,
        }
    )
    head = ["crs_low", "crs_high", "rank_low", "rank_high", "p_rank1", "tier"]
    table = (
        table.join(boot.select("encoder", *head), on="encoder", maintain_order="left")
        .join(extra, on="encoder", maintain_order="left")
        .join(boot.drop(head), on="encoder", maintain_order="left")
        .sort(["crs", "encoder"], descending=[True, False])
    )

    # per-dataset CRS: each dataset alone is the comparison set, dominance included
    per_q = np.swapaxes(point.q_dataset, 0, 1)  # [dataset, encoder, axis]
    parts = core.components(per_q, w)  # each [dataset, encoder]
    rows = []
    for d, dataset in enumerate(datasets):
        for e, encoder in enumerate(encoders):
            rows.append(
                {
                    "encoder": encoder,
                    "dataset": dataset,
                    **{a: float(x[e, d, k]) for k, a in enumerate(AXES)},
                    **{f"q_{a}": float(per_q[d, e, k]) for k, a in enumerate(AXES)},
                    "dominance": float(parts.dominance[d, e]),
                    "balance": float(parts.balance[d, e]),
                    "worst_axis": float(parts.worst_axis[d, e]),
                    "crs": float(parts.crs[d, e]),
                }
            )
    per_dataset = (
        pl.DataFrame(rows)
        .join(
            means.select("encoder", "dataset", "n_seeds"),
            on=["encoder", "dataset"],
            maintain_order="left",
        )
        .select("encoder", "dataset", "n_seeds", pl.exclude("encoder", "dataset", "n_seeds"))
        .sort(["dataset", "crs", "encoder"], descending=[False, True, False])
    )

    pareto = analysis.pareto_table(encoders, datasets, point.q_dataset, point.q)
    front = pareto.filter(pl.col("scope") == "overall").select("encoder", "pareto")
    table = table.join(front, on="encoder", maintain_order="left")
    grid, leaders = analysis.weight_sensitivity(
        encoders, point.dominance, point.balance, point.worst_axis, simplex_step
    )

    per_seed = records
    probe_metrics = reliability = per_class = pl.DataFrame()
    if store is None:
        warnings.append(
            "no store given: balanced accuracy, kappa, classwise ECE, AURC, temperature "
            "scaling and reliability bins need the stored probabilities (pass --store); the "
            "metric table holds the run-record metrics only"
        )
    else:
        from crs.scoring.predictions import MissingPredictions, probe_metrics as from_store

        try:
            found = from_store(store, records, encoders, datasets)
            probe_metrics, reliability, per_class = found.metrics, found.reliability, found.per_class
            warnings.extend(found.warnings)
        except (MissingPredictions, StoreError) as exc:
            warnings.append(f"{exc}; the metrics that need stored probabilities are left out")
        if probe_metrics.height:
            keys = ["encoder", "dataset", "seed", "fraction", "condition"]
            extra = probe_metrics.drop([c for c in analysis.METRICS if c in probe_metrics.columns])
            per_seed = records.join(
                extra.cast({"seed": records.schema["seed"], "fraction": records.schema["fraction"]}),
                on=keys, how="left",
            )
    metric_names = [*analysis.METRICS, *[c for c in probe_metrics.columns if c in EXTRA_METRICS]]

    fractions = sorted(set(used.get_column("fraction").to_list()))
    settings = {
        "crs_version": CRS_VERSION,
        "reference": reference,
        "weights": dict(zip(COMPONENTS, w, strict=True)),
        "bootstrap": {
            "n": int(n_bootstrap),
            "unit": unit,
            "seed": seed,
            "confidence": CONFIDENCE,
        },
        "seeds": [int(s) for s in seeds],
        "fractions": [float(f) for f in fractions],
        "datasets": list(datasets),
        "excluded": excluded,
        "simplex_step": simplex_step,
        "warnings": warnings,
    }
    if unit != bootstrap_unit:
        settings["bootstrap"]["requested_unit"] = bootstrap_unit
    return Scores(
        settings=settings,
        encoders=table,
        per_dataset=per_dataset,
        rank_comparison=compare(encoders, auroc, point.crs),
        axes_by_seed=by_seed,
        pareto=pareto,
        weight_grid=grid,
        weight_leaders=leaders,
        metric_table=analysis.metric_table(per_seed, metric_names),
        probe_metrics=probe_metrics,
        reliability=reliability,
        auroc_per_class=per_class,
        robustness=analysis.robustness_detail(used),
        label_efficiency=analysis.label_efficiency_curve(used, draw, seeds),
        calibration_shift=analysis.calibration_under_shift(records),
        rank_distribution=analysis.rank_distribution(encoders, reps.rank),
    )


EXTRA_METRICS = (
    "balanced_accuracy", "kappa_quadratic", "classwise_ece", "aurc",
    "temperature", "ece_ts", "brier_ts", "nll_ts",
)  # fmt: skip



def _grid(means: pl.DataFrame, encoders: Sequence[str], datasets: Sequence[str]) -> np.ndarray:
    """Seed means x [encoder, dataset, axis] in the given order."""
    grid = pl.DataFrame({"encoder": list(encoders)}, schema={"encoder": pl.String}).join(
        pl.DataFrame({"dataset": list(datasets)}, schema={"dataset": pl.String}), how="cross"
    )
    x = grid.join(means, on=["encoder", "dataset"], how="left", maintain_order="left")
    return x.select(AXES).to_numpy().astype(float).reshape(len(encoders), len(datasets), len(AXES))


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
