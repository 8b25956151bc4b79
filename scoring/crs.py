"""Seed-mean axis values -> reference-relative scores q, the three components and CRS.

Pure numpy on arrays. The last three axes are always [encoder, dataset, axis] (or
[encoder, axis] once q is averaged over datasets); any leading axes are replicates, so
the bootstrap scores all its replicates in one call and dominance is recomputed inside
each replicate. Axis order is ``crs.scoring.axes.AXES``. Two versions of the score live here,
chosen by ``version`` ("1" or "2", ``VERSIONS``): v1 as docs/crs-v1.md sections 2 and 3 define it,
kept bit for bit, and v2 (the default) as docs/crs-v2.md defines it: q with floored
denominators, a continuous dominance degree and a balance whose slope is bounded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

from crs.errors import BadInput
from crs.names import CRS_LATEST, CRS_VERSIONS
from crs.scoring.calibration import CALIBRATION_LOSS_SCALE

MEDIAN = "median"
DOMINANCE_TOL = 1e-9
WEIGHT_TOL = 1e-9  # how far from 1 the weights' sum may be
DEFAULT_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)  # (dominance, balance, worst axis)

VERSIONS, LATEST = CRS_VERSIONS, CRS_LATEST
# CRS v2's constants (docs/crs-v2.md says how each was chosen)
Q_FLOOR = 0.35  # g: q's denominators are at least this, so no axis moves q by more than 1/g its change
DOMINANCE_SCALE = 0.1  # s: a dominance degree is prod_a Phi(m_a / s) over the margins m_a in q
WORST_SCALE = 0.08  # s_w: the worst axis is the expected minimum of q_a + s_w Z_a
NOISE_FLOOR = 0.02  # s_0: the smallest scale an estimate uses once the bootstrap's noise is taken out of s, s_w
BALANCE_OFFSET = 0.25  # epsilon: the balance is a geometric mean of (q + 1) / 2 + epsilon, less epsilon
CALIBRATION_SCALE = CALIBRATION_LOSS_SCALE  # kappa: C = 1 - kappa S (crs.scoring.calibration)
PHI_0 = 1.0 / math.sqrt(2.0 * math.pi)  # the standard normal density's largest value


def lipschitz_bound(n_datasets: int, weights: Sequence[float] = DEFAULT_WEIGHTS) -> float:
    """K: a change of one seed-mean axis value x_{e,d,a} by delta moves any encoder's v2 CRS by at most K delta
    (docs/crs-v2.md section 4), for any reference (an encoder or the median) and any noise the estimate takes out
    (``Noise``: the scales it uses are at least s_0 = NOISE_FLOOR).

    With g = Q_FLOOR, eps = BALANCE_OFFSET and n_d datasets: the changed encoder's overall q moves by at most
    3 delta / (g n_d) (its own x, and the median it may move, each q of which moves by at most 2 / g per unit),
    every other encoder's by 2 delta / (g n_d); a pair's margin on that axis by 5 delta / (g n_d). A dominance
    degree prod_a Phi(m_a / s_a) moves by at most phi(0) / s_0 per unit of one margin (the other factors are at
    most 1), each pair's net dominance by twice that and Dom (half of its mean over pairs) by phi(0) / s_0; Bal
    by (1/4) ((1 + eps) / eps)^(3/4) / 2 per unit of q; Worst, half an expected minimum, by 1/2 per unit of the
    encoder's q summed over its axes:

        K = 100 [w_dom 5 phi(0) / s_0 + w_bal ((1 + eps) / eps)^(3/4) 3 / 8 + w_worst 3 / 2] / (g n_d)
    """
    w_dom, w_bal, w_worst = check_weights(weights)
    g, eps = Q_FLOOR, BALANCE_OFFSET
    per_q = w_dom * 5.0 * PHI_0 / NOISE_FLOOR + w_bal * ((1.0 + eps) / eps) ** 0.75 * 3.0 / 8.0 + w_worst * 1.5
    return 100.0 * per_q / (g * n_datasets)


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


def constants(version: str = LATEST) -> dict[str, float]:
    """The constants a version's definition uses, as every v2 output records them (``settings.crs_constants``);
    v1 has none (docs/crs-v1.md fixes everything)."""
    if check_version(version) == "1":
        return {}
    return {"q_floor": Q_FLOOR, "dominance_scale": DOMINANCE_SCALE, "worst_scale": WORST_SCALE,
            "noise_floor": NOISE_FLOOR, "balance_offset": BALANCE_OFFSET, "calibration_scale": CALIBRATION_SCALE}


def check_version(version) -> str:
    """The version as its canonical string ("1", "2"); BadInput listing the versions otherwise."""
    v = str(version).strip()
    if v.endswith(".0"):
        v = v[:-2]
    if v not in VERSIONS:
        raise BadInput(f"CRS version must be one of {', '.join(VERSIONS)}, got {version!r} "
                       f"(docs/crs-v1.md, docs/crs-v2.md; {LATEST} is the default)")
    return v


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


def check_weights(weights: Sequence[float]) -> tuple[float, float, float]:
    """(w_dom, w_bal, w_worst) as floats; BadInput (a ValueError) unless three finite, non-negative, sum 1."""
    w = tuple(float(v) for v in weights)
    if len(w) != 3:
        raise BadInput(
            "weights must be three numbers (dominance, balance, worst_axis), "
            f"got {tuple(weights)!r}"
        )
    if not all(math.isfinite(v) and v >= 0.0 for v in w) or abs(sum(w) - 1.0) > WEIGHT_TOL:
        raise BadInput(
            f"weights (dominance, balance, worst_axis) must be non-negative and sum to 1, "
            f"got {w!r} (sum {sum(w)!r}); e.g. (1/3, 1/3, 1/3)"
        )
    return w  # type: ignore[return-value]


def reference_values(x: np.ndarray, reference: int | str) -> np.ndarray:
    """x_ref [..., dataset, axis] from x [..., encoder, dataset, axis] (docs/crs-v1.md section 2).

    ``reference`` is an encoder index, or 'median' for the per-axis, per-dataset median
    over encoders (the mean of the two middle values for an even count).
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[-3]
    if isinstance(reference, str):
        if reference != MEDIAN:
            raise ValueError(f"reference must be an encoder index or {MEDIAN!r}, got {reference!r}")
        return np.median(x, axis=-3)
    if not -n <= int(reference) < n:
        raise ValueError(f"reference index {reference} is out of range for {n} encoders")
    return x[..., int(reference), :, :]


