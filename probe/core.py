"""Linear probes in pure JAX: every seed, label fraction and L2 strength in one program.

Objective of one probe (features already standardised; bias not penalised)::

    multiclass:  (1 / n_s) * sum_{i in s} CE(softmax(x_i W + b), y_i)   + (l2 / 2) * ||W||^2
    multilabel:  sum_k (1 / n_sk) * sum_{i in s, label k known} BCE(sigmoid(x_i w_k + b_k), y_ik)
                 + (l2 / 2) * ||W||^2

where ``s`` is the probe's label subset (a 0/1 weight per training image, so shapes
stay static under jit and vmap) and ``n_s`` its size. The multilabel objective is a
sum of independent per-label problems, each averaged over its known labels (unknown
labels, such as CheXpert's U-Ignore, are masked, not guessed). The multiclass one is
scikit-learn's LogisticRegression(C) objective divided by C * n_s, so
``C = 1 / (l2 * n_s)``; the multilabel one is K binary LogisticRegressions with
``C_k = 1 / (l2 * n_sk)``.

The solver is L-BFGS with a backtracking Armijo line search, written over the whole
batch of probes in one unbatched ``lax.while_loop`` (so ring-buffer indices stay
scalars, which XLA handles far better than per-probe gathers). It stops each probe when
the gradient's largest component falls below ``tol``, when no decrease can be found, or
after ``max_iter`` steps; every probe reports whether it converged and how many steps
it took, and finished probes are frozen while the slowest ones go on.

Embeddings X [image, feature] are passed once and shared by every probe; only the
subset weights [seed, fraction, image] and the L2 grid [l2] are batched.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
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


def _lbfgs(value, value_and_grad, x0, max_iter, tol, m=10, max_halvings=30):
    """Minimise a batch of independent objectives at once.

    ``value(x) -> f`` and ``value_and_grad(x) -> (f, g)`` act on x [..., d] and return
    one objective per leading index. One unbatched while loop runs until every probe
    has met ``max|g| < tol``, stalled (no decrease found), or used ``max_iter`` steps;
    finished probes are frozen. Line search: backtracking with the Armijo condition.
    """
    f0, g0 = value_and_grad(x0)
    batch, d = x0.shape[:-1], x0.shape[-1]
    gmax0 = jnp.abs(g0).max(-1)
    init = dict(
        x=x0, f=f0, g=g0, S=jnp.zeros((m,) + batch + (d,), x0.dtype), Y=jnp.zeros((m,) + batch + (d,), x0.dtype),
        rho=jnp.zeros((m,) + batch, x0.dtype), gmax=gmax0, active=gmax0 >= tol,
        used=jnp.zeros(batch, jnp.int32), it=jnp.int32(0),
    )

    def body(s):
        it = s["it"]
        p = _direction(s["g"], s["S"], s["Y"], s["rho"], it, m)
        slope = _dot(p, s["g"])
        descent = slope < 0
        p = jnp.where(descent[..., None], p, -s["g"])  # fall back to steepest descent
        slope = jnp.where(descent, slope, -_dot(s["g"], s["g"]))
        # first step moves about 1 in parameter norm; later ones try the full quasi-Newton step
        t0 = jnp.where(it == 0, 1.0 / jnp.maximum(jnp.sqrt(_dot(s["g"], s["g"])), 1e-12), 1.0).astype(x0.dtype)

        def armijo(t, f_try):
            return (f_try <= s["f"] + 1e-4 * t * slope) | ~s["active"]

        def ls_cond(c):
            t, f_try, i = c
            return (i < max_halvings) & ~armijo(t, f_try).all()

        def ls_body(c):
            t, f_try, i = c
            ok = armijo(t, f_try)
            t = jnp.where(ok, t, 0.5 * t)
            return t, jnp.where(ok, f_try, value(s["x"] + t[..., None] * p)), i + 1

        t, f_try, _ = jax.lax.while_loop(ls_cond, ls_body, (t0, value(s["x"] + t0[..., None] * p), jnp.int32(0)))
        moved = s["active"] & armijo(t, f_try) & (f_try <= s["f"])
        x = jnp.where(moved[..., None], s["x"] + t[..., None] * p, s["x"])
        f, g = value_and_grad(x)
        sv, yv = x - s["x"], g - s["g"]
        sy = _dot(sv, yv)
        keep = moved & (sy > 1e-10 * jnp.maximum(_dot(yv, yv), 1e-30))  # keeps the inverse Hessian positive definite
        slot = it % m
        gmax = jnp.abs(g).max(-1)
        return dict(
            x=x, f=jnp.where(moved, f, s["f"]), g=jnp.where(moved[..., None], g, s["g"]),
            S=s["S"].at[slot].set(sv), Y=s["Y"].at[slot].set(yv),
            rho=s["rho"].at[slot].set(jnp.where(keep, 1.0 / jnp.where(keep, sy, 1.0), 0.0)),
            gmax=jnp.where(moved, gmax, s["gmax"]), active=moved & (gmax >= tol),
            used=s["used"] + s["active"].astype(jnp.int32), it=it + 1,
        )

    def cond(s):
        return (s["it"] < max_iter) & s["active"].any()

    s = jax.lax.while_loop(cond, body, init)
    return s["x"], s["gmax"] < tol, s["used"], s["gmax"]


def fit(X, T, weight, l2, *, task: str, max_iter: int = 1000, tol: float = 1e-4) -> Fit:
    """Fit every probe at once.

    X [n, F]; T [n, K]; weight [S, Fr, n, K] (subset x label mask); l2 [L].
    Returns a Fit with leading axes [S, Fr, L].
    """
    return _fit_jit(X, T, weight, l2, task, jnp.int32(max_iter), jnp.asarray(tol, X.dtype))


def _fit_impl(X, T, weight, l2, task, max_iter, tol):
    F, K = X.shape[1], T.shape[1]
    d = F * K + K

    def one(x, w, lam):  # x [d] -> objective of one probe
        return objective((x[: F * K].reshape(F, K), x[F * K :]), X, T, w, lam, task)

    def batched(fn):  # x [S, Fr, L, d]; weight [S, Fr, n, K] shared by the L2 axis; l2 [L]
        over_l2 = jax.vmap(fn, in_axes=(0, None, 0))
        over_fraction = jax.vmap(over_l2, in_axes=(0, 0, None))
        over_seed = jax.vmap(over_fraction, in_axes=(0, 0, None))
        return lambda x: over_seed(x, weight, l2)

    value = batched(one)
    value_and_grad = batched(jax.value_and_grad(one))
    x0 = jnp.zeros(weight.shape[:2] + l2.shape + (d,), X.dtype)
    x, converged, used, gmax = _lbfgs(value, value_and_grad, x0, max_iter, tol)
    return Fit(x[..., : F * K].reshape(x.shape[:-1] + (F, K)), x[..., F * K :], converged, used, gmax)


_fit_jit = jax.jit(_fit_impl, static_argnums=(4,))


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
