"""What every CRS version builds on: the reference x_ref, the component weights, and the noise an estimate of q
carries (docs/crs-v1.md section 2, docs/crs-v2.md section 3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.foundations.errors import BadInput

MEDIAN = "median"
WEIGHT_TOL = 1e-9  # how far from 1 the weights' sum may be
DEFAULT_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)  # (dominance, balance, worst axis)


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


class Noise(NamedTuple):
    """The bootstrap's variances of an estimate of q, which v2's estimate takes out of its smoothing scales
    (docs/crs-v2.md section 3). Leading axes as the q they belong to."""

    margin: np.ndarray  # [..., e, e', axis]: variance of q_e,a - q_e',a
    q: np.ndarray  # [..., e, axis]: variance of q_e,a
    d: np.ndarray | None = None  # [..., e, dataset, axis]: variance of x_e,d,a - x_ref,d,a (v2's q takes it out)
    x: np.ndarray | None = None  # [..., e, dataset, axis]: variance of x_e,d,a (v2's median reference takes it out)


def reference_noise(x_reps: np.ndarray, reference: int | str, reference_of=reference_values) -> np.ndarray:
    """The variance over replicates of x_e - x_ref [..., encoder, dataset, axis] from replicate seed means x_reps
    [replicate, ..., encoder, dataset, axis], x_ref by ``reference_of`` (a version's reference); a cell no replicate
    has: 0 (nothing taken out)."""
    x_reps = np.asarray(x_reps, dtype=float)
    return variance_over_replicates(x_reps - reference_of(x_reps, reference)[..., None, :, :])


def variance_over_replicates(d: np.ndarray) -> np.ndarray:
    """The variance over axis 0 (replicates) of d, NaN cells left out; a cell no replicate has: 0."""
    seen = ~np.isnan(d)
    n = np.maximum(seen.sum(axis=0), 1)
    centred = np.where(seen, d - np.where(seen, d, 0.0).sum(axis=0) / n, 0.0)
    return (centred**2).sum(axis=0) / n
