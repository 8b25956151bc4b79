"""A simultaneous confidence set for the best encoder, from the bootstrap's CRS replicates.

The set holds, with probability ``confidence``, the encoder whose true CRS is highest. It is a test
inversion with a max-type bootstrap (Mogstad, Romano, Shaikh and Wilhelm, "Inference for ranks with
applications to mobility across neighbourhoods and academic achievement across countries", Review of
Economic Studies 2024, the confidence set for the best, tau = 1). For each candidate j and every other
encoder k, with d_kj = CRS_k - CRS_j, point d̂_kj, replicate d*_kj and se_kj the replicates' standard
deviation of d*_kj:

    T_j = max_{k != j} d̂_kj / se_kj
    c_j = the ``confidence`` quantile over replicates of max_{k != j} (d*_kj - d̂_kj) / se_kj
    j is in the set  iff  T_j <= c_j

so j leaves the set only when some k is ahead of it by more than the simultaneous one-sided bound over all
k allows. The maximum over k is what makes it one statement about the best rather than n - 1 separate
comparisons against a leader chosen from the same data.
"""

from __future__ import annotations

import numpy as np

SE_FLOOR = 1e-12  # a pair that never varies: d̂ = 0 gives T = 0 (cannot reject), d̂ > 0 rejects


def best_set(crs_reps: np.ndarray, point: np.ndarray, confidence: float = 0.95) -> np.ndarray | None:
    """bool [encoder]: membership of the ``confidence`` set for the best, from crs_reps [replicate, encoder] and
    point [encoder] (module docstring). The point leader is always in. None where a replicate is not finite
    (``bootstrap.incomplete``): no interval, so no set."""
    reps = np.asarray(crs_reps, dtype=float)
    point = np.asarray(point, dtype=float)
    if reps.ndim != 2 or point.shape != reps.shape[1:]:
        raise ValueError(f"need crs_reps [replicate, encoder] and point [encoder], got {reps.shape} and {point.shape}")
    if not np.isfinite(reps).all() or not np.isfinite(point).all():
        return None
    n = point.size
    if n == 1:
        return np.ones(1, dtype=bool)
    d_hat = point[:, None] - point[None, :]  # [k, j]: CRS_k - CRS_j
    d_rep = reps[:, :, None] - reps[:, None, :]  # [replicate, k, j]
    se = np.maximum(d_rep.std(axis=0), SE_FLOOR)  # [k, j]
    off = ~np.eye(n, dtype=bool)  # k != j
    t = np.where(off, d_hat / se, -np.inf).max(axis=0)  # [j]
    centred = np.where(off, (d_rep - d_hat) / se, -np.inf).max(axis=1)  # [replicate, j]
    crit = np.quantile(centred, confidence, axis=0)  # [j]
    inside = t <= crit
    inside[int(np.argmax(point))] = True  # T_leader <= 0; kept in even where the quantile dips below it
    return inside
