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

from crs.errors import BadInput
from crs.names import CRS_LATEST, CRS_VERSIONS

MEDIAN = "median"
DOMINANCE_TOL = 1e-9
WEIGHT_TOL = 1e-9  # how far from 1 the weights' sum may be
DEFAULT_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)  # (dominance, balance, worst axis)

VERSIONS, LATEST = CRS_VERSIONS, CRS_LATEST
# CRS v2's constants (docs/crs-v2.md says how each was chosen)
Q_FLOOR = 0.35  # g: q's denominators are at least this, so no axis moves q by more than 1/g its change
DOMINANCE_SCALE = 0.07  # tau: the margin, in q, over which a dominance degree goes from 0 to 1
DOMINANCE_SLACK = 0.02  # delta: trailing by at most this on an axis does not lower a dominance degree
BALANCE_OFFSET = 0.25  # epsilon: the balance is a geometric mean of (q + 1) / 2 + epsilon, less epsilon


def lipschitz_bound(n_datasets: int, weights: Sequence[float] = DEFAULT_WEIGHTS) -> float:
    """K: a change of one seed-mean axis value x_{e,d,a} by delta moves any encoder's v2 CRS by at most K delta
    (docs/crs-v2.md section 4), for any reference (an encoder or the median).

    With g = Q_FLOOR, tau = DOMINANCE_SCALE, eps = BALANCE_OFFSET and n_d datasets: the changed encoder's
    overall q moves by at most 3 delta / (g n_d) (its own x, and the median it may move, each q of which
    moves by at most 2 / g per unit), every other encoder's by 2 delta / (g n_d); a pair's margin on that
    axis by 5 delta / (g n_d); sigma by 2 / tau per unit of margin, each pair's net dominance by 4 / tau,
    Dom (half of dom) by 2 / tau; Bal by (1/4) ((1 + eps) / eps)^(3/4) / 2 per unit of q and Worst by 1/2:

        K = 100 [w_dom (2 / tau) 5 + w_bal ((1 + eps) / eps)^(3/4) 3 / 8 + w_worst 3 / 2] / (g n_d)
    """
    w_dom, w_bal, w_worst = check_weights(weights)
    g, tau, eps = Q_FLOOR, DOMINANCE_SCALE, BALANCE_OFFSET
    per_q = w_dom * 10.0 / tau + w_bal * ((1.0 + eps) / eps) ** 0.75 * 3.0 / 8.0 + w_worst * 1.5
    return 100.0 * per_q / (g * n_datasets)


def local_slope(x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
                version: str = LATEST, step: float = 1e-4) -> float:
    """The measured slope of CRS at the observed profile x [encoder, dataset, axis], in points per unit of one axis
    value: the largest central difference max_{e, x_i} |CRS_e(x + step 1_i) - CRS_e(x - step 1_i)| / (2 step) over
    every encoder e and every single seed-mean axis value x_i. ``lipschitz_bound`` is its worst case over all
    profiles; this is what a change of one axis value does near the profiles actually scored."""
    x = np.asarray(x, dtype=float)
    bump = step * np.eye(x.size).reshape(x.size, *x.shape)  # [value, encoder, dataset, axis]
    up = score(np.clip(x + bump, 0.0, 1.0), reference, weights, version).crs  # [value, encoder]
    down = score(np.clip(x - bump, 0.0, 1.0), reference, weights, version).crs
    width = (np.clip(x + bump, 0.0, 1.0) - np.clip(x - bump, 0.0, 1.0)).reshape(x.size, -1).sum(axis=1)
    return float(np.max(np.abs(up - down).max(axis=1) / np.maximum(width, 1e-12)))


