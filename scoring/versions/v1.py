"""CRS v1 (docs/crs-v1.md sections 2 and 3), kept bit for bit: q relative to the reference, dominance counted
over pairs, the geometric mean of the axes and the worst axis; C is 1 minus the run records' binned ECE."""

from __future__ import annotations

import numpy as np

from crs.scoring.versions.common import Noise, reference_values
from crs.scoring.versions.definition import BINNED_ECE, Definition, Words

DOMINANCE_TOL = 1e-9


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


def components(q: np.ndarray, noise: Noise | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Dom, Bal, Worst) [..., encoder] of q [..., encoder, axis]; v1 scores q as it is, so ``noise`` is unused."""
    return dominance(q), balance(q), worst_axis(q)


WORDS = Words(
    q=lambda recorded: ("q = (x − x_ref) / (1 − x_ref) above the reference and (x − x_ref) / x_ref below it, so q "
                        "lies in [−1, 1] and the reference scores 0;"),
    calibration=lambda recorded: "1 − ECE (15 equal-width bins on the top-label confidence)",
    worst=lambda recorded: "(min q + 1) / 2",
    balance=lambda recorded: "the geometric mean of (q + 1) / 2",
    calibration_shift=None,
)

DEFINITION = Definition(number="1", spec="crs-v1.md", q=q_scores, components=components, takes_out_noise=False,
                        calibration=BINNED_ECE, words=WORDS)
