"""Linear probes in pure JAX: every seed, label fraction and L2 strength in one program.

Objective of one probe (features already standardised; bias not penalised)::

    multiclass:  (1 / n_s) * sum_{i in s} CE(softmax(x_i W + b), y_i)   + (l2 / 2) * ||W||^2
    multilabel:  sum_k (1 / n_sk) * sum_{i in s, label k known} BCE(sigmoid(x_i w_k + b_k), y_ik)
                 + (l2 / 2) * ||W||^2

where ``s`` is the probe's label subset and ``n_s`` its size. Subsets are nested
prefixes of one order per seed, so the rows are multiplied block by block, each block
only by the probes whose subsets reach into it (``plan_blocks``). The multilabel objective is a
sum of independent per-label problems, each averaged over its known labels (unknown
labels, such as CheXpert's U-Ignore, are masked, not guessed). The multiclass one is
scikit-learn's LogisticRegression(C) objective divided by C * n_s, so
``C = 1 / (l2 * n_s)``; the multilabel one is K binary LogisticRegressions with
``C_k = 1 / (l2 * n_sk)``.

The solver is L-BFGS with a backtracking Armijo line search, written over the whole
batch of probes in one unbatched ``lax.while_loop`` (so ring-buffer indices stay
scalars, which XLA handles far better than per-probe gathers). The logits are linear in
the parameters, so the line search moves in logit space and its trial points cost no
matrix product. It stops each probe when the gradient's largest component falls below
``tol``, when no decrease can be found, or after ``max_iter`` steps; every probe reports
whether it converged and how many steps it took, and finished probes are frozen while
the slowest ones go on.

Embeddings X [image, feature] are gathered once per seed into subset order and shared
by every probe of that seed (S copies, never one per probe).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


class Fit(NamedTuple):
    W: jax.Array  # [..., feature, class]
    b: jax.Array  # [..., class]
    converged: jax.Array  # [...] bool
    iterations: jax.Array  # [...] int32
    grad_norm: jax.Array  # [...] largest gradient component at the end


def _data_loss(params, X, T, weight, task):
    """Mean loss of one probe. X [n, F]; T [n, K] targets in {0, 1}; weight [n, K] >= 0."""
    W, b = params
    logits = X @ W + b  # [n, K]
    if task == "multiclass":
        ce = -(T * jax.nn.log_softmax(logits)).sum(-1)  # [n]
        w = weight[:, 0]
        return (w * ce).sum() / jnp.maximum(w.sum(), 1.0)
    bce = optax.sigmoid_binary_cross_entropy(logits, T)  # [n, K]
    per_label = (weight * bce).sum(0) / jnp.maximum(weight.sum(0), 1.0)
    return per_label.sum()


def objective(params, X, T, weight, l2, task):
    """One probe's objective with a 0/1 weight per row: the plain definition above.

    The solver uses ``blocked_objectives``; this is the slow, obvious reference it is
    tested against.
    """
    W, _ = params
    return _data_loss(params, X, T, weight, task) + 0.5 * l2 * jnp.sum(W * W)


def _dot(a, b):
    return (a * b).sum(-1)


def _direction(g, S, Y, rho, it, m):
    """L-BFGS two-loop recursion (Nocedal & Wright, Algorithm 7.4) over a ring buffer.

    g [..., d]; S, Y [m, ..., d]; rho [m, ...]. ``it`` is the loop counter (a scalar,
    the same for every probe), so ring positions are plain indices; a slot with
    ``rho == 0`` (empty, or a pair that failed the curvature test) contributes nothing.
    """
    newest = (it - 1) % m

    def back(i, carry):
        q, alpha = carry
        j = (newest - i) % m
        a = rho[j] * _dot(S[j], q)
        return q - a[..., None] * Y[j], alpha.at[j].set(a)

    q, alpha = jax.lax.fori_loop(0, m, back, (g, jnp.zeros(rho.shape, g.dtype)), unroll=True)
    sy, yy = _dot(S[newest], Y[newest]), _dot(Y[newest], Y[newest])
    gamma = jnp.where((rho[newest] > 0) & (yy > 0), sy / jnp.where(yy > 0, yy, 1.0), 1.0)
    r = gamma[..., None] * q

    def forward(i, r):
        j = (newest - (m - 1) + i) % m
        beta = rho[j] * _dot(Y[j], r)
        return r + S[j] * (alpha[j] - beta)[..., None]

    return -jax.lax.fori_loop(0, m, forward, r, unroll=True)


def _lbfgs(lin, loss, along, x0, max_iter, tol, m=10, max_halvings=30):
    """Minimise a batch of independent objectives f(x) = loss(lin(x), x) at once.

    ``lin`` is linear (the logits of a linear probe, without a constant term) and maps
    x [..., d] to a pytree Z; ``loss(Z, x)`` returns one objective per leading index;
    ``along(Z, t, Zp)`` is Z + t * Zp with a step t per probe. Because the logits are
    linear in x, the line search moves in logit space: one product X @ p per iteration
    gives every trial point's objective without another matrix product, so probes that
    need several halvings cost elementwise work only. Each iteration does two matrix
    products (X @ p and the gradient's X^T @ dZ).

    One unbatched while loop runs until every probe has met ``max|g| < tol``, stalled (no
    decrease found), or used ``max_iter`` steps; finished probes are frozen.
    Line search: backtracking with the Armijo condition.
    """
    lin_T = jax.linear_transpose(lin, x0)

    def value_and_grad(Z, x):
        f, pullback = jax.vjp(loss, Z, x)
        dZ, dx = pullback(jnp.ones_like(f))
        return f, lin_T(dZ)[0] + dx

    Z0 = lin(x0)
    f0, g0 = value_and_grad(Z0, x0)
    batch, d = x0.shape[:-1], x0.shape[-1]
    gmax0 = jnp.abs(g0).max(-1)
    init = dict(
        x=x0, Z=Z0, f=f0, g=g0, S=jnp.zeros((m,) + batch + (d,), x0.dtype),
        Y=jnp.zeros((m,) + batch + (d,), x0.dtype), rho=jnp.zeros((m,) + batch, x0.dtype), gmax=gmax0,
        active=gmax0 >= tol, used=jnp.zeros(batch, jnp.int32), it=jnp.int32(0),
    )

    def body(s):
        it = s["it"]
        p = _direction(s["g"], s["S"], s["Y"], s["rho"], it, m)
        slope = _dot(p, s["g"])
        descent = slope < 0
        p = jnp.where(descent[..., None], p, -s["g"])  # fall back to steepest descent
        slope = jnp.where(descent, slope, -_dot(s["g"], s["g"]))
        Zp = lin(p)
        # first step moves about 1 in parameter norm; later ones try the full quasi-Newton step
        t0 = jnp.where(it == 0, 1.0 / jnp.maximum(jnp.sqrt(_dot(s["g"], s["g"])), 1e-12), 1.0).astype(x0.dtype)

        def trial(t):
            return loss(along(s["Z"], t, Zp), s["x"] + t[..., None] * p)

        def armijo(t, f_try):
            return (f_try <= s["f"] + 1e-4 * t * slope) | ~s["active"]

        def ls_cond(c):
            t, f_try, i = c
            return (i < max_halvings) & ~armijo(t, f_try).all()

        def ls_body(c):
            t, f_try, i = c
            ok = armijo(t, f_try)
            t = jnp.where(ok, t, 0.5 * t)
            return t, jnp.where(ok, f_try, trial(t)), i + 1

        t, f_try, _ = jax.lax.while_loop(ls_cond, ls_body, (t0, trial(t0), jnp.int32(0)))
        moved = s["active"] & armijo(t, f_try) & (f_try <= s["f"])
        t = jnp.where(moved, t, 0.0)  # frozen probes stay where they are
        x = s["x"] + t[..., None] * p
        Z = along(s["Z"], t, Zp)
        f, g = value_and_grad(Z, x)
        sv, yv = x - s["x"], g - s["g"]
        sy = _dot(sv, yv)
        keep = moved & (sy > 1e-10 * jnp.maximum(_dot(yv, yv), 1e-30))  # keeps the inverse Hessian positive definite
        slot = it % m
        gmax = jnp.abs(g).max(-1)
        return dict(
            x=x, Z=Z, f=jnp.where(moved, f, s["f"]), g=jnp.where(moved[..., None], g, s["g"]),
            S=s["S"].at[slot].set(sv), Y=s["Y"].at[slot].set(yv),
            rho=s["rho"].at[slot].set(jnp.where(keep, 1.0 / jnp.where(keep, sy, 1.0), 0.0)),
            gmax=jnp.where(moved, gmax, s["gmax"]), active=moved & (gmax >= tol),
            used=s["used"] + s["active"].astype(jnp.int32), it=it + 1,
        )

    def cond(s):
        return (s["it"] < max_iter) & s["active"].any()

    s = jax.lax.while_loop(cond, body, init)
    return s["x"], s["gmax"] < tol, s["used"], s["gmax"]


def _split(x, F, K):
    return x[..., : F * K].reshape(x.shape[:-1] + (F, K)), x[..., F * K :]


MIN_BLOCK_SHARE = 0.1  # a block holds at least this share of the rows (measured: 4 blocks beat 1 and 7)


def plan_blocks(sizes: tuple[int, ...], min_rows: int | None = None) -> tuple[tuple[int, int, int], ...]:
    """Split the rows (in subset order) into blocks (lo, hi, first fraction using them).

    Subsets are nested prefixes: fraction j uses rows ``:sizes[j]``. A block of rows is
    multiplied only by the probes of the fractions that reach into it, so small subsets
    never pay for the rows they do not use. Each block costs compile time, so blocks
    smaller than ``min_rows`` are merged with the next one and the probes whose subsets
    end inside a block mask the rest of it: small problems get one dense block, large
    ones up to one block per fraction. Default ``min_rows``: 10 % of the rows, which gives
    four blocks for the default fractions (1, 2, 5, 10 % | 25 | 50 | 100 %).
    """
    if min_rows is None:
        min_rows = max(1, math.ceil(MIN_BLOCK_SHARE * sizes[-1]))
    blocks, lo = [], 0
    for j, hi in enumerate(sizes):
        if hi - lo >= min_rows or j == len(sizes) - 1:
            first = next(k for k, m in enumerate(sizes) if m > lo)
            blocks.append((lo, hi, first))
            lo = hi
    return tuple(blocks)


def block_logits(x, Xo, blocks):
    """Logits per block, linear in x [S, Fr, L, d]: [S, Fr - first, L, hi - lo, K] each.

    Xo [S, n, F] holds the training rows in each seed's subset order (``plan_blocks``).
    """
    F = Xo.shape[-1]
    W, b = _split(x, F, x.shape[-1] // (F + 1))
    return tuple(
        jnp.einsum("snf,sjlfk->sjlnk", Xo[:, lo:hi], W[:, first:]) + b[:, first:, :, None, :]
        for lo, hi, first in blocks
    )


def along_blocks(Z, t, Zp):
    """Z + t * Zp per block; t [S, Fr, L]; a block spans the last fractions (its axis 1)."""
    return tuple(z + t[:, t.shape[1] - z.shape[1] :, :, None, None] * zp for z, zp in zip(Z, Zp))


def loss_from_logits(Z, x, To, ko, sizes, blocks, l2, task):
    """Objectives [S, Fr, L] from the block logits of ``block_logits`` and the parameters."""
    S, Fr, L, d = x.shape
    K = To.shape[-1]
    W, _ = _split(x, (d - K) // K, K)
    multiclass = task == "multiclass"
    loss = jnp.zeros((S, Fr, L) if multiclass else (S, Fr, L, K), x.dtype)
    for (lo, hi, first), logits in zip(blocks, Z):  # logits [S, Fr - first, L, nb, K]
        # which of the block's rows each of its fractions' subsets holds (a constant)
        inside = jnp.asarray(np.arange(lo, hi)[None, :] < np.asarray(sizes[first:])[:, None], x.dtype)
        Tb, kb = To[:, lo:hi], ko[:, lo:hi]  # [S, nb, K]
        if multiclass:
            ce = -(Tb[:, None, None] * jax.nn.log_softmax(logits)).sum(-1)  # [S, Fr - first, L, nb]
            part = (ce * inside[None, :, None, :]).sum(-1)
            loss = loss + jnp.pad(part, ((0, 0), (first, 0), (0, 0)))
        else:
            bce = optax.sigmoid_binary_cross_entropy(logits, Tb[:, None, None]) * kb[:, None, None]
            part = (bce * inside[None, :, None, :, None]).sum(-2)  # [S, Fr - first, L, K]
            loss = loss + jnp.pad(part, ((0, 0), (first, 0), (0, 0), (0, 0)))
    last = np.asarray(sizes) - 1
    if multiclass:
        data = loss / jnp.asarray(sizes, x.dtype)[None, :, None]
    else:
        n = jnp.cumsum(ko, axis=1)[:, last]  # known labels per subset [S, Fr, K]
        data = (loss / jnp.maximum(n, 1.0)[:, :, None, :]).sum(-1)
    return data + 0.5 * l2[None, None, :] * jnp.sum(W * W, axis=(-1, -2))


def blocked_objectives(x, Xo, To, ko, sizes, l2, task, min_rows: int | None = None):
    """Objectives of every probe at once, x [S, Fr, L, d] -> [S, Fr, L].

    Same value as ``objective`` with a 0/1 subset weight, probe by probe (tested).
    """
    blocks = plan_blocks(tuple(sizes), min_rows)
    return loss_from_logits(block_logits(x, Xo, blocks), x, To, ko, sizes, blocks, l2, task)


def fit(X, T, known, order, sizes, l2, *, task: str, max_iter: int = 1000, tol: float = 1e-4,
        min_block_rows: int | None = None) -> Fit:
    """Fit every probe at once.

    X [n, F] standardised training features; T, known [n, K] targets and known-label mask;
    order [S, n] each seed's subset order of the rows; sizes: the subset size of each
    fraction, increasing (static); l2 [L]. Returns a Fit with leading axes [S, Fr, L].
    """
    sizes = tuple(int(v) for v in sizes)
    if list(sizes) != sorted(sizes) or not 0 < sizes[0] or sizes[-1] > X.shape[0]:
        raise ValueError(f"subset sizes must increase within 1..{X.shape[0]}, got {sizes}")
    blocks = plan_blocks(sizes, min_block_rows)
    return _fit_jit(X, T, known, order, l2, task, sizes, blocks, jnp.int32(max_iter), jnp.asarray(tol, X.dtype))


def _fit_impl(X, T, known, order, l2, task, sizes, blocks, max_iter, tol):
    F, K = X.shape[1], T.shape[1]
    Xo, To, ko = X[order], T[order], known[order]  # [S, n, .]: one copy per seed, never one per probe
    x0 = jnp.zeros((order.shape[0], len(sizes), l2.shape[0], F * K + K), X.dtype)
    x, converged, used, gmax = _lbfgs(
        lambda x: block_logits(x, Xo, blocks),
        lambda Z, x: loss_from_logits(Z, x, To, ko, sizes, blocks, l2, task),
        along_blocks, x0, max_iter, tol,
    )
    W, b = _split(x, F, K)
    return Fit(W, b, converged, used, gmax)


_fit_jit = jax.jit(_fit_impl, static_argnums=(5, 6, 7))


def probabilities(X, W, b, task: str):
    """X [n, F]; W [..., F, K]; b [..., K] -> probabilities [..., n, K]."""
    logits = jnp.einsum("nf,...fk->...nk", X, W) + b[..., None, :]
    return jax.nn.softmax(logits, -1) if task == "multiclass" else jax.nn.sigmoid(logits)


def validation_loss(probs, T, known, task: str):
    """Mean NLL on the validation split. probs [..., n, K]; T, known [n, K] -> [...]."""
    eps = 1e-7
    p = jnp.clip(probs, eps, 1 - eps)
    if task == "multiclass":
        return -(T * jnp.log(p)).sum(-1).mean(-1)
    ll = T * jnp.log(p) + (1 - T) * jnp.log1p(-p)
    per_label = -(known * ll).sum(-2) / jnp.maximum(known.sum(-2), 1.0)
    return per_label.mean(-1)
