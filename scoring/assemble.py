"""The tables and settings of ``Scores``, put together from the point estimate, the bootstrap and what the
store's probabilities gave."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.scoring import analysis, diagnostics, settle, verdict
from crs.scoring import crs as core
from crs.scoring.axes import AXES, FRACTION_TOL
from crs.scoring.bootstrap import CONFIDENCE, replicates, seed_tensor
from crs.scoring.comparison import Comparison
from crs.scoring.options import ScoreOptions
from crs.scoring.ranks import rank_desc
from crs.scoring.replicates import Bootstrap
from crs.scoring.versions import get

COMPONENTS = ("dominance", "balance", "worst_axis")


def analysis_tables(cmp: Comparison, point, boot: Bootstrap, simplex_step: float, found) -> dict:
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


EXTRA_METRICS = (
    "balanced_accuracy", "kappa_quadratic", "classwise_ece", "aurc",
    "temperature", "ece_ts", "brier_ts", "nll_ts",
)  # fmt: skip


def settings_of(options: ScoreOptions, cmp: Comparison, boot: Bootstrap, warnings: list[str], x: np.ndarray,
                unmeasured: list[dict]) -> dict:
    """The score's settings; the image bootstrap's ``image_method`` (per dataset: arrays computed exactly,
    shared) is recorded where it ran, and each dataset's test images; the version's constants where it has them.
    Under a version that states a worst-case slope (v2), also ``sensitivity``: CRS points per 0.01 of one axis
    value, the worst case (``Definition.lipschitz_bound``) and the largest measured at the profile scored,
    x [encoder, dataset, axis] (``crs.local_slope``). ``not_measurable``:
    the datasets no probe can measure (``measurable.not_measurable``), from which the verdict names no leader."""
    settings = {
        "crs_version": options.crs_version,
        "reference": options.reference,
        "weights": dict(zip(COMPONENTS, options.weights, strict=True)),
        "bootstrap": {"n": int(options.bootstrap), "unit": boot.unit, "seed": options.seed,
                      "confidence": CONFIDENCE},
        "seeds": [int(s) for s in cmp.seeds],
        "fractions": [float(f) for f in sorted(set(cmp.used.get_column("fraction").to_list()))],
        "datasets": list(cmp.datasets),
        "excluded": cmp.excluded,
        "simplex_step": options.simplex_step,
        "min_difference": options.min_difference,
        "warnings": warnings,
    }
    definition = get(options.crs_version)
    if definition.constants:  # v2's; v1 has none
        settings["crs_constants"] = dict(definition.constants)
    if definition.lipschitz_bound is not None:
        settings["sensitivity"] = {
            "bound": definition.lipschitz_bound(len(cmp.datasets), options.weights) * 0.01,
            "local_slope": core.local_slope(x, cmp.reference, options.weights, options.crs_version,
                                            boot.reps.noise) * 0.01}
    if boot.unit != options.bootstrap_unit:
        settings["bootstrap"]["requested_unit"] = options.bootstrap_unit
    if boot.image_method and boot.unit != "seed":
        settings["bootstrap"]["image_method"] = boot.image_method
    settings["not_measurable"] = unmeasured
    settings["test_images"] = test_images(cmp.records, cmp.datasets)
    return settings


def test_images(records: pl.DataFrame, datasets) -> dict[str, int]:
    """dataset -> images in its clean test split (the run records' n_eval at fraction 1); {} for records
    without n_eval."""
    if "n_eval" not in records.columns:
        return {}
    clean = records.filter((pl.col("condition") == "clean") & ((pl.col("fraction") - 1.0).abs() <= FRACTION_TOL))
    sizes = clean.group_by("dataset").agg(pl.col("n_eval").max()).drop_nulls()
    return {d: int(n) for d, n in sizes.sort("dataset").iter_rows() if d in set(datasets)}


def encoder_table(encoders, x, point, auroc, boot: pl.DataFrame, pareto: pl.DataFrame,
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


def per_dataset_table(encoders, datasets, x, point, w, means: pl.DataFrame, version=core.LATEST,
                      noise: core.Noise | None = None) -> pl.DataFrame:
    """Per-dataset CRS: each dataset alone is the comparison set, dominance included; v2 estimated with each
    dataset's own ``noise`` (``crs.scoring.bootstrap.Replicates.noise_by_dataset``) taken out."""
    per_q = np.swapaxes(point.q_dataset, 0, 1)  # [dataset, encoder, axis]
    parts = core.components(per_q, w, version, noise)  # each [dataset, encoder]
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


def axis_grid(means: pl.DataFrame, encoders: Sequence[str], datasets: Sequence[str]) -> np.ndarray:
    """Seed means x [encoder, dataset, axis] in the given order."""
    grid = pl.DataFrame({"encoder": list(encoders)}, schema={"encoder": pl.String}).join(
        pl.DataFrame({"dataset": list(datasets)}, schema={"dataset": pl.String}), how="cross"
    )
    x = grid.join(means, on=["encoder", "dataset"], how="left", maintain_order="left")
    return x.select(AXES).to_numpy().astype(float).reshape(len(encoders), len(datasets), len(AXES))


def settle_plans(cmp: Comparison, boot: Bootstrap, options: ScoreOptions, point_crs: np.ndarray,
                 tier: pl.Series, images: dict[str, int]) -> list[dict] | None:
    """``settle.plans`` for the members of the best set (``tier``, in ``cmp.encoders`` order): the default
    bootstrap's CRS against a seed-only bootstrap of the point per-seed axes with the same seed draw. None where
    the bootstrap did not resample seeds and test images together, or gave no set."""
    if boot.unit != "both" or tier.null_count():
        return None
    x_seed, _ = seed_tensor(boot.by_seed, cmp.encoders, cmp.datasets)  # [encoder, dataset, seed, axis]
    seed_only = replicates(x_seed, boot.draw, cmp.reference, options.weights, options.crs_version).crs
    return settle.plans(boot.reps.crs, seed_only, point_crs, list(cmp.encoders), tier.to_numpy(), images,
                        len(cmp.seeds), options.min_difference)


def diagnosed(table: pl.DataFrame, records: pl.DataFrame, tables: dict, settings: dict,
              plans: list[dict] | None = None):
    """(the encoders table with its tie marks, the probe diagnostics, the verdict naming the marked axes and the
    shift targets every encoder collapsed on;
    ``plans``: ``settle_plans``)."""
    health = diagnostics.probe_health(records)
    marked = diagnostics.marked_axes(health)
    table = table.with_columns(ties_marked=pl.Series([diagnostics.marks_text(marked.get(e, []))
                                                      for e in table["encoder"]], dtype=pl.String))
    decided = verdict.build(table, tables["weight_leaders"], tables["weight_grid"], settings, plans)
    decided["notes"].extend(diagnostics.notes(records))
    decided["shift_collapse"] = verdict.shift_collapse(tables["robustness"])
    return table, health, decided
