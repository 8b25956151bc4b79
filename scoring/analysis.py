"""Comparisons built on the scores: Pareto sets, weight sensitivity, the seed-aggregated table.

Pure functions of arrays and polars DataFrames.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.foundations.conditions import parse
from crs.foundations.errors import BadInput
from crs.scoring.axes import FRACTION_TOL, retain
from crs.scoring.bootstrap import resample_seeds, seed_weights
from crs.scoring.crs import combine, dominates

SIMPLEX_STEP = 0.05
METRICS = ("auroc", "ece", "brier", "nll", "accuracy")


# ------------------------------------------------------------------ Pareto
def pareto_front(q: np.ndarray) -> np.ndarray:
    """bool [encoder]: not dominated by any other encoder on q [encoder, axis] (``crs.dominates``)."""
    return ~dominates(q).any(axis=0)


def pareto_table(
    encoders: Sequence[str], datasets: Sequence[str], q_dataset: np.ndarray, q: np.ndarray
) -> pl.DataFrame:
    """One row per (scope, encoder) with ``pareto`` (non-dominated); scope is a dataset or 'overall'.

    q_dataset [encoder, dataset, axis] per dataset, q [encoder, axis] over the comparison set.
    """
    frames = []
    scopes = [(d, q_dataset[:, j, :]) for j, d in enumerate(datasets)] + [("overall", q)]
    for scope, values in scopes:
        frames.append(
            pl.DataFrame(
                {
                    "scope": [scope] * len(encoders),
                    "encoder": list(encoders),
                    "pareto": pareto_front(values),
                    "dominated_by": [int(v) for v in dominates(values).sum(axis=0)],
                }
            )
        )
    return pl.concat(frames)


# ------------------------------------------------------- weight sensitivity
def simplex_grid(step: float = SIMPLEX_STEP) -> np.ndarray:
    """Weights [point, 3] on the simplex grid with spacing ``step`` (1/step must be a whole number)."""
    n = round(1.0 / step)
    if n < 1 or abs(n * step - 1.0) > 1e-9:
        raise BadInput(f"the simplex step must divide 1 into whole parts (e.g. 0.05), got {step!r}")
    pts = [(i, j, n - i - j) for i in range(n + 1) for j in range(n + 1 - i)]
    return np.asarray(pts, dtype=float) / n


def weight_sensitivity(
    encoders: Sequence[str],
    dominance: np.ndarray,
    balance: np.ndarray,
    worst_axis: np.ndarray,
    step: float = SIMPLEX_STEP,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Who leads CRS at each point of the weight simplex, and how much of it each leader holds.

    Returns (grid, leaders). grid: one row per weight point (w_dominance, w_balance,
    w_worst_axis, leader, crs of the leader, margin to the runner-up); ties go to the
    encoder listed first. leaders: one row per encoder that leads somewhere, with the
    share of grid points it leads and the mean weights of its region.
    """
    w = simplex_grid(step)
    crs = np.stack(
        [combine(dominance, balance, worst_axis, tuple(p)) for p in w]
    )  # [point, encoder]
    lead = np.argmax(crs, axis=1)
    top = np.sort(crs, axis=1)
    margin = top[:, -1] - top[:, -2] if crs.shape[1] > 1 else np.full(len(w), np.nan)
    grid = pl.DataFrame(
        {
            "w_dominance": w[:, 0],
            "w_balance": w[:, 1],
            "w_worst_axis": w[:, 2],
            "leader": [encoders[i] for i in lead],
            "crs": crs[np.arange(len(w)), lead],
            "margin": margin,
        }
    )
    leaders = (
        grid.group_by("leader")
        .agg(
            share=pl.len() / len(w),
            points=pl.len(),
            w_dominance=pl.col("w_dominance").mean(),
            w_balance=pl.col("w_balance").mean(),
            w_worst_axis=pl.col("w_worst_axis").mean(),
        )
        .sort(["share", "leader"], descending=[True, False])
        .rename({"leader": "encoder"})
    )
    return grid, leaders


# ------------------------------------------------ the seed-aggregated table
def metric_table(records: pl.DataFrame, metrics: Sequence[str] = METRICS) -> pl.DataFrame:
    """One row per (encoder, dataset, fraction, condition, metric): mean, std and count over seeds.

    ``records`` has one row per (encoder, dataset, seed, fraction, condition) and a
    column per metric (run records, optionally joined with metrics from stored
    probabilities). std is the sample standard deviation (ddof 1; null for one seed).
    Null and NaN values are left out of all three.
    """
    present = [m for m in metrics if m in records.columns]
    keys = ["encoder", "dataset", "fraction", "condition"]
    long = (
        records.select(*keys, "seed", *[pl.col(m).cast(pl.Float64) for m in present])
        .unpivot(index=[*keys, "seed"], on=present, variable_name="metric")
        .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
    )
    return (
        long.group_by(*keys, "metric")
        .agg(mean=pl.col("value").mean(), std=pl.col("value").std(), n_seeds=pl.len().cast(pl.Int64))
        .sort(*keys, "metric")
    )


