"""The features in the covariance eigenbasis, and each probe's diagonal scaling there.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from crs.foundations.labels import check_task
from crs.probe import compiled
from crs.probe.objective import inside_subsets, static_sizes
from crs.probe.schedule import ONE_BLOCK_BELOW


def rotated(X, precondition: bool):
    """(V, X V): the feature covariance's eigenvectors and the features in that basis (``rotation``),
    or (None, X) without preconditioning; the penalty is rotation-invariant. Small data (under
    ``ONE_BLOCK_BELOW`` values) has its few products on the host."""
    if not precondition:
        return None, X
    host = X.shape[0] * X.shape[1] < ONE_BLOCK_BELOW
    V = rotation(X, host)
    return V, _host_rotate(X, V) if host else _rotate(X, np.asarray(V, X.dtype))


@compiled.jit
def _covariance(X):
    return X.T @ X / X.shape[0]


def rotation(X, host: bool = False) -> np.ndarray:
    """Eigenvectors V [F, F] of the feature covariance X^T X / n, largest variance first.

    The product runs on the device (``host``: in numpy, float64, as small data's is one more
    program to compile for a few milliseconds of work); the small F x F eigendecomposition runs
    in LAPACK on the host (float64, one thread), because XLA's CPU eigh is orders of magnitude slower.
    """
    with threadpool_limits(1):  # BLAS threads would fight JAX's pool for the cores
        if host:
            X64 = np.asarray(X, np.float64)
            C = X64.T @ X64 / X64.shape[0]
        else:
            C = np.asarray(_covariance(X), np.float64)
        _, V = np.linalg.eigh(C)
    return V[:, ::-1].astype(np.float32)


def _host_rotate(X, V) -> np.ndarray:
    """X V on the host (float32, one BLAS thread): small data's rotation (``fit``)."""
    with threadpool_limits(1):
        return np.asarray(X, np.float32) @ V


def second_moments(Xo, sizes):
    """Mean square of every feature over every subset: Xo [S, n, F] in subset order -> [S, Fr, F]."""
    if not static_sizes(sizes):  # sizes an array of the program: a masked sum over all rows
        inside = inside_subsets(sizes, 0, Xo.shape[1], 0).astype(Xo.dtype)  # [Fr, n]
        return jnp.einsum("jn,snf->sjf", inside, Xo * Xo) / sizes.astype(Xo.dtype)[None, :, None]
    edges = (0,) + tuple(sizes)
    segments = jnp.stack([jnp.sum(Xo[:, lo:hi] ** 2, axis=1) for lo, hi in zip(edges[:-1], edges[1:])], axis=1)
    return jnp.cumsum(segments, axis=1) / jnp.asarray(sizes, Xo.dtype)[None, :, None]


ISOTROPIC_BELOW = 0.2  # subsets of fewer than this share of F rows get the isotropic scale (``preconditioner``)


def preconditioner(m2, l2, task, K, sizes=None, n_features=None):
    """Per-probe diagonal scaling in the covariance eigenbasis: x = scale * u.

    In the rotated features Xr = X V the data term's Hessian of a probe on subset s is
    close to c * diag(m_s) (m_s: each direction's mean square over the subset, from
    ``second_moments``; c the curvature of the link at the start: 1/K for softmax, 1/4
    for sigmoid), plus l2 from the penalty. Solving for u with W' = u / sqrt(c m_s + l2)
    makes that Hessian close to the identity, which is what L-BFGS needs to take few
    steps when the feature spectrum spans orders of magnitude. The penalty is unchanged
    because V is orthogonal. The bias is scaled by 1 / sqrt(c).

    A subset of m rows, fewer than the F features (``sizes``, below ``ISOTROPIC_BELOW`` * F),
    gets one scale for every direction instead: its data Hessian c X_s^T X_s / m has rank m,
    and its m non-zero eigenvalues, those of the Gram matrix c X_s X_s^T / m, average
    c * sum_f m_sf / m, far above any one m_sf when m << F. Started from zero, the iterates
    stay in the span of the subset's rows, where the diagonal would under-estimate the
    curvature by about F / m and the solver crawl; the isotropic scale
    1 / sqrt(c * sum_f m_sf / m + l2) fits that span.
    m2 [S, Fr, F], l2 [L] -> scale [S, Fr, L, F*K + K].
    """
    c = 1.0 / K if check_task(task).exclusive else 0.25
    if sizes is not None and static_sizes(sizes) and n_features is None:
        F = m2.shape[-1]
        m = np.asarray(sizes, np.float64)
        iso = m < ISOTROPIC_BELOW * F  # [Fr] static
        if iso.any():
            mean_eig = m2.sum(-1, keepdims=True) / jnp.asarray(np.minimum(m, F), m2.dtype)[None, :, None]
            m2 = jnp.where(jnp.asarray(iso)[None, :, None], jnp.broadcast_to(mean_eig, m2.shape), m2)
    elif sizes is not None:  # sizes and the feature count are values of the program (``fit``'s shape buckets)
        F = jnp.asarray(m2.shape[-1] if n_features is None else n_features, m2.dtype)
        m = jnp.asarray(sizes).astype(m2.dtype)
        iso = m < ISOTROPIC_BELOW * F  # [Fr]
        mean_eig = m2.sum(-1, keepdims=True) / jnp.minimum(m, F)[None, :, None]
        m2 = jnp.where(iso[None, :, None], jnp.broadcast_to(mean_eig, m2.shape), m2)
    sw = jax.lax.rsqrt(c * m2[:, :, None, :] + l2[None, None, :, None])  # [S, Fr, L, F]
    sw = jnp.repeat(sw, K, axis=-1)  # row-major (F, K) layout of W in x
    sb = jnp.full(sw.shape[:-1] + (K,), 1.0 / math.sqrt(c), m2.dtype)
    return jnp.concatenate([sw, sb], axis=-1)


@compiled.jit
def _rotate(X, V):
    return X @ V


def unrotate(V, W) -> np.ndarray:
    """Weights W [..., F, K] in the eigenbasis back to the features: V W (float32, on the host, one BLAS thread)."""
    with threadpool_limits(1):  # BLAS threads would fight JAX's pool for the cores
        return np.matmul(V, W)
