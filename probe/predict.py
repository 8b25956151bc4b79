"""Fitted linear probes' (log-)probabilities and validation losses, in few compiled shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from crs.foundations.labels import check_task
from crs.probe import compiled, padded
from crs.probe.padded import shape_bucket


def probabilities(X, W, b, task: str):
    """X [n, F]; W [..., F, K]; b [..., K] -> probabilities [..., n, K]."""
    logits = jnp.einsum("nf,...fk->...nk", X, W) + b[..., None, :]
    return jax.nn.softmax(logits, -1) if check_task(task).exclusive else jax.nn.sigmoid(logits)


def log_link(logits, task: str):
    """Log-probabilities [..., K] of logits [..., K] that stay distinct where probabilities saturate.

    Softmax: log p_k = d_k - log1p(r), d = z - max z, r = sum of exp(d_j) over the classes other
    than the (first) top one. The usual log-softmax takes log(1 + r) after rounding 1 + r, which is
    exactly 1 in float32 once every other logit is about 17 below the top: every such row's top
    class gets log p = 0 and ties. log1p(r) keeps r itself down to float32's smallest normal, so
    two rows whose top margins are 40 and 50 stay apart (-4.2e-18 against -1.9e-22).
    Sigmoid: log p = -softplus(-z) (jax.nn.log_sigmoid, likewise exact near 0).
    """
    if not check_task(task).exclusive:
        return jax.nn.log_sigmoid(logits)
    K = logits.shape[-1]
    d = logits - jax.lax.stop_gradient(logits.max(-1, keepdims=True))
    top = jnp.arange(K) == jnp.argmax(logits, -1)[..., None]
    rest = jnp.where(top, 0.0, jnp.exp(d)).sum(-1, keepdims=True)
    return d - jnp.log1p(rest)


def log_probabilities(X, W, b, task: str):
    """X [n, F]; W [..., F, K]; b [..., K] -> log-probabilities [..., n, K] (``log_link``)."""
    return log_link(jnp.einsum("nf,...fk->...nk", X, W) + b[..., None, :], task)


_log_probabilities = compiled.jit(log_probabilities, static_argnums=3)


def predict(X, W, b, task: str) -> np.ndarray:
    """``log_probabilities`` in few compiled shapes: the features padded to a shape bucket (zero columns
    of X, zero rows of W: the logits are unchanged), so encoders of nearby widths share one program,
    and the probes taken ``padded.PROBE_BATCH`` at a time (the last batch padded with zero weights).
    X [n, F], W [..., F, K], b [..., K] (host or device) -> [..., n, K] on the host."""
    X, W, b = np.asarray(X, np.float32), np.asarray(W, np.float32), np.asarray(b, np.float32)
    lead, (F, K) = W.shape[:-2], W.shape[-2:]
    F_pad = shape_bucket(F)
    X = np.pad(X, ((0, 0), (0, F_pad - F)))
    out = padded.in_batches(lambda Wb, bb: _log_probabilities(X, Wb, bb, task), W.reshape((-1, F, K)),
                            b.reshape((-1, K)), pad_to=((F_pad, K), (K,)))
    return out.reshape(lead + (X.shape[0], K))


def validation_loss(log_probs, T, known, task: str):
    """Mean NLL on the validation split. log_probs [..., n, K] (``log_probabilities``); T, known [n, K] -> [...].

    Multiclass: over the rows where known[:, 0] is 1 (padding has 0); multilabel: per label
    over its known entries, then the mean over labels."""
    eps = 1e-7
    p = jnp.clip(jnp.exp(log_probs), eps, 1 - eps)
    if check_task(task).exclusive:
        w = known[..., 0]
        return -((T * jnp.log(p)).sum(-1) * w).sum(-1) / jnp.maximum(w.sum(-1), 1.0)
    ll = T * jnp.log(p) + (1 - T) * jnp.log1p(-p)
    per_label = -(known * ll).sum(-2) / jnp.maximum(known.sum(-2), 1.0)
    return per_label.mean(-1)


_validation_loss = compiled.jit(jax.vmap(validation_loss, in_axes=(0, None, None, None)), static_argnums=3)


def validation_losses(probs, T, known, task: str) -> np.ndarray:
    """``validation_loss`` of every probe of probs [..., n, K] (numpy), shapes padded as
    ``crs.probe.padded.per_probe`` says."""
    return padded.per_probe(_validation_loss, probs, T, known, task)
