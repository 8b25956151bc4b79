"""Seed-mean axis values -> reference-relative scores q, the three components and CRS, by a CRS version.

Pure numpy on arrays. The last three axes are always [encoder, dataset, axis] (or
[encoder, axis] once q is averaged over datasets); any leading axes are replicates, so
the bootstrap scores all its replicates in one call and dominance is recomputed inside
each replicate. Axis order is ``crs.scoring.axes.AXES``. Each version's q and components are its
``Definition`` (``crs.scoring.versions``: v1 as docs/crs-v1.md sections 2 and 3 define it, kept bit for bit,
and v2, the default, as docs/crs-v2.md defines it); this module chooses by ``version`` and combines. The
versions' own functions and constants are re-exported here under the names the scoring code uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.scoring.versions import LATEST, VERSIONS, constants, get
from crs.scoring.versions import check as check_version
from crs.scoring.versions.common import (
    DEFAULT_WEIGHTS,
    MEDIAN,
    WEIGHT_TOL,
    Noise,
    check_weights,
    reference_noise,
    reference_values,
    variance_over_replicates,
)
from crs.scoring.versions.v1 import DOMINANCE_TOL, balance, dominance, dominates, q_scores, worst_axis
from crs.scoring.versions.v2 import (
    BALANCE_OFFSET,
    CALIBRATION_SCALE,
    DOMINANCE_SCALE,
    KINK_SCALE,
    NOISE_FLOOR,
    PHI_0,
    Q_FLOOR,
    REFERENCE_SCALE,
    WORST_SCALE,
    balance_v2,
    dominance_degree,
    dominance_v2,
    expected_min,
    lipschitz_bound,
    q_scores_v2,
    reference_slope,
    worst_v2,
)

__all__ = [
    "BALANCE_OFFSET", "CALIBRATION_SCALE", "DEFAULT_WEIGHTS", "DOMINANCE_SCALE", "DOMINANCE_TOL", "KINK_SCALE",
    "LATEST", "MEDIAN", "NOISE_FLOOR", "PHI_0", "Q_FLOOR", "REFERENCE_SCALE", "VERSIONS", "WEIGHT_TOL", "WORST_SCALE",
    "Components", "Noise",
    "ReplicateEstimate", "Scored", "add", "balance", "balance_v2", "check_version", "check_weights", "combine",
    "components", "constants", "dominance", "dominance_degree", "dominance_v2", "dominates", "estimate",
    "expected_min", "lipschitz_bound", "local_slope", "noise_of", "point_estimate", "q_of", "q_scores",
    "q_scores_v2", "reference_noise", "reference_slope", "reference_values", "replicate_estimate", "score",
    "worst_axis", "worst_v2",
]  # fmt: skip


def local_slope(x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
                version: str = LATEST, noise: Noise | None = None, step: float = 1e-4) -> float:
    """The measured slope of CRS at the observed profile x [encoder, dataset, axis], in points per unit of one axis
    value: the largest central difference max_{e, x_i} |CRS_e(x + step 1_i) - CRS_e(x - step 1_i)| / (2 step) over
    every encoder e and every single seed-mean axis value x_i, of the point estimate with ``noise`` taken out
    (``point_estimate``). ``lipschitz_bound`` is its worst case over all profiles; this is what a change of one
    axis value does near the profiles actually scored."""
    x = np.asarray(x, dtype=float)
    bump = step * np.eye(x.size).reshape(x.size, *x.shape)  # [value, encoder, dataset, axis]
    up = point_estimate(x + bump, noise, reference, weights, version).crs  # [value, encoder]
    down = point_estimate(x - bump, noise, reference, weights, version).crs
    return float(np.max(np.abs(up - down)) / (2.0 * step))


class Scored(NamedTuple):
    q_dataset: np.ndarray  # [..., encoder, dataset, axis]
    q: np.ndarray  # [..., encoder, axis], mean over datasets
    dominance: np.ndarray  # [..., encoder]
    balance: np.ndarray  # [..., encoder]
    worst_axis: np.ndarray  # [..., encoder]
    crs: np.ndarray  # [..., encoder], in [0, 100]


class Components(NamedTuple):
    dominance: np.ndarray  # [..., encoder]
    balance: np.ndarray  # [..., encoder]
    worst_axis: np.ndarray  # [..., encoder]
    crs: np.ndarray  # [..., encoder]


def noise_of(q_reps: np.ndarray) -> Noise:
    """``Noise`` of replicates q [replicate, ..., encoder, axis]: variances over the replicates that have a value
    (a cell none has: 0, nothing taken out). From the covariances, so no [replicate, e, e', axis] array is made."""
    q_reps = np.asarray(q_reps, dtype=float)
    seen = ~np.isnan(q_reps)
    n = seen.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        centred = np.where(seen, q_reps - np.nansum(q_reps, axis=0) / np.maximum(n, 1), 0.0)
        pairs = np.einsum("r...ea,r...fa->...efa", seen.astype(float), seen.astype(float))
        cov = np.einsum("r...ea,r...fa->...efa", centred, centred) / np.maximum(pairs, 1.0)
    var = np.diagonal(cov, axis1=-3, axis2=-2)  # [..., axis, e]
    var = np.swapaxes(var, -1, -2)  # [..., e, axis]
    margin = var[..., :, None, :] + var[..., None, :, :] - 2.0 * cov
    return Noise(np.maximum(margin, 0.0), var)


def combine(
    dom: np.ndarray, bal: np.ndarray, worst: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS
) -> np.ndarray:
    """CRS_e = 100 (w_dom Dom_e + w_bal Bal_e + w_worst Worst_e) (docs/crs-v1.md section 3)."""
    w_dom, w_bal, w_worst = check_weights(weights)
    return 100.0 * (w_dom * dom + w_bal * bal + w_worst * worst)


def components(q: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST,
               noise: Noise | None = None) -> Components:
    """Dom, Bal, Worst and CRS [..., encoder] from q [..., encoder, axis], by the given CRS version's
    ``Definition.components``. ``noise``, the variance an estimate of q carries, is taken out of the smoothing
    scales by a version whose estimate does that (``Definition.takes_out_noise``: v2); v1 has nothing to take out."""
    dom, bal, worst = get(version).components(q, noise)
    return Components(dom, bal, worst, combine(dom, bal, worst, weights))


def q_of(x: np.ndarray, reference: int | str, version: str = LATEST, noise: np.ndarray | None = None,
         x_noise: np.ndarray | None = None) -> np.ndarray:
    """q [..., encoder, dataset, axis] by the given CRS version (``Definition.q``); ``noise``, the variance of
    x_e - x_ref an estimate carries (``Noise.d``), and ``x_noise``, that of x_e (``Noise.x``, which the median
    reference takes out), are taken out by a version that takes out noise (v2)."""
    definition = get(version)
    if noise is None or not definition.takes_out_noise:
        return definition.q(x, reference)
    return definition.q(x, reference, noise=noise, x_noise=x_noise)


def score(
    x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
    version: str = LATEST, noise: Noise | None = None,
) -> Scored:
    """Everything from seed-mean axis values x [..., encoder, dataset, axis].

    The overall q_e,a is the mean over the datasets given (the comparison set) of the per-dataset q
    (docs/crs-v1.md section 2, docs/crs-v2.md section 2); the components use the overall q. Without ``noise``
    this is the definition applied to x (the truth's CRS, were x the truth); ``estimate`` is what ``crs score``
    reports for measured x.
    """
    check_weights(weights)
    q_dataset = q_of(x, reference, version, *((None, None) if noise is None else (noise.d, noise.x)))
    q = q_dataset.mean(axis=-2)
    return Scored(q_dataset, q, *components(q, weights, version, noise))


def add(a: Noise, b: Noise) -> Noise:
    """The noise of a sum of independent noises."""
    d = None if a.d is None or b.d is None else a.d + b.d
    x = None if a.x is None or b.x is None else a.x + b.x
    return Noise(a.margin + b.margin, a.q + b.q, d, x)


class ReplicateEstimate(NamedTuple):
    scored: Scored  # the replicates' scores, their noise taken out
    noise: Noise | None  # the point estimate's noise (None: a version that takes none out, v1)
    noise_by_dataset: Noise | None  # the same per dataset, leading axis the dataset (per-dataset CRS; None: v1)


def replicate_estimate(x_reps: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
                       version: str = LATEST, x_spread: np.ndarray | None = None) -> ReplicateEstimate:
    """The bootstrap replicates' scores and the point estimate's noise, overall and per dataset, from replicate seed
    means x_reps [replicate, encoder, dataset, axis] (``estimate``). ``x_spread``: the same replicates without the
    seed widening (``crs.scoring.bootstrap.seed_scale``), whose spread is the point's noise; None: x_reps'. Each
    replicate's q is computed once."""
    check_weights(weights)
    if not get(version).takes_out_noise:
        return ReplicateEstimate(score(x_reps, reference, weights, version), None, None)
    own_x = x_reps if x_spread is None else x_spread
    reference_of = get(version).reference
    own_d = reference_noise(own_x, reference, reference_of)  # the point's noise in x - x_ref
    spread_d = own_d if x_spread is None else reference_noise(x_reps, reference, reference_of)
    own_v = variance_over_replicates(np.asarray(own_x, dtype=float))  # the point's noise in x
    spread_v = own_v if x_spread is None else variance_over_replicates(np.asarray(x_reps, dtype=float))
    q_dataset = q_of(x_reps, reference, version, own_d + spread_d, own_v + spread_v)  # [replicate, e, dataset, axis]
    q = q_dataset.mean(axis=-2)
    own_dataset = q_of(own_x, reference, version, own_d, own_v)  # draws of the point estimate's q
    spread = noise_of(q)
    own = noise_of(own_dataset.mean(axis=-2))._replace(d=own_d, x=own_v)
    scored = Scored(q_dataset, q, *components(q, weights, version, add(own, spread)))
    return ReplicateEstimate(scored, own, noise_of(np.swapaxes(own_dataset, -3, -2)))


def point_estimate(x: np.ndarray, noise: Noise | None, reference: int | str = MEDIAN,
                   weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST) -> Scored:
    """The point estimate from seed means x [encoder, dataset, axis] and its ``noise`` (``replicate_estimate``):
    v2 takes it out of the scales (``estimate``); v1, or v2 with no noise, is the definition applied to x."""
    return score(x, reference, weights, version, noise)


def estimate(x: np.ndarray, x_reps: np.ndarray, reference: int | str = MEDIAN,
             weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST,
             x_spread: np.ndarray | None = None) -> tuple[Scored, Scored, Noise | None]:
    """(the point estimate, its bootstrap replicates, the point's noise) from the seed means x [encoder, dataset,
    axis] and their replicates x_reps [replicate, encoder, dataset, axis] (docs/crs-v2.md section 3).

    v2's dominance and worst axis smooth q with Gaussian scales; a measured q carries noise, and smoothing a noisy
    q is smoothing with a wider scale, which pulls the leader down. So the point estimate smooths with the scales
    less its own noise v (the spread of the replicates without the seed widening, ``x_spread``), and each
    replicate, a further draw of noise of variance w around the point (the replicates' own spread), with the scales
    less v + w: its mean over that draw is then the point estimate. v1 scores both as they are (Noise None).
    """
    reps, noise, _ = replicate_estimate(x_reps, reference, weights, version, x_spread)
    return point_estimate(x, noise, reference, weights, version), reps, noise
