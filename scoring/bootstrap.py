"""Paired seed bootstrap, intervals and the tier, a confidence set for the best (docs/crs-v1.md section 5).

Each of B replicates draws S seed indices with replacement; the draw is the same for
every encoder and dataset (paired: seed s is the same label subset and initialisation
for every encoder). A replicate's seed means are a weighted mean with weights
count(s) / S, so all replicates come out of one einsum, and ``crs.score`` scores them
all at once, recomputing q, dominance, balance, worst axis, CRS and ranks per replicate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.errors import BadInput
from crs.scoring.axes import AXES
from crs.scoring.best_set import best_set
from crs.scoring.crs import (
    DEFAULT_WEIGHTS,
    LATEST,
    MEDIAN,
    Noise,
    get,
    replicate_estimate,
)
from crs.scoring.ranks import rank_desc, tie_group

CONFIDENCE = 0.95
UNIT_WORDS = {"seed": "resampling seeds", "image": "resampling test images",
              "both": "resampling seeds and test images"}  # what each bootstrap unit draws, in words


def unit_words(unit: str | None) -> str:
    """What a bootstrap unit ('seed', 'image', 'both') resamples, in plain words: 'resampling seeds and test
    images'."""
    return UNIT_WORDS.get(str(unit), f"resampling by {unit}")


class Replicates(NamedTuple):
    axis: np.ndarray  # [replicate, encoder, axis], seed-mean axis value averaged over datasets
    q: np.ndarray  # [replicate, encoder, axis], overall q
    dominance: np.ndarray  # [replicate, encoder]
    balance: np.ndarray  # [replicate, encoder]
    worst_axis: np.ndarray  # [replicate, encoder]
    crs: np.ndarray  # [replicate, encoder]
    rank: np.ndarray  # [replicate, encoder], 1 = best, ties averaged
    noise: Noise | None = None  # v2: the noise of q the replicates measure, which the point estimate takes out
    noise_by_dataset: Noise | None = None  # v2: the same per dataset, leading axis the dataset (per-dataset CRS)


def seed_tensor(
    axes: pl.DataFrame, encoders: Sequence[str], datasets: Sequence[str]
) -> tuple[np.ndarray, list[int]]:
    """Axis values x [encoder, dataset, seed, axis] from ``axes_by_seed`` rows, and the seeds.

    Every (encoder, dataset) must have the same seeds, since the bootstrap pairs them;
    raises BadInput (a ValueError) naming the first (encoder, dataset) that lacks a seed others have.
    """
    rows = axes.filter(
        pl.col("encoder").is_in(list(encoders)) & pl.col("dataset").is_in(list(datasets))
    )
    seeds = sorted(rows.get_column("seed").unique().to_list())
    have = rows.group_by("encoder", "dataset").agg(pl.col("seed").unique().sort())
    have_map = {(r["encoder"], r["dataset"]): r["seed"] for r in have.iter_rows(named=True)}
    for e in encoders:
        for d in datasets:
            lacks = sorted(set(seeds) - set(have_map.get((e, d), [])))
            if lacks:
                raise BadInput(
                    f"encoder {e!r} on dataset {d!r} lacks seed(s) {lacks} that other runs "
                    f"have (seeds in the comparison set: {seeds}); the paired bootstrap needs "
                    "the same seeds everywhere: run the probe for them or drop those seeds"
                )
    grid = (
        pl.DataFrame({"encoder": list(encoders)}, schema={"encoder": pl.String})
        .join(pl.DataFrame({"dataset": list(datasets)}, schema={"dataset": pl.String}), how="cross")
        .join(pl.DataFrame({"seed": seeds}, schema={"seed": rows.schema["seed"]}), how="cross")
    )
    # join onto the full grid so the reshape follows the requested encoder/dataset order
    x = grid.join(rows, on=["encoder", "dataset", "seed"], how="left", maintain_order="left")
    values = x.select(AXES).to_numpy().astype(float)
    return values.reshape(len(encoders), len(datasets), len(seeds), len(AXES)), seeds


def draw_seeds(n_seeds: int, n_bootstrap: int, seed: int) -> np.ndarray:
    """Seed indices [replicate, draw] in [0, n_seeds), from numpy's Generator(PCG64(seed))."""
    if n_seeds < 1 or n_bootstrap < 1:
        raise ValueError(
            f"need at least one seed and one replicate, got {n_seeds} and {n_bootstrap}"
        )
    return np.random.default_rng(seed).integers(0, n_seeds, size=(n_bootstrap, n_seeds))


