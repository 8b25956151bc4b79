"""Seed-mean axis values -> reference-relative scores q, the three components and CRS.

Pure numpy on arrays. The last three axes are always [encoder, dataset, axis] (or
[encoder, axis] once q is averaged over datasets); any leading axes are replicates, so
the bootstrap scores all its replicates in one call and dominance is recomputed inside
each replicate. Axis order is ``crs.scoring.axes.AXES``. Definitions: docs/crs-v1.md
sections 2 and 3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.errors import BadInput

MEDIAN = "median"
DOMINANCE_TOL = 1e-9
WEIGHT_TOL = 1e-9  # how far from 1 the weights' sum may be
DEFAULT_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)  # (dominance, balance, worst axis)


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


def components(q: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS) -> Components:
    """Dom, Bal, Worst and CRS [..., encoder] from q [..., encoder, axis]."""
    dom, bal, worst = dominance(q), balance(q), worst_axis(q)
    return Components(dom, bal, worst, combine(dom, bal, worst, weights))


def score(
    x: np.ndarray, reference: int | str = MEDIAN, weights: Sequence[float] = DEFAULT_WEIGHTS
) -> Scored:
    """Everything from seed-mean axis values x [..., encoder, dataset, axis].

    The overall q_e,a is the mean over the datasets given (the comparison set) of the
    per-dataset q (docs/crs-v1.md section 2); the components use the overall q.
    """
    check_weights(weights)
    q_dataset = q_scores(x, reference)
    q = q_dataset.mean(axis=-2)
    return Scored(q_dataset, q, *components(q, weights))