def q_scores(x: np.ndarray, reference: int | str) -> np.ndarray:
    """Reference-relative axis scores q [..., encoder, dataset, axis] (docs/crs-v1.md section 2).

        q = (x_e - x_ref) / (1 - x_ref)   if x_e >= x_ref
        q = (x_e - x_ref) / x_ref         if x_e <  x_ref

    with q = 0 where the denominator is 0. For x in [0, 1], q lies in [-1, 1], the
    reference scores 0 and a perfect encoder (x = 1) scores 1.
    """
    x = np.asarray(x, dtype=float)
    r = reference_values(x, reference)[..., None, :, :]  # [..., 1, dataset, axis]
    up = x >= r
    den = np.where(up, 1.0 - r, r)
    safe = np.where(den == 0.0, 1.0, den)
    return np.where(den == 0.0, 0.0, (x - r) / safe)


def q_scores_v2(x: np.ndarray, reference: int | str, floor: float | None = None) -> np.ndarray:
    """CRS v2's q [..., encoder, dataset, axis] (docs/crs-v2.md section 2): v1's with floored denominators,

        q = clip((x_e - x_ref) / max(1 - x_ref, g), -1, 1)   if x_e >= x_ref
        q = clip((x_e - x_ref) / max(x_ref, g), -1, 1)       if x_e <  x_ref

    so q lies in [-1, 1] with the reference at 0, and an axis value's change moves q by at most 1/g times that
    change (the reference's by at most 1/g too). The clip only acts on a C estimate above 1 (a squared
    calibration error estimated below 0, section 1) against a reference far below it.
    """
    x = np.asarray(x, dtype=float)
    r = reference_values(x, reference)[..., None, :, :]  # [..., 1, dataset, axis]
    den = np.maximum(np.where(x >= r, 1.0 - r, r), Q_FLOOR if floor is None else floor)
    return np.clip((x - r) / den, -1.0, 1.0)


class Noise(NamedTuple):
    """The bootstrap's variances of an estimate of q, which v2's estimate takes out of its smoothing scales
    (docs/crs-v2.md section 3). Leading axes as the q they belong to."""

    margin: np.ndarray  # [..., e, e', axis]: variance of q_e,a - q_e',a
    q: np.ndarray  # [..., e, axis]: variance of q_e,a


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


def _scale(scale: float, variance) -> np.ndarray:
    """sqrt(max(scale^2 - variance, s_0^2)): the scale an estimate carrying noise of that variance uses."""
    return np.sqrt(np.maximum(scale**2 - np.asarray(variance, dtype=float), NOISE_FLOOR**2))


