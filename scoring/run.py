"""``score``: run records -> CRS, components, ranks, bootstrap intervals and tiers.

The thin edge of the scoring stage: it picks the comparison set, turns the polars
tables into arrays for the numpy core, and assembles and writes the results.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from crs import provenance
from crs import records as run_records
from crs.errors import BadInput, CrsError
from crs.names import VALIDATION
from crs.scoring import crs as core
from crs.scoring import analysis, diagnostics, scoreset, verdict
from crs.scoring.axes import AXES, FRACTION_TOL, require_columns, seed_means
from crs.scoring.bootstrap import (
    CONFIDENCE,
    Replicates,
    draw_seeds,
    incomplete,
    interval,
    resample_seeds,
    score_replicates,
    seed_scale,
    seed_means_of,
    seed_tensor,
    seed_weights,
    summarise,
)
from crs.scoring.comparison import Comparison, comparison_of, comparison_records
from crs.scoring.options import ScoreOptions
from crs.scoring.ranks import compare, rank_desc

MEDIAN = core.MEDIAN
COMPONENTS = ("dominance", "balance", "worst_axis")
UNITS = ("seed", "image", "both")
SHIFT_WARN = 0.5  # half-widths: mean replicate vs estimate (shifted_axis_warnings)
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
    provenance: dict = field(default_factory=dict)  # crs.provenance.collect(settings)
    verdict: dict | None = None  # crs.scoring.verdict.build(...)

    def to_json(self) -> dict:
        """Settings, rank comparison, the encoder and per-dataset tables and the comparisons (NaN -> None)."""
        pareto = {
            scope: sorted(g.filter(pl.col("pareto"))["encoder"].to_list())
            for (scope,), g in self.pareto.group_by("scope", maintain_order=True)
        } if self.pareto.height else {}
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


class Bootstrap(NamedTuple):
    """The bootstrap of one score (``_replicates``)."""

    reps: Replicates  # CRS, ranks and axes of every replicate
    draw: np.ndarray  # the seed draw [replicate, draw]
    unit: str  # the unit resampled: the one asked for, or 'seed' where it fell back
    by_seed: pl.DataFrame  # axes_by_seed with C by the CRS version
    image_method: dict  # per dataset: arrays computed exactly / shared (image bootstrap), else {}


def score(records: pl.DataFrame, options: ScoreOptions = ScoreOptions(), *, store=None, results=None) -> Scores:
    """Score run records by docs/crs-v2.md (``options.crs_version`` "2", the default) or docs/crs-v1.md ("1"): axes,
    q, components, CRS, ranks, bootstrap and tiers. v2's calibration axis is read from the store's test
    probabilities (``calibration_axis``), so v2 needs ``store``.

    ``options`` (``ScoreOptions``): ``reference`` is an encoder name or 'median'; ``weights`` are
    (dominance, balance, worst_axis), non-negative and summing to 1. Encoders or datasets outside the
    comparison set are dropped and listed in ``settings['excluded']``.

    ``options.bootstrap_unit`` (docs/crs-v1.md section 5): 'both' (the default) resamples seeds and
    the test images of every dataset at once, 'seed' seeds alone, 'image' test images
    alone (the same draw for every encoder). 'image' and 'both' need ``store``, a
    ``crs.store.Store`` with the probe's test probabilities.
    With a store, the metrics that need probabilities (balanced accuracy, kappa,
    classwise ECE, AURC, temperature scaling, reliability bins) are computed too, and
    each encoder's metadata (revision, licence, cost) is read from its embeddings'
    provenance (``encoder_metadata``). What the store lacks is said in
    ``settings['warnings']``, and the image bootstrap then falls back to seeds.

    ``results``: the folder the run records were read from. With a store, each
    (encoder, dataset)'s run records and stored probabilities (validation included) must
    come from one probe run (``crs.records.check_pair``); a mix is refused (exit 2).
    """
    options = _check_options(records, options, store)
    records, encoders, datasets, excluded = comparison_records(records, options.reference)
    if results is not None:
        run_records.check_same_settings(results, records.select("encoder", "dataset").unique().rows(),
                                        None if store is None else store.path)
    if store is not None and results is not None:
        check_probe_runs(store, results, records)
    cmp = comparison_of(records, encoders, datasets, excluded, options.reference)
    warnings: list[str] = tie_warnings(cmp.records)
    metrics_pass = _metrics_pass(store, cmp)
    boot = _replicates(cmp, options, store, metrics_pass, warnings)
    means = seed_means(boot.by_seed)
    x = _grid(means, cmp.encoders, cmp.datasets)  # [encoder, dataset, axis]
    point = core.score(x, cmp.reference, options.weights, options.crs_version)
    found = _from_store(store, cmp, warnings, metrics_pass)
    tables = _analysis_tables(cmp, point, boot, options.simplex_step, found)
    settings = _settings(options, cmp, boot, warnings)
    settings["test_images"] = test_images(cmp.records, cmp.datasets)
    shifted_axis_warnings(boot.reps.axis, x.mean(axis=1), cmp.encoders, warnings)
    auroc = x[:, :, AXES.index("discrimination")].mean(axis=1)
    table = _encoder_table(cmp.encoders, x, point, auroc,
                           summarise(boot.reps, cmp.encoders, point.crs, reference=cmp.reference),
                           tables["pareto"], encoder_metadata(store, cmp.encoders, cmp.datasets))
    table, health, decided = _diagnosed(table, cmp.records, tables, settings)
    return Scores(
        settings=settings,
        encoders=table,
        per_dataset=_per_dataset_table(cmp.encoders, cmp.datasets, x, point, options.weights, means,
                                       options.crs_version),
        rank_comparison=compare(cmp.encoders, auroc, point.crs),
        axes_by_seed=boot.by_seed,
        provenance=provenance.collect(settings),
        verdict=decided, diagnostics=health,
        **tables,
    )


_V2_NEEDS = ("pass --store with the store the probe read, or score by CRS v1 (--crs-version 1), whose C is the "
             "run records' 15-bin ECE")


def calibration_axis(by_seed: pl.DataFrame, store, encoders, datasets, errors: dict | None = None) -> pl.DataFrame:
    """``axes_by_seed`` with CRS v2's C: 1 - the debiased calibration error of each run's stored clean test
    probabilities at fraction 1 (docs/crs-v2.md section 1). ``errors``: {(encoder, dataset, seed): error} the
    image bootstrap computed as it read them; None reads them here. A store without them is refused
    (BadInput) saying what to do."""
    from crs.scoring.predictions import MissingPredictions, calibration_errors

    seeds = sorted(by_seed.get_column("seed").unique().to_list())
    if errors is None:
        try:
            ce = calibration_errors(store, encoders, datasets, seeds)
        except MissingPredictions as exc:
            raise BadInput(f"CRS v2 reads its calibration axis from the stored test probabilities: {exc}; or "
                           f"{_V2_NEEDS}") from exc
    else:
        ce = pl.DataFrame([(*k, v) for k, v in errors.items()], orient="row",
                          schema={"encoder": pl.String, "dataset": pl.String, "seed": pl.Int64,
                                  "calibration_error": pl.Float64})
    cols = by_seed.columns
    joined = by_seed.join(ce.cast({"seed": by_seed.schema["seed"]}), on=["encoder", "dataset", "seed"], how="left")
    return joined.with_columns(calibration=1.0 - pl.col("calibration_error")).select(cols)


def test_images(records: pl.DataFrame, datasets) -> dict[str, int]:
    """dataset -> images in its clean test split (the run records' n_eval at fraction 1); {} for records
    without n_eval."""
    if "n_eval" not in records.columns:
        return {}
    clean = records.filter((pl.col("condition") == "clean") & ((pl.col("fraction") - 1.0).abs() <= FRACTION_TOL))
    sizes = clean.group_by("dataset").agg(pl.col("n_eval").max()).drop_nulls()
    return {d: int(n) for d, n in sizes.sort("dataset").iter_rows() if d in set(datasets)}


def _diagnosed(table: pl.DataFrame, records: pl.DataFrame, tables: dict, settings: dict):
    """(the encoders table with its tie marks, the probe diagnostics, the verdict naming the marked axes)."""
    health = diagnostics.probe_health(records)
    marked = diagnostics.marked_axes(health)
    table = table.with_columns(ties_marked=pl.Series([diagnostics.marks_text(marked.get(e, []))
                                                      for e in table["encoder"]], dtype=pl.String))
    decided = verdict.build(table, tables["weight_leaders"], tables["weight_grid"], settings)
    decided["notes"].extend(diagnostics.notes(records))
    return table, health, decided


def shift_targets(axes_by_seed: pl.DataFrame, robustness: pl.DataFrame) -> dict[str, list[str]]:
    """dataset -> the shift targets its probes were evaluated on (each a target only, never scored itself)."""
    if not robustness.height or "condition" not in robustness.columns:
        return {}
    shifted = robustness.filter(pl.col("condition").str.starts_with("shift:")).select("dataset", "condition").unique()
    out: dict[str, list[str]] = {}
    for d, c in shifted.sort("dataset", "condition").iter_rows():
        out.setdefault(d, []).append(c.removeprefix("shift:"))
    return out


def _replicates(cmp: Comparison, options: ScoreOptions, store, metrics_pass, warnings: list[str]) -> Bootstrap:
    """The bootstrap of the comparison set (``Bootstrap``); says in ``warnings`` where the unit fell back or a
    replicate had no CRS."""
    draw = draw_seeds(len(cmp.seeds), int(options.n_bootstrap), options.seed)  # [replicate, draw]
    image_method: dict = {}  # per dataset: arrays exact / shared (predictions.image_bootstrap_axes)
    x_boot, unit, by_seed = _bootstrap_means(cmp, draw, options, store, metrics_pass, warnings, image_method)
    reps = score_replicates(x_boot, cmp.reference, options.weights, options.crs_version)
    _say_if_no_interval(reps, x_boot, cmp.datasets, unit, warnings)
    _say_if_few_seeds(len(cmp.seeds), unit, warnings)
    return Bootstrap(reps, draw, unit, by_seed, image_method)


FEW_SEEDS = 5  # below this the seed part of an interval is widened more than 1.6 times


def _say_if_few_seeds(n_seeds: int, unit: str, warnings: list[str]) -> None:
    """A warning when the seed draw has so few seeds that its widening (``bootstrap.seed_scale``) dominates."""
    if unit == "image" or not 1 < n_seeds < FEW_SEEDS:
        return
    warnings.append(
        f"only {n_seeds} seeds: the seed part of every interval is widened {seed_scale(n_seeds):.2f} times "
        f"(Student's t with {n_seeds - 1} degrees of freedom, docs/crs-v1.md section 5), so label "
        f"efficiency and the CRS intervals are wide; probe with at least {FEW_SEEDS} seeds "
        f"(`crs probe --seeds {FEW_SEEDS}`) to narrow them"
    )


def _analysis_tables(cmp: Comparison, point, boot: Bootstrap, simplex_step: float, found) -> dict:
    """The Scores tables beyond the leaderboard: Pareto view, weight sensitivity, what the store's
    probabilities gave, robustness, label-efficiency and calibration-under-shift detail, rank distribution."""
    pareto = analysis.pareto_table(cmp.encoders, cmp.datasets, point.q_dataset, point.q)
    grid, leaders = analysis.weight_sensitivity(
        cmp.encoders, point.dominance, point.balance, point.worst_axis, simplex_step
    )
    return dict(
        pareto=pareto,
        weight_grid=grid,
        weight_leaders=leaders,
        metric_table=_metric_table(cmp.records, found.metrics),
        probe_metrics=found.metrics,
        reliability=found.reliability,
        auroc_per_class=found.per_class,
        robustness=analysis.robustness_detail(cmp.used),
        label_efficiency=analysis.label_efficiency_curve(cmp.used, boot.draw, cmp.seeds),
        calibration_shift=analysis.calibration_under_shift(cmp.records),
        rank_distribution=analysis.rank_distribution(cmp.encoders, boot.reps.rank),
    )


def check_probe_runs(store, results, records: pl.DataFrame) -> None:
    """Refuse (exit 2) where a pair's run records and stored probabilities come from different probe runs.

    Calls ``crs.records.check_pair`` (the probe's own definition of one run) with the
    attributes of every stored prediction array of the pair that scoring may read: each
    condition of its run records and the validation split. Records from a crs without
    that check pass unchecked."""
    from crs import records as run_records
    from crs.scoring.predictions import prediction_attrs

    check = getattr(run_records, "check_pair", None)
    if check is None:
        return
    pairs = records.select("encoder", "dataset", "condition").unique().sort("encoder", "dataset", "condition")
    for (encoder, dataset), g in pairs.group_by("encoder", "dataset", maintain_order=True):
        conditions = sorted({*g["condition"].to_list(), VALIDATION})
        attrs = {c: a for c in conditions if (a := prediction_attrs(store, dataset, encoder, c)) is not None}
        check(results, encoder, dataset, attrs)


def _check_options(records: pl.DataFrame, options: ScoreOptions, store) -> ScoreOptions:
    """``options`` with the weights and the CRS version checked and in canonical form; BadInput saying what is
    wrong otherwise."""
    w = core.check_weights(options.weights)
    version = core.check_version(options.crs_version)
    if version != "1" and store is None:
        raise BadInput(f"CRS v2 reads its calibration axis from the stored test probabilities and no store was "
                       f"given: {_V2_NEEDS}")
    if int(options.n_bootstrap) < 1:
        raise BadInput(f"n_bootstrap must be at least 1, got {options.n_bootstrap!r}")
    if options.bootstrap_unit not in UNITS:
        raise BadInput(f"bootstrap unit must be one of {UNITS}, not {options.bootstrap_unit!r}")
    require_columns(records)
    return dataclasses.replace(options, weights=w, crs_version=version)


def _bootstrap_means(cmp: Comparison, draw: np.ndarray, options: ScoreOptions, store, metrics_pass,
                     warnings: list[str], image_method: dict):
    """(seed means x [replicate, encoder, dataset, axis] of the bootstrap, the unit used, ``by_seed`` with C by the
    CRS version: v2's from the image bootstrap's reads, else read for it, ``calibration_axis``).

    Falls back to the seed bootstrap, saying why in ``warnings``, where the image
    bootstrap cannot read what it needs. ``metrics_pass``: a ``predictions.MetricsPass`` the image
    bootstrap hands the arrays it reads (``_metrics_pass``); ``image_method`` receives per dataset how its
    arrays were computed."""
    unit, version, by_seed = options.bootstrap_unit, options.crs_version, cmp.by_seed
    x_rep = None
    errors: dict | None = {} if version != "1" else None  # v2: the clean calibration errors the bootstrap reads
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
                    store, cmp, draw.shape[0], np.random.default_rng([options.seed, 1]), methods=image_method,
                    metrics_pass=metrics_pass, version=version, point_errors=errors,
                )
            except MissingPredictions as exc:  # absent, not damaged: a damaged store is refused (exit 2)
                warnings.append(f"{exc}; fell back to the seed bootstrap")
    if version != "1":
        by_seed = calibration_axis(by_seed, store, cmp.encoders, cmp.datasets, errors if x_rep is not None else None)
    if x_rep is None:
        x_seed, _ = seed_tensor(by_seed, cmp.encoders, cmp.datasets)  # [encoder, dataset, seed, axis]
        return resample_seeds(seed_weights(draw, len(cmp.seeds)), np.moveaxis(x_seed, 2, -1)), "seed", by_seed
    return seed_means_of(x_rep, draw if unit == "both" else None), unit, by_seed


TIE_SHARE_WARN = 0.5  # above this share of tied test predictions an AUROC says little about ranking
TIES_LISTED = 8  # conditions named per (encoder, dataset) in a tie warning


def tie_warnings(records: pl.DataFrame, limit: float = TIE_SHARE_WARN) -> list[str]:
    """One warning per (encoder, dataset) whose AUROC rests mostly on ties, from the run records' ``tie_share``.

    ``tie_share`` (written by the probe; absent in older run records, which give no
    warning) is the share of a condition's test predictions tied with another image's;
    a condition is named where its largest share over seeds and fractions exceeds ``limit``.
    """
    if "tie_share" not in records.columns:
        return []
    worst = (
        records.filter(pl.col("tie_share").is_not_null() & ~pl.col("tie_share").is_nan())
        .group_by("encoder", "dataset", "condition")
        .agg(pl.col("tie_share").max())
        .filter(pl.col("tie_share") > limit)
        .sort(["encoder", "dataset", "tie_share", "condition"], descending=[False, False, True, False])
    )
    out = []
    for (encoder, dataset), g in worst.group_by("encoder", "dataset", maintain_order=True):
        named = [f"{r['condition']} {r['tie_share']:.0%}" for r in g.head(TIES_LISTED).iter_rows(named=True)]
        more = f" and {g.height - TIES_LISTED} more" if g.height > TIES_LISTED else ""
        out.append(
            f"{encoder} on {dataset}: the AUROC rests mostly on tied test predictions (share of tied "
            f"predictions above {limit:.0%}: {', '.join(named)}{more}); its ranking of these images is "
            "largely arbitrary, so read those AUROC values, and the axes built on them, with care"
        )
    return out


def shifted_axis_warnings(axis_reps: np.ndarray, axis_point: np.ndarray, encoders: Sequence[str],
                          warnings: list[str], limit: float = SHIFT_WARN) -> None:
    """A warning per axis whose replicates sit off the estimate: mean(replicates) - estimate beyond ``limit``
    half-widths of the 95 % interval, for the encoder where it is largest.

    A percentile interval then covers what the estimator gives at this test size, not the population value:
    docs/bootstrap-coverage.md measured it for C, whose binned ECE is biased upwards on small test sets
    (shift about -1 half-width for C, at most 0.3 for D, L and R; this limit separates them).
    """
    if axis_reps.shape[0] < 2:
        return
    with np.errstate(invalid="ignore"):
        low, high = interval(axis_reps)  # [encoder, axis]
        half = (high - low) / 2
        shift = (np.nanmean(axis_reps, axis=0) - axis_point) / np.where(half > 0, half, np.nan)
    for k, a in enumerate(AXES):
        col = np.abs(shift[:, k])
        if not np.isfinite(col).any() or np.nanmax(col) <= limit:
            continue
        e = int(np.nanargmax(col))
        warnings.append(
            f"the {a} intervals are off-centre: the bootstrap replicates of {encoders[e]} sit "
            f"{shift[e, k]:+.2f} half-widths from its estimate, so they cover what the estimator gives at this "
            f"test-set size rather than the population value ({_why_shifted(a)}); read the {a} interval with that in "
            "mind"
        )


def _why_shifted(axis: str) -> str:
    """The known cause of an off-centre axis interval, in the warning's words."""
    if axis == "calibration":
        return "docs/bootstrap-coverage.md: the binned ECE behind calibration is biased upwards on small test sets"
    return ("docs/bootstrap-coverage.md measured such a shift only for calibration; here it may be chance, as with "
            "few bootstrap replicates, or a bias of this axis's statistic on a small test set")


def _say_if_no_interval(reps, x_boot: np.ndarray, datasets: Sequence[str], unit: str, warnings: list[str]) -> None:
    """A warning when some replicate has no CRS, so the intervals are empty and no tier is given."""
    bad = incomplete(reps)
    if not bad.any():
        return
    where = ~np.isfinite(x_boot[bad]).all(axis=(0, 1, 3))  # [dataset]: a replicate without an axis value there
    names = [d for d, b in zip(datasets, where, strict=True) if b] or list(datasets)
    warnings.append(
        f"{int(bad.sum())} of {bad.size} {unit}-bootstrap replicates have no CRS: the test split of "
        f"{', '.join(names)} is too small for the {unit} bootstrap (a draw left no class with both positive "
        "and negative images to score), so the CRS and rank intervals and P(rank 1) are empty and no "
        "leading tier is assigned; use `--bootstrap-unit seed` or a larger test split"
    )


def _encoder_table(encoders, x, point, auroc, boot: pl.DataFrame, pareto: pl.DataFrame,
                   metadata: pl.DataFrame) -> pl.DataFrame:
    """One row per encoder, best CRS first: CRS and AUROC ranks, intervals, difference to the leader, tie
    group, axes, q, components, Pareto, then the encoder's metadata from the store."""
    table = pl.DataFrame(
        {
            "encoder": encoders,
            "auroc": auroc,
            "auroc_rank": rank_desc(auroc),
            "crs": point.crs,
            "crs_rank": rank_desc(point.crs),
        }
    )
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
    head = ["reference", "crs_low", "crs_high", "crs_diff", "crs_diff_low", "crs_diff_high", "rank_low",
            "rank_high", "tie_group", "p_rank1", "tier"]
    front = pareto.filter(pl.col("scope") == "overall").select("encoder", "pareto")
    return (
        table.join(boot.select("encoder", *head), on="encoder", maintain_order="left")
        .join(extra, on="encoder", maintain_order="left")
        .join(boot.drop(head), on="encoder", maintain_order="left")
        .sort(["crs", "encoder"], descending=[True, False])
        .join(front, on="encoder", maintain_order="left")
        .join(metadata, on="encoder", maintain_order="left")
    )


METADATA = {  # column: its Polars type; what encoder_metadata reads from an embedding array's provenance
    "revision": pl.String, "licence": pl.String, "gated": pl.Boolean, "parameters": pl.Int64,
    "gflops": pl.Float64, "width": pl.Int64, "images_per_s": pl.Float64, "device": pl.String,
    "revision_expected": pl.Boolean,
}  # fmt: skip


def encoder_metadata(store, encoders: Sequence[str], datasets: Sequence[str]) -> pl.DataFrame:
    """One row per encoder: the ``METADATA`` columns, read from the provenance of its clean embeddings.

    The provenance of (encoder, first dataset of the comparison set)'s clean array: the
    array's attrs["provenance"] where present, else the attrs themselves (stores that
    spread it there). revision = the hub commit actually loaded (``weights.revision_loaded``),
    else 'sha256:<digest>' of a local weights file, else the revision the extraction
    asked for; licence and gated from the encoder spec; parameters, width, images_per_s,
    device and gflops = flops_per_image / 1e9 from ``cost``. Whatever is absent (no store,
    an old store, embeddings not in the store) is null, never an error.
    """
    rows = [{"encoder": e, **_metadata_of(_clean_provenance(store, e, datasets))} for e in encoders]
    return pl.DataFrame(rows, schema={"encoder": pl.String, **METADATA})


def _clean_provenance(store, encoder: str, datasets: Sequence[str]) -> dict:
    read = getattr(store, "embedding_attrs", None)
    if read is None or not datasets:
        return {}
    try:
        attrs = read(datasets[0], encoder, "clean")
    except (KeyError, CrsError):  # absent, or metadata unreadable: decoration only, never a refusal
        return {}
    inner = attrs.get("provenance")
    return inner if isinstance(inner, dict) else dict(attrs)


def _metadata_of(p: dict) -> dict:
    def part(key: str) -> dict:
        value = p.get(key)
        return value if isinstance(value, dict) else {}

    weights, cost, spec = part("weights"), part("cost"), part("encoder_spec")
    sha = weights.get("weights_sha256")
    revision = weights.get("revision_loaded") or (f"sha256:{sha}" if sha else None) or p.get("revision")
    flops = _as(float, cost.get("flops_per_image"))
    return {
        "revision": _as(str, revision),
        "licence": _as(str, spec.get("licence")),
        "gated": _as(bool, spec.get("gated")),
        "parameters": _as(int, cost.get("parameters")),
        "gflops": None if flops is None else flops / 1e9,
        "width": _as(int, cost.get("width", spec.get("width"))),
        "images_per_s": _as(float, cost.get("images_per_s")),
        "device": _as(str, cost.get("device")),
        # pretrained weights from a hub have a revision; random-weight and built-in encoders have none
        "revision_expected": (None if "pretrained" not in spec else
                              bool(spec.get("pretrained")) and spec.get("source") != "builtin"),
    }


def _as(kind, value):
    """``value`` as ``kind`` (str, bool, int or float), None where absent or not of a fitting JSON type."""
    fits = {str: (str,), bool: (bool,), int: (int,), float: (int, float)}[kind]
    if value is None or not isinstance(value, fits) or (kind is not bool and isinstance(value, bool)):
        return None
    return kind(value)


def _per_dataset_table(encoders, datasets, x, point, w, means: pl.DataFrame, version=core.LATEST) -> pl.DataFrame:
    """Per-dataset CRS: each dataset alone is the comparison set, dominance included."""
    per_q = np.swapaxes(point.q_dataset, 0, 1)  # [dataset, encoder, axis]
    parts = core.components(per_q, w, version)  # each [dataset, encoder]
    rows = [
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
        for d, dataset in enumerate(datasets)
        for e, encoder in enumerate(encoders)
    ]
    return (
        pl.DataFrame(rows)
        .join(means.select("encoder", "dataset", "n_seeds"), on=["encoder", "dataset"], maintain_order="left")
        .select("encoder", "dataset", "n_seeds", pl.exclude("encoder", "dataset", "n_seeds"))
        .sort(["dataset", "crs", "encoder"], descending=[False, True, False])
    )


def _metrics_pass(store, cmp: Comparison):
    """A ``predictions.MetricsPass`` where a store is given (the image bootstrap fills it as it reads each
    array, so ``_from_store`` need not read them again), else None."""
    if store is None:
        return None
    from crs.scoring.predictions import MetricsPass

    return MetricsPass(store, cmp.records, cmp.encoders, cmp.datasets)


def _from_store(store, cmp: Comparison, warnings: list[str], metrics_pass=None):
    """``predictions.probe_metrics`` where a store is given and holds them, else empty tables; ``metrics_pass``'s
    result where the image bootstrap handed it every pair."""
    from crs.scoring.predictions import MissingPredictions, ProbeMetrics, probe_metrics

    empty = ProbeMetrics(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), [])
    if store is None:
        warnings.append(
            "no store given: balanced accuracy, kappa, classwise ECE, AURC, temperature "
            "scaling and reliability bins need the stored probabilities (pass --store); the "
            "metric table holds the run-record metrics only"
        )
        return empty
    try:
        found = metrics_pass.result() if metrics_pass is not None and metrics_pass.complete else probe_metrics(
            store, cmp.records, cmp.encoders, cmp.datasets)
    except MissingPredictions as exc:  # absent, not damaged: a damaged store is refused (exit 2)
        warnings.append(f"{exc}; the metrics that need stored probabilities are left out")
        return empty
    warnings.extend(found.warnings)
    return found


def _metric_table(records: pl.DataFrame, probe_metrics: pl.DataFrame) -> pl.DataFrame:
    """The seed-aggregated table of the run-record metrics and of those from stored probabilities."""
    per_seed = records
    if probe_metrics.height:
        keys = ["encoder", "dataset", "seed", "fraction", "condition"]
        extra = probe_metrics.drop([c for c in analysis.METRICS if c in probe_metrics.columns])
        per_seed = records.join(
            extra.cast({"seed": records.schema["seed"], "fraction": records.schema["fraction"]}),
            on=keys, how="left",
        )
    names = [*analysis.METRICS, *[c for c in probe_metrics.columns if c in EXTRA_METRICS]]
    return analysis.metric_table(per_seed, names)


def _settings(options: ScoreOptions, cmp: Comparison, boot: Bootstrap, warnings: list[str]) -> dict:
    """The score's settings; the image bootstrap's ``image_method`` (per dataset: arrays computed exactly,
    shared) is recorded where it ran."""
    settings = {
        "crs_version": options.crs_version,
        "reference": options.reference,
        "weights": dict(zip(COMPONENTS, options.weights, strict=True)),
        "bootstrap": {"n": int(options.n_bootstrap), "unit": boot.unit, "seed": options.seed,
                      "confidence": CONFIDENCE},
        "seeds": [int(s) for s in cmp.seeds],
        "fractions": [float(f) for f in sorted(set(cmp.used.get_column("fraction").to_list()))],
        "datasets": list(cmp.datasets),
        "excluded": cmp.excluded,
        "simplex_step": options.simplex_step,
        "warnings": warnings,
    }
    if boot.unit != options.bootstrap_unit:
        settings["bootstrap"]["requested_unit"] = options.bootstrap_unit
    if boot.image_method and boot.unit != "seed":
        settings["bootstrap"]["image_method"] = boot.image_method
    return settings


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
