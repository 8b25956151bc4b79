"""Temperature scaling (Guo et al. 2017): one scalar per probe, fitted on the validation split.

A probe's probabilities become ``softmax(log p / T)`` (multi-class; log p are the
logits up to a per-image constant, which softmax ignores) or ``sigmoid(logit(p) / T)``
per label (multi-label, unknown entries masked). T minimises the validation NLL over
[1/20, 20].

As a function of beta = 1/T the NLL is convex: multi-class, ``mean_i lse(beta z_i) -
beta z_iy``, whose derivative is ``mean_i (E_p[z_i] - z_iy)`` and second derivative
``mean_i Var_p[z_i]`` (p = softmax(beta z_i)); multi-label, per label the mean over known
entries of ``softplus(beta z) - y beta z``, derivative ``(sigmoid(beta z) - y) z``, second
derivative ``sigmoid(1 - sigmoid) z^2``. So the minimiser over the range is an end where
the derivative does not change sign there, else the root of the derivative, which a
safeguarded Newton iteration (Newton steps inside a shrinking sign bracket, bisection where
a step leaves it) finds to machine precision for every probe at once, in a handful of
evaluations. A flat NLL (every beta optimal) gives T = 20, a probe with non-finite
probabilities NaN.
"""

from __future__ import annotations

import numpy as np

from crs.foundations.labels import check_task

EPS = float(np.finfo(np.float32).eps)
LOG_T_RANGE = (float(np.log(1 / 20)), float(np.log(20.0)))
MAX_STEPS = 100  # safeguarded Newton steps (a handful in practice; each bisection halves the bracket)
# stop when a Newton step is this small relative to beta (quadratic convergence: the next error would be ~1e-24)
_TOL = 1e-12


def logits(probs: np.ndarray, task: str) -> np.ndarray:
    """log p (multi-class) or log(p / (1 - p)) (multi-label), probabilities clipped to [eps, 1 - eps]."""
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0 - EPS)
    return np.log(p) if check_task(task).exclusive else np.log(p) - np.log1p(-p)


def scale(probs: np.ndarray, temperature: np.ndarray, task: str) -> np.ndarray:
    """Probabilities [..., image, class] after dividing the logits by temperature [...]."""
    z = logits(probs, task) / np.asarray(temperature, dtype=np.float64)[..., None, None]
    if check_task(task).exclusive:
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-z))


def nll(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str, temperature: np.ndarray) -> np.ndarray:
    """Mean validation NLL [...] of probs [..., image, class] scaled by temperature [...] (what ``fit`` minimises;
    multi-label: mean over labels of the per-label NLL over its known entries)."""
    z = logits(probs, task) / np.asarray(temperature, dtype=np.float64)[..., None, None]
    target = np.asarray(target, dtype=np.float64)
    if check_task(task).exclusive:
        m = z.max(axis=-1, keepdims=True)
        lse = m[..., 0] + np.log(np.exp(z - m).sum(axis=-1))
        return (lse - (z * target).sum(axis=-1)).mean(axis=-1)
    known = np.asarray(known, dtype=np.float64)
    # -log sigmoid(z) = softplus(-z), -log(1 - sigmoid(z)) = softplus(z)
    loss = np.where(target == 1, np.logaddexp(0.0, -z), np.logaddexp(0.0, z)) * known
    return (loss.sum(axis=-2) / np.maximum(known.sum(axis=-2), 1)).mean(axis=-1)


def _slopes(z: np.ndarray, zy: np.ndarray, target: np.ndarray, weight: np.ndarray, task: str, beta: np.ndarray):
    """(first, second derivative) [probe] of the NLL in beta at beta [probe], z [probe, image, class]."""
    bz = z * beta[:, None, None]
    if check_task(task).exclusive:
        e = np.exp(bz)  # log(eps) <= z <= 0 and beta <= 20: exp(beta z) in [1e-139, 1], no overflow or underflow
        p = e / e.sum(axis=-1, keepdims=True)
        pz = p * z
        mean_z = pz.sum(axis=-1)  # [probe, image]
        return (mean_z - zy).mean(axis=-1), ((pz * z).sum(axis=-1) - mean_z**2).mean(axis=-1)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-bz))
    wz = weight * z  # weight: known / known entries of the label / labels
    return ((s - target) * wz).sum(axis=(-2, -1)), (s * (1.0 - s) * wz * z).sum(axis=(-2, -1))


def fit(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str) -> np.ndarray:
    """Temperature [...] minimising the NLL of probs [..., image, class] on target, known [image, class]."""
    z_all = logits(probs, task)
    lead = z_all.shape[:-2]
    z_all = z_all.reshape(-1, *z_all.shape[-2:])  # [probe, image, class]
    target = np.asarray(target, dtype=np.float64)
    known = np.asarray(known, dtype=np.float64)
    weight = known / np.maximum(known.sum(axis=0), 1) / known.shape[1]
    lo_end, hi_end = 1.0 / 20.0, 20.0  # the range of beta = 1 / T (LOG_T_RANGE)
    beta = np.full(z_all.shape[0], np.nan)
    ok = np.flatnonzero(np.isfinite(z_all).all(axis=(1, 2)))
    z = z_all[ok]
    zy = (z * target).sum(axis=-1) if check_task(task).exclusive else None

    def slopes(idx, b):
        return _slopes(z[idx], None if zy is None else zy[idx], target, weight, task, b)

    everyone = np.arange(ok.size)
    g_lo, _ = slopes(everyone, np.full(ok.size, lo_end))
    g_hi, _ = slopes(everyone, np.full(ok.size, hi_end))
    out = np.where(g_lo >= 0, lo_end, hi_end)  # flat or rising at the low end: T = 20; falling at the top: 1/20
    inner = np.flatnonzero((g_lo < 0) & (g_hi > 0))
    lo, hi = np.full(inner.size, lo_end), np.full(inner.size, hi_end)
    b = np.ones(inner.size)  # T = 1, inside the range
    for _ in range(MAX_STEPS):
        if not inner.size:
            break
        g, h = slopes(inner, b)
        lo, hi = np.where(g < 0, b, lo), np.where(g < 0, hi, b)
        with np.errstate(invalid="ignore", divide="ignore"):
            step = np.where(h > 0, g / h, np.inf)
        done = (np.abs(step) <= _TOL * b) | (hi - lo <= _TOL * b)
        nxt = b - step
        out[inner[done]] = np.clip(nxt, lo, hi)[done]
        nxt = np.where((nxt > lo) & (nxt < hi), nxt, (lo + hi) / 2.0)  # bisect where Newton leaves the bracket
        keep = ~done
        inner, lo, hi, b = inner[keep], lo[keep], hi[keep], nxt[keep]
    out[inner] = b  # not reached at this tolerance (never seen): the last iterate
    beta[ok] = out
    return (1.0 / beta).reshape(lead)