def constants(version: str = LATEST) -> dict[str, float]:
    """The constants a version's definition uses, as every v2 output records them (``settings.crs_constants``);
    v1 has none (docs/crs-v1.md fixes everything)."""
    if check_version(version) == "1":
        return {}
    return {"q_floor": Q_FLOOR, "dominance_scale": DOMINANCE_SCALE, "dominance_slack": DOMINANCE_SLACK,
            "balance_offset": BALANCE_OFFSET}


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

        q = (x_e - x_ref) / max(1 - x_ref, g)   if x_e >= x_ref
        q = (x_e - x_ref) / max(x_ref, g)       if x_e <  x_ref

    so q still lies in [-1, 1] with the reference at 0, and an axis value's change moves q by at
    most 1/g times that change (the reference's by at most 1/g too).
    """
    x = np.asarray(x, dtype=float)
    r = reference_values(x, reference)[..., None, :, :]  # [..., 1, dataset, axis]
    den = np.maximum(np.where(x >= r, 1.0 - r, r), Q_FLOOR if floor is None else floor)
    return (x - r) / den


def dominance_degree(q: np.ndarray, scale: float | None = None, slack: float | None = None) -> np.ndarray:
    """sigma [..., e, e']: how far e dominates e' on q [..., encoder, axis] (docs/crs-v2.md section 3),

        sigma = clip(1 + (min_a m_a + delta) / tau, 0, 1) * clip(max_a m_a / tau, 0, 1),  m = q_e - q_e',

    1 when e is ahead by tau on some axis and behind by at most delta on every axis, 0 when it is
    behind by delta + tau on some axis or ahead on none; linear in between, so a swap of two close
    encoders on one axis moves it continuously (v1 counts a strict dominance, which jumps). The slack
    delta keeps a true near-tie on one axis from pulling a clear dominance down in every sample. When
    e dominates e' in v1's sense, sigma(e, e') > 0 = sigma(e', e) (e' is ahead nowhere).
    """
    q = np.asarray(q, dtype=float)
    scale = DOMINANCE_SCALE if scale is None else scale
    slack = DOMINANCE_SLACK if slack is None else slack
    m = q[..., :, None, :] - q[..., None, :, :]  # [..., e, e', axis]
    worst = np.clip(1.0 + (m.min(axis=-1) + slack) / scale, 0.0, 1.0)
    best = np.clip(m.max(axis=-1) / scale, 0.0, 1.0)
    return worst * best


def dominance_v2(q: np.ndarray, scale: float | None = None, slack: float | None = None) -> np.ndarray:
    """CRS v2's Dom_e [..., encoder]: (1 + sum_e' (sigma(e, e') - sigma(e', e)) / (n - 1)) / 2 in [0, 1]."""
    q = np.asarray(q, dtype=float)
    n = q.shape[-2]
    if n < 2:
        raise ValueError(f"dominance needs at least 2 encoders, got {n}")
    sigma = dominance_degree(q, scale, slack)
    dom = (sigma.sum(axis=-1) - sigma.sum(axis=-2)) / (n - 1)  # the diagonal is 0 (no axis ahead)
    return (dom + 1.0) / 2.0


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


def components(q: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS, version: str = LATEST) -> Components:
    """Dom, Bal, Worst and CRS [..., encoder] from q [..., encoder, axis], by the given CRS version."""
    if check_version(version) == "1":
        dom, bal = dominance(q), balance(q)
    else:
        dom, bal = dominance_v2(q), balance_v2(q)
    worst = worst_axis(q)
    return Components(dom, bal, worst, combine(dom, bal, worst, weights))


def q_of(x: np.ndarray, reference: int | str, version: str = LATEST) -> np.ndarray:
    """q [..., encoder, dataset, axis] by the given CRS version."""
    return q_scores(x, reference) if check_version(version) == "1" else q_scores_v2(x, reference)


def score(
    x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS,
    version: str = LATEST,
) -> Scored:
    """Everything from seed-mean axis values x [..., encoder, dataset, axis].

    The overall q_e,a is the mean over the datasets given (the comparison set) of the
    per-dataset q (docs/crs-v1.md section 2, docs/crs-v2.md section 2); the components use the overall q.
    """
    check_weights(weights)
    q_dataset = q_of(x, reference, version)
    q = q_dataset.mean(axis=-2)
    return Scored(q_dataset, q, *components(q, weights, version))