def seed_weights(draw: np.ndarray, n_seeds: int) -> np.ndarray:
    """Weights [replicate, seed] = (times seed s was drawn) / (draws per replicate)."""
    b, s = draw.shape
    offsets = draw + n_seeds * np.arange(b)[:, None]
    counts = np.bincount(offsets.ravel(), minlength=b * n_seeds).reshape(b, n_seeds)
    return counts / s


def seed_scale(n_seeds: int, confidence: float = CONFIDENCE) -> float:
    """The factor on each seed's deviation from the seed mean before the seeds are resampled.

    The mean of S seeds drawn with replacement from S values spreads sqrt((S-1)/S) as
    much as the seed mean does between runs, and its percentile interval has normal
    quantiles where a mean of S seeds needs Student's t with S-1 degrees of freedom.
    sqrt(S/(S-1)) t_{S-1} / z makes the resampled interval the t interval of the seed
    mean: 1.58 at S = 5, 1.23 at S = 10, 1 for a single seed (nothing to widen).
    Without it, 5 seeds gave L intervals that held the truth 82-89 % of the time
    (docs/bootstrap-coverage.md).
    """
    if n_seeds < 2:
        return 1.0
    from scipy.stats import norm, t  # scipy.stats: only the seed widening needs it

    p = (1.0 + confidence) / 2.0
    return math.sqrt(n_seeds / (n_seeds - 1)) * float(t.ppf(p, n_seeds - 1) / norm.ppf(p))


def variance_scale(n_seeds: int) -> float:
    """sqrt(S / (S - 1)): the factor on each seed's deviation that makes the resampled mean of S seeds spread as
    the seed mean does between runs (its variance, not the t interval ``seed_scale`` gives); 1 for one seed."""
    return math.sqrt(n_seeds / (n_seeds - 1)) if n_seeds > 1 else 1.0


def unclipped_axis(version: str) -> int | None:
    """The axis ``resample_seeds`` leaves unclipped under a CRS version: C where its estimator may exceed 1
    (``Calibration.unclipped``: v2's 1 - kappa S, above 1 where S is estimated below 0); none for v1, whose every
    axis lies in [0, 1]."""
    return AXES.index("calibration") if get(version).calibration.unclipped else None


def resample_seeds(w: np.ndarray, x: np.ndarray, per_replicate: bool = False,
                   unclipped: int | None = None, factor: float | None = None) -> np.ndarray:
    """Replicate seed means [replicate, ...] of x [..., seed] under seed weights w [replicate, seed].

    Each seed's deviation from the seed mean is widened by ``seed_scale`` first (the seed
    mean itself is kept), and the means are clipped to [0, 1], the range of every value
    resampled here (axes, AUROC, retention). ``per_replicate``: x is [replicate, ..., seed],
    each replicate its own values (the image bootstrap); otherwise every replicate
    resamples the same x. NaN in a cell's seeds gives NaN for that cell. ``unclipped``: the index, on
    x's second-to-last axis (the axis of the four axes), of a value with no such range: CRS v2's C,
    1 - kappa S, which lies above 1 where S is estimated below 0 (crs.scoring.calibration). ``factor``: the
    widening (default ``seed_scale``; ``variance_scale`` for the spread CRS v2's estimate takes out).
    """
    x = np.asarray(x, dtype=float)
    mean = x.mean(axis=-1, keepdims=True)
    wide = mean + (seed_scale(x.shape[-1]) if factor is None else factor) * (x - mean)
    means = np.einsum("bs,b...s->b..." if per_replicate else "bs,...s->b...", w, wide)
    if unclipped is None:
        return np.clip(means, 0.0, 1.0)
    free = np.arange(x.shape[-2]) == unclipped
    return np.where(free, means, np.clip(means, 0.0, 1.0))


def replicates(
    x_seed: np.ndarray,
    draw: np.ndarray,
    reference: int | str = MEDIAN,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    version: str = LATEST,
) -> Replicates:
    """Score each replicate of a draw [replicate, draw] of x_seed [encoder, dataset, seed, axis]."""
    x_seed = np.moveaxis(np.asarray(x_seed, dtype=float), 2, -1)  # [encoder, dataset, axis, seed]
    free = unclipped_axis(version)
    w = seed_weights(draw, x_seed.shape[-1])
    x = resample_seeds(w, x_seed, unclipped=free)  # [replicate, encoder, dataset, axis]
    spread = resample_seeds(w, x_seed, unclipped=free, factor=variance_scale(x_seed.shape[-1]))
    return score_replicates(x, reference, weights, version, spread)


