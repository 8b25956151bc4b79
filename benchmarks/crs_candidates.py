"""A candidate CRS definition measured beside v2 (issue 51), not the product's: deconvolved smooth components.

v2's point estimate is biased where the race is close: dominance and the worst axis are built from minima and
maxima over the axes (sigma's two factors, Worst's min), and noise pushes a sample's minimum down and its maximum
up, so every dominance degree is pulled towards the middle and the true leader is understated (7 CRS points on
the ``mixed`` scenario of benchmarks/crs_versions.py). The candidate replaces each by a Gaussian-smoothed form
whose expectation under Gaussian noise is known, and removes the noise the bootstrap measures:

* soft dominance: sigma(e, e') = prod_a Phi(m_a / s_dom), m_a = q_e,a - q_e',a; if the estimate of m_a is
  N(m_a, v_a), E Phi(m^_a / sqrt(s^2 - v_a)) = Phi(m_a / s) exactly, so the point estimate uses the scale
  sqrt(s^2 - v_a) (v_a: the bootstrap variance of the margin) and a replicate, itself one more draw of noise
  around the estimate, sqrt(s^2 - 2 v_a) (floored at ``floor``);
* soft worst axis: Worst = (E min_a (q_a + s_w Z_a) - E min_a (s_w Z_a) + 1) / 2, Z standard normal, which is
  0.5 at the reference as v2's is, deconvolved the same way per axis with the variance of q_a;
* balance and q as v2 (``crs.scoring.crs``).

Used as ``Tally``'s scorer: ``python benchmarks/crs_versions.py CACHE.npz --candidate 0.1,0.08``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from crs.scoring import crs as core

GRID = 160  # points of the integral behind the expected minimum


def expected_min(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E min_a (mu_a + sd_a Z_a) over the last axis, Z independent standard normals: L + int_L^U P(min > t) dt."""
    lo = (mu - 8 * sd).min(axis=-1, keepdims=True)
    hi = (mu + 8 * sd).min(axis=-1, keepdims=True)
    t = lo + (hi - lo) * np.linspace(0.0, 1.0, GRID)  # [..., grid]
    above = np.prod(1.0 - ndtr((t[..., None] - mu[..., None, :]) / sd[..., None, :]), axis=-1)
    return lo[..., 0] + np.trapezoid(above, t, axis=-1)


def _crs(q: np.ndarray, v_margin, v_q, s_dom: float, s_worst: float, floor: float, draws: int) -> np.ndarray:
    """CRS [..., encoder] of q [..., encoder, axis] with ``draws`` times the measured noise variances removed
    (0: the definition itself, 1: a point estimate, 2: a replicate)."""
    m = q[..., :, None, :] - q[..., None, :, :]
    sigma = np.prod(ndtr(m / np.sqrt(np.maximum(s_dom**2 - draws * v_margin, floor**2))), axis=-1)
    dom = (1.0 + (sigma.sum(axis=-1) - sigma.sum(axis=-2)) / (q.shape[-2] - 1)) / 2.0
    at_zero = expected_min(np.zeros(q.shape[-1]), np.full(q.shape[-1], s_worst))
    scale = np.broadcast_to(np.sqrt(np.maximum(s_worst**2 - draws * v_q, floor**2)), q.shape)
    worst = (expected_min(q, scale) - at_zero + 1.0) / 2.0
    return 100.0 * (dom + core.balance_v2(q) + worst) / 3.0


def deconvolved(s_dom: float = 0.1, s_worst: float = 0.08, floor: float = 0.02):
    """A ``Tally`` scorer: (x [encoder, dataset, axis], replicates [replicate, encoder, dataset, axis] or None) ->
    (CRS [encoder], replicate CRS [replicate, encoder] or None), median reference, equal weights."""

    def scorer(point: np.ndarray, reps: np.ndarray | None):
        q = core.q_scores_v2(point, core.MEDIAN).mean(axis=-2)
        if reps is None:
            return _crs(q, 0.0, 0.0, s_dom, s_worst, floor, 0), None
        q_rep = core.q_scores_v2(reps, core.MEDIAN).mean(axis=-2)  # [replicate, encoder, axis]
        v_margin = (q_rep[:, :, None, :] - q_rep[:, None, :, :]).var(axis=0)
        v_q = q_rep.var(axis=0)
        return (_crs(q, v_margin, v_q, s_dom, s_worst, floor, 1),
                _crs(q_rep, v_margin, v_q, s_dom, s_worst, floor, 2))

    return scorer
