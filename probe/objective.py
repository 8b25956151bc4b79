"""The probes' objective, from the block logits.

Objective of one probe (features already standardised; bias not penalised)::

    multiclass:  (1 / n_s) * sum_{i in s} CE(softmax(x_i W + b), y_i)   + (l2 / 2) * ||W||^2
    multilabel:  sum_k (1 / n_sk) * sum_{i in s, label k known} BCE(sigmoid(x_i w_k + b_k), y_ik)
                 + (l2 / 2) * ||W||^2

where ``s`` is the probe's label subset and ``n_s`` its size. The multilabel objective is a
sum of independent per-label problems, each averaged over its known labels (unknown
labels, such as CheXpert's U-Ignore, are masked, not guessed). The multiclass one is
scikit-learn's LogisticRegression(C) objective divided by C * n_s, so
``C = 1 / (l2 * n_s)``; the multilabel one is K binary LogisticRegressions with
``C_k = 1 / (l2 * n_sk)``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crs.foundations.labels import check_task
from crs.probe.blocks import block_logits, plan_blocks, split_params


class Labels(NamedTuple):
    """What a loop's objective reads besides the weights: the targets in each seed's subset order,
    and the static layout of the subsets (``plan_blocks``)."""

    To: jax.Array  # [S, n, K] targets in {0, 1}
    ko: jax.Array  # [S, n, K] known-label mask
    sizes: object  # the subset sizes: static ints, or an int array [Fr] (``fit``'s shape buckets)
    blocks: tuple  # ((lo, hi, first fraction), ...)
    task: str  # static


def _data_loss(params, X, T, weight, task):
    """Mean loss of one probe. X [n, F]; T [n, K] targets in {0, 1}; weight [n, K] >= 0."""
    W, b = params
    logits = X @ W + b  # [n, K]
    if check_task(task).exclusive:
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


def _dot2(a, b):
    """<a, b> over the last two axes (weights [..., F, K])."""
    return jnp.einsum("...fk,...fk->...", a, b)


def _reduce_rows(parts, x, ko, sizes, blocks, task):
    """Sum per-row data terms over each probe's subset and normalise: [S, Fr, L].

    parts: one array per block, [S, Fr - first, L, nb] (multiclass) or
    [S, Fr - first, L, K, nb] (multilabel, already multiplied by the known-label mask).
    ko [S, n, K]. ``sizes``: the subset sizes, static ints or an int array [Fr] (``fit``'s
    shape buckets, where rows past the last subset are padding).
    """
    S, Fr, L, _ = x.shape
    exclusive = check_task(task).exclusive
    total = jnp.zeros((S, Fr, L) if exclusive else (S, Fr, L, ko.shape[-1]), x.dtype)
    for (lo, hi, first), part in zip(blocks, parts):
        inside = inside_subsets(sizes, lo, hi, first)  # which of the block's rows each of its fractions' subsets holds
        if isinstance(inside, np.ndarray) and inside.all():  # every fraction holds the whole block
            summed = part.sum(-1)
        else:  # masked and summed along the rows (as a product over them, XLA transposes the terms first)
            mask = jnp.expand_dims(jnp.asarray(inside, x.dtype), tuple(range(1, part.ndim - 2)))  # [J, 1(, 1), nb]
            summed = (part * mask).sum(-1)  # [S, Fr - first, L(, K)]
        total = total + jnp.pad(summed, ((0, 0), (first, 0)) + ((0, 0),) * (summed.ndim - 2))
    if exclusive:
        return total / jnp.asarray(sizes, x.dtype)[None, :, None]
    last = (np.asarray(sizes) if static_sizes(sizes) else sizes) - 1
    n = jnp.cumsum(ko, axis=1)[:, last]  # known labels per subset [S, Fr, K]
    return (total / jnp.maximum(n, 1.0)[:, :, None, :]).sum(-1)


def static_sizes(sizes) -> bool:
    """Whether the subset sizes are static ints (a tuple) rather than an array inside the program."""
    return isinstance(sizes, (tuple, list))


def inside_subsets(sizes, lo: int, hi: int, first: int):
    """[Fr - first, hi - lo] bool: which rows lo..hi each fraction from ``first`` on holds (a numpy
    constant for static sizes, else an array of the program)."""
    if static_sizes(sizes):
        return np.arange(lo, hi)[None, :] < np.asarray(sizes[first:])[:, None]
    return jnp.arange(lo, hi)[None, :] < sizes[first:, None]


def _class_sum(a):
    """Sum over the class axis (-2) of [..., K, rows], class by class.

    Written as K - 1 additions of slices because XLA on the CPU turns a product summed
    over a short axis, (a * b).sum(-2), into a batched dot that runs far slower.
    """
    out = a[..., 0, :]
    for k in range(1, a.shape[-2]):
        out = out + a[..., k, :]
    return out


def _class_max(a):
    """Max over the class axis (-2) of [..., K, rows], class by class (``_class_sum``: XLA on the CPU
    runs a reduction over a short axis as a library call that costs more than the slices)."""
    out = a[..., 0, :]
    for k in range(1, a.shape[-2]):
        out = jnp.maximum(out, a[..., k, :])
    return out


def _log_softmax(z):
    """log softmax over the class axis (-2) of logits [..., K, rows], with the class reductions of
    ``_class_max`` and ``_class_sum``; as jax.nn.log_softmax, the max is a constant to the gradient."""
    shifted = z - jax.lax.stop_gradient(_class_max(z))[..., None, :]
    return shifted - jnp.log(_class_sum(jnp.exp(shifted)))[..., None, :]


def _weights(x, K):
    return split_params(x, (x.shape[-1] - K) // K, K)[0]


def _rows_last(A, lo, hi):
    """[S, n, K] -> the block's rows as [S, 1, 1, K, nb]."""
    return jnp.swapaxes(A[:, lo:hi], 1, 2)[:, None, None]