def seed_means_of(x_seed_rep: np.ndarray, draw: np.ndarray | None, unclipped: int | None = None,
                  factor: float | None = None) -> np.ndarray:
    """Seed means x [replicate, encoder, dataset, axis] of per-replicate x [replicate, encoder, dataset, seed, axis].

    ``draw`` [replicate, draw] resamples the seeds too (bootstrap unit 'both'); None
    averages every seed once (unit 'image').
    """
    x_seed_rep = np.asarray(x_seed_rep, dtype=float)
    if draw is None:
        return x_seed_rep.mean(axis=3)
    w = seed_weights(draw, x_seed_rep.shape[3])
    return resample_seeds(w, np.moveaxis(x_seed_rep, 3, -1), per_replicate=True, unclipped=unclipped,
                          factor=factor)


def score_replicates(
    x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST,
    x_spread: np.ndarray | None = None,
) -> Replicates:
    """Score replicate seed means x [replicate, encoder, dataset, axis]: q, components, CRS, ranks (CRS ``version``);
    v2 as an estimate (``crs.scoring.crs.estimate``), keeping the point's noise (overall and per dataset) for the
    point estimate. ``x_spread``: the replicates with the seeds resampled by ``variance_scale`` (None: x)."""
    s, noise, by_dataset = replicate_estimate(x, reference, weights, version, x_spread)
    return Replicates(
        axis=x.mean(axis=-2),
        q=s.q,
        dominance=s.dominance,
        balance=s.balance,
        worst_axis=s.worst_axis,
        crs=s.crs,
        rank=rank_desc(s.crs),
        noise=noise,
        noise_by_dataset=by_dataset,
    )


def interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0 (replicates): the (1-c)/2 and (1+c)/2 quantiles, linear."""
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail], axis=0)
    return low, high


def summarise(
    reps: Replicates,
    encoders: Sequence[str],
    point_crs: np.ndarray,
    confidence: float = CONFIDENCE,
    reference: int | str = MEDIAN,
) -> pl.DataFrame:
    """One row per encoder: CRS, difference, rank and axis intervals, tie group, P(rank 1), the tier.

    Rank intervals use the observed ranks at the tails (numpy's 'lower' and 'higher'
    quantile methods), so their ends are ranks some replicate gave; ``tie_group`` says
    which places they cover (``ranks.tie_group``). P(rank 1) shares a replicate's first
    place equally among encoders tied for the top CRS. The leader is the top point
    estimate (the first encoder given, on a tie). ``crs_diff`` is the point
    CRS_e - CRS_leader, ``crs_diff_low`` and ``crs_diff_high`` the percentile interval of
    that paired difference over the replicates (0, 0, 0 for the leader). The tier is the
    simultaneous ``confidence`` set for the best encoder (``best_set.best_set``): one statement
    over every comparison, allowing for the leader being chosen from the same replicates;
    widened by every encoder whose difference interval holds 0. The max-type set alone is
    valid for an unbiased CRS estimate; CRS v1's is biased in close races (a leader's dominance
    is pulled towards the middle), and the widening keeps the set honest there. CRS v2's
    estimate takes that pull out (crs.scoring.crs.estimate): on simulated benchmarks its set
    alone held the true best in 0.975 (four encoders within 2 points) and 0.998 (paper-shaped)
    of them, the widened one in 0.99 and 1.00 (docs/bootstrap-coverage.md).

    ``reference`` (an encoder index, or 'median') marks the reference row
    (``reference`` column). Its CRS is the zero point of the scale, and its q is 0 by
    definition, so its ``crs_low``/``crs_high`` and q intervals are null rather than an
    interval that pretends precision; its difference, rank and axis intervals are kept.

    A replicate without a CRS (``incomplete``: the image bootstrap drew a test split with
    no class left to score, see ``metrics.weighted_macro_auroc``) leaves no interval:
    the CRS, difference and rank intervals and P(rank 1) are NaN, the tie group and the
    tier null for every encoder, never a tier of the leader alone.
    """
    point_crs = np.asarray(point_crs, dtype=float)
    leader = int(np.argmax(point_crs))
    if incomplete(reps).any():
        columns = _without_intervals(reps, encoders, point_crs - point_crs[leader], leader)
    else:
        columns = _intervals(reps, encoders, point_crs, leader, confidence)
    return _mark_reference(pl.DataFrame(_with_axis_intervals(columns, reps, confidence)), reference)


def _intervals(reps: Replicates, encoders: Sequence[str], point_crs: np.ndarray, leader: int,
               confidence: float) -> dict:
    crs_low, crs_high = interval(reps.crs, confidence)
    tail = 100.0 * (1.0 - confidence) / 2.0
    rank_low = np.percentile(reps.rank, tail, axis=0, method="lower").astype(float)
    rank_high = np.percentile(reps.rank, 100.0 - tail, axis=0, method="higher").astype(float)
    top = reps.crs == reps.crs.max(axis=1, keepdims=True)  # [replicate, encoder]
    p_rank1 = (top / top.sum(axis=1, keepdims=True)).mean(axis=0)
    diff = reps.crs - reps.crs[:, [leader]]  # [replicate, encoder], encoder minus leader
    diff_low, diff_high = interval(diff, confidence)
    diff_low[leader] = diff_high[leader] = 0.0  # exactly, not a rounding of x - x
    tier = best_set(reps.crs, point_crs, confidence)
    if tier is None:  # a point CRS that is not finite: no set, as with no interval
        tier = pl.Series("tier", [None] * len(encoders), dtype=pl.Boolean)
    else:  # widened by every encoder not clearly behind the leader (the docstring says why)
        tier = tier | ((diff_low <= 0.0) & (diff_high >= 0.0))
    return {
        "encoder": list(encoders),
        "crs_low": crs_low,
        "crs_high": crs_high,
        "crs_diff": point_crs - point_crs[leader],
        "crs_diff_low": diff_low,
        "crs_diff_high": diff_high,
        "rank_low": rank_low,
        "rank_high": rank_high,
        "tie_group": pl.Series("tie_group", [tie_group(lo, hi) for lo, hi in zip(rank_low, rank_high, strict=True)],
                               dtype=pl.String),
        "p_rank1": p_rank1,
        "tier": tier,
    }


def incomplete(reps: Replicates) -> np.ndarray:
    """bool [replicate]: some encoder's CRS is not finite in the replicate."""
    return ~np.isfinite(reps.crs).all(axis=1)


