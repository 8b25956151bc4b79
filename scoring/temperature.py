"""Temperature scaling (Guo et al. 2017): one scalar per probe, fitted on the validation split.

A probe's probabilities become ``softmax(log p / T)`` (multi-class; log p are the
logits up to a per-image constant, which softmax ignores) or ``sigmoid(logit(p) / T)``
per label (multi-label, unknown entries masked). T minimises the validation NLL. The
NLL is convex in 1/T (a log-sum-exp of a linear function, plus a linear term), hence
unimodal in log T, and a golden-section search on log T over [1/20, 20] finds it for
every probe at once: each step evaluates one new point per probe.
"""

from __future__ import annotations

import numpy as np

EPS = float(np.finfo(np.float32).eps)
LOG_T_RANGE = (float(np.log(1 / 20)), float(np.log(20.0)))
STEPS = 48  # golden-section steps: the bracket shrinks by 0.618^48 ~ 1e-10 of its width


def logits(probs: np.ndarray, task: str) -> np.ndarray:
    """log p (multi-class) or log(p / (1 - p)) (multi-label), probabilities clipped to [eps, 1 - eps]."""
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0 - EPS)
    return np.log(p) if task == "multiclass" else np.log(p) - np.log1p(-p)


def scale(probs: np.ndarray, temperature: np.ndarray, task: str) -> np.ndarray:
    """Probabilities [..., image, class] after dividing the logits by temperature [...]."""
    z = logits(probs, task) / np.asarray(temperature, dtype=np.float64)[..., None, None]
    if task == "multiclass":
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-z))


def _nll(z: np.ndarray, target: np.ndarray, known: np.ndarray, task: str) -> np.ndarray:
    """Mean NLL [...] of logits z [..., image, class] (multi-label: mean over labels of per-label NLL)."""
    if task == "multiclass":
        m = z.max(axis=-1, keepdims=True)
        lse = (m[..., 0] + np.log(np.exp(z - m).sum(axis=-1)))
        return (lse - (z * target).sum(axis=-1)).mean(axis=-1)
    # -log sigmoid(z) = softplus(-z), -log(1 - sigmoid(z)) = softplus(z)
    loss = np.where(target == 1, np.logaddexp(0.0, -z), np.logaddexp(0.0, z)) * known
    per_label = loss.sum(axis=-2) / np.maximum(known.sum(axis=-2), 1)
    return per_label.mean(axis=-1)


def fit(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str) -> np.ndarray:
    """Temperature [...] minimising the NLL of probs [..., image, class] on target, known [image, class]."""
    z = logits(probs, task)
    target = np.asarray(target, dtype=np.float64)
    known = np.asarray(known, dtype=np.float64)

    def f(log_t):
        return _nll(z / np.exp(log_t)[..., None, None], target, known, task)

    lead = z.shape[:-2]
    g = (np.sqrt(5.0) - 1.0) / 2.0
    a = np.full(lead, LOG_T_RANGE[0])
    b = np.full(lead, LOG_T_RANGE[1])
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(STEPS):
        left = fc < fd  # the minimum lies in [a, d]
        a, b = np.where(left, a, c), np.where(left, d, b)
        c_new = np.where(left, b - g * (b - a), d)
        d_new = np.where(left, c, a + g * (b - a))
        f_new = f(np.where(left, c_new, d_new))
        fc, fd = np.where(left, f_new, fd), np.where(left, fc, f_new)
        c, d = c_new, d_new
    return np.exp((a + b) / 2.0)