def dominance_degree(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """sigma [..., e, e']: how far e dominates e' on q [..., encoder, axis] (docs/crs-v2.md section 3),

        sigma(e, e') = prod_a Phi(m_a / s),   m_a = q_e,a - q_e',a,

    near 1 when e leads on every axis by a few s, near 0 when it trails on any; 1/16 each way between equals.
    When e dominates e' in v1's sense, sigma(e, e') > sigma(e', e). An estimate whose margins carry noise of
    variance v_a (``noise.margin``) uses sqrt(s^2 - v_a) in place of s (``_scale``), so that its mean over
    Gaussian noise is the definition's: E Phi((m + sqrt(v) Z) / sqrt(s^2 - v)) = Phi(m / s).
    """
    q = np.asarray(q, dtype=float)
    scale = DOMINANCE_SCALE if scale is None else scale
    m = q[..., :, None, :] - q[..., None, :, :]  # [..., e, e', axis]
    s = scale if noise is None else _scale(scale, noise.margin)
    sigma = np.prod(ndtr(m / s), axis=-1)
    idx = np.arange(q.shape[-2])
    sigma[..., idx, idx] = 0.0  # an encoder does not dominate itself
    return sigma


def dominance_v2(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """CRS v2's Dom_e [..., encoder]: (1 + sum_e' (sigma(e, e') - sigma(e', e)) / (n - 1)) / 2 in [0, 1]."""
    q = np.asarray(q, dtype=float)
    n = q.shape[-2]
    if n < 2:
        raise ValueError(f"dominance needs at least 2 encoders, got {n}")
    sigma = dominance_degree(q, scale, noise)
    dom = (sigma.sum(axis=-1) - sigma.sum(axis=-2)) / (n - 1)
    return (dom + 1.0) / 2.0


def expected_min(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E min_a (mu_a + sd_a Z_a) over the last axis, Z independent standard normals (sd > 0):
    lo + integral_lo^hi P(min > t) dt, lo and hi 8 sd below and above the smallest mean (Gauss-Legendre)."""
    mu, sd = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sd, dtype=float))
    lo = (mu - 8.0 * sd).min(axis=-1, keepdims=True)
    hi = (mu + 8.0 * sd).min(axis=-1, keepdims=True)
    half = (hi - lo) / 2.0
    t = lo + half * (1.0 + _NODES)  # [..., node]
    above = np.prod(ndtr((mu[..., None, :] - t[..., None]) / sd[..., None, :]), axis=-1)
    return lo[..., 0] + half[..., 0] * (above @ _WEIGHTS)


_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(96)


def worst_v2(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """CRS v2's Worst_e [..., encoder] = clip((E min_a (q_a + s_w Z_a) - E min_a (s_w Z_a) + 1) / 2, 0, 1): a
    smoothed (min_a q_a + 1) / 2, 0.5 at the reference, monotone in every q; an estimate takes the variance of
    its noise (``noise.q``) out of s_w, as ``dominance_degree`` does."""
    q = np.asarray(q, dtype=float)
    scale = WORST_SCALE if scale is None else scale
    s = np.broadcast_to(scale if noise is None else _scale(scale, noise.q), q.shape)
    at_zero = expected_min(np.zeros(q.shape[-1]), np.full(q.shape[-1], scale))
    return np.clip((expected_min(q, s) - at_zero + 1.0) / 2.0, 0.0, 1.0)


def balance_v2(q: np.ndarray, offset: float | None = None) -> np.ndarray:
    """CRS v2's Bal_e = (prod_a (h_a + eps))^(1/4) - eps, h_a = (q_e,a + 1) / 2 (docs/crs-v2.md section 3).

    In [0, 1], 0.5 at the reference, largest for a given mean when the axes are equal, and its slope
    in any axis is bounded (v1's geometric mean, eps = 0, has an unbounded slope as an axis nears q = -1).
    """
    offset = BALANCE_OFFSET if offset is None else offset
    h = (np.asarray(q, dtype=float) + 1.0) / 2.0 + offset
    return np.prod(h, axis=-1) ** (1.0 / h.shape[-1]) - offset


def dominates(q: np.ndarray, tol: float = DOMINANCE_TOL) -> np.ndarray:
    """beats [..., e, e']: e dominates e' on q [..., encoder, axis] (docs/crs-v1.md section 3).

    e dominates e' when q_e,a >= q_e',a - tol on every axis and q_e,a > q_e',a + tol on
    at least one.
    """
    q = np.asarray(q, dtype=float)
    a = q[..., :, None, :]  # e
    b = q[..., None, :, :]  # e'
    return np.all(a >= b - tol, axis=-1) & np.any(a > b + tol, axis=-1)


def dominance(q: np.ndarray, tol: float = DOMINANCE_TOL) -> np.ndarray:
    """Dom_e [..., encoder] from overall q [..., encoder, axis] (docs/crs-v1.md section 3).

    dom_e = (#{e' : e dominates e'} - #{e' : e' dominates e}) / (n - 1),
    Dom_e = (dom_e + 1) / 2 in [0, 1].
    """
    q = np.asarray(q, dtype=float)
    n = q.shape[-2]
    if n < 2:
        raise ValueError(f"dominance needs at least 2 encoders, got {n}")
    beats = dominates(q, tol)  # [..., e, e']
    dom = (beats.sum(axis=-1) - beats.sum(axis=-2)) / (n - 1)
    return (dom + 1.0) / 2.0


def balance(q: np.ndarray) -> np.ndarray:
    """Bal_e = geometric mean over the axes of (q_e,a + 1) / 2 (docs/crs-v1.md section 3)."""
    h = (np.asarray(q, dtype=float) + 1.0) / 2.0
    # a product, not exp(mean(log)), so an axis at q = -1 gives 0 without a log(0)
    return np.prod(h, axis=-1) ** (1.0 / h.shape[-1])


def worst_axis(q: np.ndarray) -> np.ndarray:
    """Worst_e = (min_a q_e,a + 1) / 2 (docs/crs-v1.md section 3)."""
    return (np.min(np.asarray(q, dtype=float), axis=-1) + 1.0) / 2.0


def combine(
    dom: np.ndarray, bal: np.ndarray, worst: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS
) -> np.ndarray:
    """CRS_e = 100 (w_dom Dom_e + w_bal Bal_e + w_worst Worst_e) (docs/crs-v1.md section 3)."""
    w_dom, w_bal, w_worst = check_weights(weights)
    return 100.0 * (w_dom * dom + w_bal * bal + w_worst * worst)


def components(q: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST,
               noise: Noise | None = None) -> Components:
    """Dom, Bal, Worst and CRS [..., encoder] from q [..., encoder, axis], by the given CRS version. v2 only:
    ``noise``, the variance an estimate of q carries, is taken out of the smoothing scales (``dominance_degree``);
    v1 has nothing to take out."""
    if check_version(version) == "1":
        dom, bal, worst = dominance(q), balance(q), worst_axis(q)
    else:
        dom, bal, worst = dominance_v2(q, None, noise), balance_v2(q), worst_v2(q, None, noise)
    return Components(dom, bal, worst, combine(dom, bal, worst, weights))


def q_of(x: np.ndarray, reference: int | str, version: str = LATEST) -> np.ndarray:
    """q [..., encoder, dataset, axis] by the given CRS version."""
    return q_scores(x, reference) if check_version(version) == "1" else q_scores_v2(x, reference)


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
    q_dataset = q_of(x, reference, version)
    q = q_dataset.mean(axis=-2)
    return Scored(q_dataset, q, *components(q, weights, version, noise))


def add(a: Noise, b: Noise) -> Noise:
    """The noise of a sum of independent noises."""
    return Noise(a.margin + b.margin, a.q + b.q)


class ReplicateEstimate(NamedTuple):
    scored: Scored  # the replicates' scores, their noise taken out
    noise: Noise | None  # the point estimate's noise (v1: None)
    noise_by_dataset: Noise | None  # the same per dataset, leading axis the dataset (per-dataset CRS; v1: None)


def replicate_estimate(x_reps: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
                       version: str = LATEST, x_spread: np.ndarray | None = None) -> ReplicateEstimate:
    """The bootstrap replicates' scores and the point estimate's noise, overall and per dataset, from replicate seed
    means x_reps [replicate, encoder, dataset, axis] (``estimate``). ``x_spread``: the same replicates without the
    seed widening (``crs.scoring.bootstrap.seed_scale``), whose spread is the point's noise; None: x_reps'. Each
    replicate's q is computed once."""
    check_weights(weights)
    if check_version(version) == "1":
        return ReplicateEstimate(score(x_reps, reference, weights, version), None, None)
    q_dataset = q_of(x_reps, reference, version)  # [replicate, encoder, dataset, axis]
    q = q_dataset.mean(axis=-2)
    own_dataset = q_dataset if x_spread is None else q_of(x_spread, reference, version)
    spread = noise_of(q)
    own = spread if x_spread is None else noise_of(own_dataset.mean(axis=-2))
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