def _without_intervals(reps: Replicates, encoders: Sequence[str], crs_diff: np.ndarray, leader: int) -> dict:
    n = len(encoders)
    nan = np.full(n, np.nan)
    diff_bound = nan.copy()
    diff_bound[leader] = 0.0
    return {
        "encoder": list(encoders), "crs_low": nan, "crs_high": nan, "crs_diff": crs_diff,
        "crs_diff_low": diff_bound, "crs_diff_high": diff_bound, "rank_low": nan, "rank_high": nan,
        "tie_group": pl.Series("tie_group", [None] * n, dtype=pl.String),
        "p_rank1": nan, "tier": pl.Series("tier", [None] * n, dtype=pl.Boolean),
    }  # fmt: skip


def _mark_reference(table: pl.DataFrame, reference: int | str) -> pl.DataFrame:
    """Add the ``reference`` column and null the reference's CRS and q intervals (see ``summarise``)."""
    n = table.height
    is_ref = np.zeros(n, dtype=bool)
    if not isinstance(reference, str):
        is_ref[int(reference)] = True
    blank = ["crs_low", "crs_high", *[f"q_{a}_{end}" for a in AXES for end in ("low", "high")]]
    return table.with_columns(
        pl.Series("reference", is_ref), *[pl.when(pl.Series(is_ref)).then(None).otherwise(pl.col(c)).alias(c)
                                          for c in blank]
    ).select("encoder", "reference", pl.exclude("encoder", "reference"))


def _with_axis_intervals(columns: dict, reps: Replicates, confidence: float) -> dict:
    """``columns`` plus the axis and q intervals (NaN where a replicate has no value)."""
    axis_low, axis_high = interval(reps.axis, confidence)
    q_low, q_high = interval(reps.q, confidence)
    for k, a in enumerate(AXES):
        columns[f"{a}_low"], columns[f"{a}_high"] = axis_low[:, k], axis_high[:, k]
    for k, a in enumerate(AXES):
        columns[f"q_{a}_low"], columns[f"q_{a}_high"] = q_low[:, k], q_high[:, k]
    return columns


def paired_bootstrap(
    x_seed: np.ndarray,
    encoders: Sequence[str],
    point_crs: np.ndarray,
    *,
    reference: int | str = MEDIAN,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    n_bootstrap: int = 1000,
    seed: int = 0,
    version: str = LATEST,
) -> pl.DataFrame:
    """``summarise`` of ``n_bootstrap`` paired seed replicates at the ``CONFIDENCE`` level; one seed always gives
    one frame."""
    draw = draw_seeds(np.asarray(x_seed).shape[2], n_bootstrap, seed)
    return summarise(replicates(x_seed, draw, reference, weights, version), encoders, point_crs, CONFIDENCE,
                     reference)