def loss_from_logits(Z, x, labels: Labels, l2):
    """Objectives [S, Fr, L] from the block logits of ``block_logits`` and the parameters."""
    To, ko, sizes, blocks, task = labels
    K = To.shape[-1]
    parts = []
    for (lo, hi, _first), logits in zip(blocks, Z):  # logits [S, Fr - first, L, K, nb]
        Tb, kb = _rows_last(To, lo, hi), _rows_last(ko, lo, hi)
        if check_task(task).exclusive:
            parts.append(-_class_sum(Tb * _log_softmax(logits)))
        else:
            parts.append(optax.sigmoid_binary_cross_entropy(logits, Tb) * kb)
    W = _weights(x, K)
    return _reduce_rows(parts, x, ko, sizes, blocks, task) + 0.5 * per_probe(l2) * _dot2(W, W)


def per_probe(l2):
    """The L2 grid [L] as [1, 1, L], or already one value per probe [S, Fr, L]."""
    return l2[None, None, :] if l2.ndim == 1 else l2


def link_values(Z, task):
    """What ``loss_change`` needs from the current logits, per block.

    Softmax: (probabilities, log-probabilities); sigmoid: (sigmoid(z), sigmoid(-z), z).
    Both sides of the sigmoid are computed directly, because 1 - sigmoid(z) is 0 in
    float32 from z = 17 up.
    """
    if check_task(task).exclusive:
        return tuple((jnp.exp(ls), ls) for ls in (_log_softmax(z) for z in Z))
    return tuple((jax.nn.sigmoid(z), jax.nn.sigmoid(-z), z) for z in Z)


SATURATED = -0.9  # below this, 1 + q in the log1p forms of ``loss_change`` has lost its digits


def _where_saturated(q, near, far):
    """``near`` where q > SATURATED, else ``far()``, which is only computed when some row needs it."""
    saturated = q <= SATURATED
    return jax.lax.cond(saturated.any(), lambda: jnp.where(saturated, far(), near), lambda: near)


def loss_change(P, Zp, t, x, p, labels: Labels, l2):
    """f(x + t p) - f(x) per probe [S, Fr, L], accurate when the change is tiny.

    Near a minimum the change is far below float32's resolution of f itself, so the
    difference of two objective values is noise and a line search stalls. Computed from
    the link values P at x (``link_values``) and the logits' change d = t Zp instead,
    every term stays small and nothing overflows:

        softmax:  lse(z + d) - lse(z) = M + log1p(q),  q = sum_k softmax(z)_k expm1(d_k - M),
                  M = max(0, max_k d_k);
        sigmoid:  softplus(z + d) - softplus(z) = log1p(q),  q = s expm1(d)          (d <= 0)
                                                = d + log1p(q),  q = (1 - s) expm1(-d)  (d > 0),
                  s = sigmoid(z);

    minus the targets' share T d; the penalty changes by l2 t <W, P> + l2 t^2 ||P||^2 / 2.

    Where q nears -1 (a step that hands a row to a class whose probability underflowed:
    nearly separable probes with large logits), 1 + q has lost its digits and log1p(q)
    can be -inf, which would let the line search accept steps that raise the objective.
    There the change is large, and it is taken from log-space values instead:
    logsumexp_k(log softmax(z)_k + d_k), or softplus(z + d) - softplus(z).
    """
    To, ko, sizes, blocks, task = labels
    K = To.shape[-1]
    parts = []
    for (lo, hi, _first), pz, zp in zip(blocks, P, Zp):
        Tb, kb = _rows_last(To, lo, hi), _rows_last(ko, lo, hi)
        dz = t[:, t.shape[1] - zp.shape[1]:, :, None, None] * zp  # [S, J, L, K, nb]
        if check_task(task).exclusive:
            prob, logp = pz
            M = jnp.maximum(_class_max(dz)[..., None, :], 0.0)
            q = _class_sum(prob * jnp.expm1(dz - M))
            near = M[..., 0, :] + jnp.log1p(jnp.maximum(q, SATURATED))
            lse = _where_saturated(q, near, lambda logp=logp, dz=dz: jax.nn.logsumexp(logp + dz, axis=-2))
            parts.append(lse - _class_sum(Tb * dz))
        else:
            s, s_neg, z = pz
            up = dz > 0
            q = jnp.where(up, s_neg, s) * jnp.expm1(-jnp.abs(dz))
            near = jnp.where(up, dz, 0.0) + jnp.log1p(jnp.maximum(q, SATURATED))
            sp = _where_saturated(q, near, lambda z=z, dz=dz: jax.nn.softplus(z + dz) - jax.nn.softplus(z))
            parts.append((sp - Tb * dz) * kb)
    W, Pw = _weights(x, K), _weights(p, K)
    penalty = per_probe(l2) * (t * _dot2(W, Pw) + 0.5 * t * t * _dot2(Pw, Pw))
    return _reduce_rows(parts, x, ko, sizes, blocks, task) + penalty


def blocked_objectives(x, Xo, To, ko, sizes, l2, task, min_rows: int | None = None):
    """Objectives of every probe at once, x [S, Fr, L, d] -> [S, Fr, L].

    Same value as ``objective`` with a 0/1 subset weight, probe by probe (tested).
    """
    blocks = plan_blocks(tuple(sizes), min_rows)
    return loss_from_logits(block_logits(x, Xo, blocks), x, Labels(To, ko, sizes, blocks, task), l2)