def robustness_detail(used: pl.DataFrame) -> pl.DataFrame:
    """Retention per (encoder, dataset, condition) at fraction 1, seed mean, with family and severity.

    ``used`` is ``axes.used_rows`` output; retention is docs/crs-v1.md's retain(A(1, c)) with
    the seed's own D. Shift conditions have family 'shift' and a null severity.
    """
    full = used.filter(pl.col("full"))
    d = full.filter(pl.col("kind") == "clean").select("encoder", "dataset", "seed", d=pl.col("auroc"))
    rows = (
        full.filter(pl.col("kind") != "clean")
        .join(d, on=["encoder", "dataset", "seed"])
        .with_columns(retention=retain(pl.col("auroc"), pl.col("d")))
    )
    out = rows.group_by("encoder", "dataset", "condition", "kind").agg(
        auroc=pl.col("auroc").mean(), retention=pl.col("retention").mean(), n_seeds=pl.len()
    )
    names = out["condition"].to_list()
    parsed = [parse(c) for c in names]
    return out.with_columns(
        family=pl.Series([p.family if p.kind == "perturbed" else "shift" for p in parsed], dtype=pl.String),
        severity=pl.Series([p.severity for p in parsed], dtype=pl.Int64),
    ).sort("encoder", "dataset", "kind", "family", "severity")


def label_efficiency_curve(
    used: pl.DataFrame, draw: np.ndarray, seeds: Sequence[int], confidence: float = 0.95
) -> pl.DataFrame:
    """Clean AUROC per (encoder, dataset, fraction): seed mean and a seed-bootstrap percentile interval.

    ``draw`` [replicate, draw] are seed indices into ``seeds`` (the score's seed draw, so
    the intervals are paired with the CRS intervals).
    """
    clean = used.filter(pl.col("kind") == "clean").select("encoder", "dataset", "fraction", "seed", "auroc")
    keys = clean.select("encoder", "dataset", "fraction").unique().sort("encoder", "dataset", "fraction")
    seed_grid = pl.DataFrame({"seed": list(seeds)}, schema={"seed": clean.schema["seed"]})
    grid = keys.join(seed_grid, how="cross").join(
        clean, on=["encoder", "dataset", "fraction", "seed"], how="left", maintain_order="left"
    )
    a = grid["auroc"].to_numpy().reshape(keys.height, len(seeds))  # [cell, seed]
    reps = resample_seeds(seed_weights(draw, len(seeds)), a)  # [replicate, cell]
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(reps, [tail, 100.0 - tail], axis=0)
    return keys.with_columns(
        auroc=pl.Series(a.mean(axis=1)), auroc_low=pl.Series(low), auroc_high=pl.Series(high)
    )


def rank_distribution(encoders: Sequence[str], rank: np.ndarray) -> pl.DataFrame:
    """Share of bootstrap replicates giving each encoder each CRS rank, from rank [replicate, encoder].

    One row per (encoder, rank) that some replicate gave; tied replicates give average
    ranks (1.5, ...), kept as they are. An encoder's shares sum to 1.
    """
    rank = np.asarray(rank, dtype=float)
    frames = []
    for e, name in enumerate(encoders):
        values, counts = np.unique(rank[:, e], return_counts=True)
        frames.append(pl.DataFrame({"encoder": [name] * len(values), "rank": values,
                                    "share": counts / rank.shape[0], "replicates": counts.astype(np.int64)}))
    return pl.concat(frames) if frames else pl.DataFrame(
        schema={"encoder": pl.String, "rank": pl.Float64, "share": pl.Float64, "replicates": pl.Int64})


def calibration_under_shift(records: pl.DataFrame) -> pl.DataFrame:
    """Seed-mean ECE at fraction 1 on the clean test split and on each shift target, per (encoder, dataset)."""
    full = records.filter((pl.col("fraction") - 1.0).abs() <= FRACTION_TOL)
    clean = full.filter(pl.col("condition") == "clean").group_by("encoder", "dataset").agg(
        ece_clean=pl.col("ece").mean()
    )
    shift = (
        full.filter(pl.col("condition").str.starts_with("shift:"))
        .group_by("encoder", "dataset", "condition")
        .agg(ece_shift=pl.col("ece").mean(), n_seeds=pl.len())
    )
    return shift.join(clean, on=["encoder", "dataset"], how="left").sort("encoder", "dataset", "condition")
