"""Run-record metrics in JAX, vectorised over probes.

Every function takes probabilities ``p [n, K]``, targets ``T [n, K]`` in {0, 1} and a
mask ``known [n, K]`` (0 where a multilabel entry is unknown; for multiclass, a row counts
where ``known[:, 0]`` is 1, the same for every class) and returns a scalar over the rows that
count; ``all_metrics`` vmaps them over leading probe axes, on rows padded to a shape bucket
(``crs.probe.padded``: the padded rows, and rows left out, have known 0).

* AUROC: Mann-Whitney U with average ranks for ties (= sklearn ``roc_auc_score``);
  multiclass: macro one-vs-rest; multilabel: mean over labels. Classes or labels
  without both positives and negatives are left out of the mean (NaN if none is left).
* ECE: 15 equal-width bins on the top-label confidence, bin ``min(floor(15 c), 14)``
  (bins [0, 1/15), ..., [14/15, 1]); ``sum_b (n_b / n) |acc_b - conf_b|``. Multilabel:
  mean over labels of the binary top-label ECE (confidence ``max(p, 1 - p)``, predicted
  label ``p >= 0.5``). (``docs/crs-v1.md`` section 1.)
* Brier: multiclass ``mean_i sum_k (p_ik - y_ik)^2`` (Brier 1950); multilabel: mean over
  labels of the binary Brier score (= sklearn ``brier_score_loss`` per label).
* NLL: ``-mean log p(y)``, probabilities clipped to [eps, 1 - eps] with float32 eps;
  multilabel: mean over labels of the binary log loss.
* Accuracy: top-1 (multiclass); mean per-label accuracy at threshold 0.5 (multilabel).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from crs.foundations.labels import check_task
from crs.probe import compiled, padded

N_BINS = 15
EPS = float(jnp.finfo(jnp.float32).eps)


def binary_auroc(score, positive, valid):
    """AUROC of ``score`` for ``positive`` among ``valid`` entries; NaN without both classes."""
    s = jnp.where(valid, score, jnp.inf)  # invalid entries sort last and count below nobody
    ordered = jnp.sort(s)
    lo = jnp.searchsorted(ordered, score, side="left")
    hi = jnp.searchsorted(ordered, score, side="right")
    rank = (lo + hi + 1) / 2.0  # 1-based average rank among valid entries
    pos = (positive > 0.5) & valid
    neg = (positive <= 0.5) & valid
    n_pos, n_neg = pos.sum(), neg.sum()
    u = jnp.where(pos, rank, 0.0).sum() - n_pos * (n_pos + 1) / 2.0
    return jnp.where((n_pos > 0) & (n_neg > 0), u / jnp.maximum(n_pos * n_neg, 1), jnp.nan)


def auroc(p, T, known):
    per_class = jax.vmap(binary_auroc, in_axes=(1, 1, 1))(p, T, known > 0)
    return jnp.nanmean(per_class)


def _ece_from(conf, correct, valid):
    """Binned |accuracy - confidence| gap; conf, correct, valid [n]."""
    bins = jnp.clip(jnp.floor(conf * N_BINS).astype(jnp.int32), 0, N_BINS - 1)
    gap = jnp.where(valid, correct.astype(conf.dtype) - conf, 0.0)
    per_bin = jax.ops.segment_sum(gap, bins, num_segments=N_BINS)
    return jnp.abs(per_bin).sum() / jnp.maximum(valid.sum(), 1)


def _rows(known):
    """Multiclass: which rows count, [n] float (``known[:, 0]``)."""
    return known[:, 0]


def _row_mean(v, known):
    """The mean of v [n] over the rows that count (multiclass)."""
    w = _rows(known)
    return (w * v).sum() / jnp.maximum(w.sum(), 1.0)


def ece(p, T, known, task: str):
    if check_task(task).exclusive:
        conf = p.max(-1)
        correct = p.argmax(-1) == T.argmax(-1)
        return _ece_from(conf, correct, _rows(known) > 0)
    conf = jnp.maximum(p, 1 - p)
    correct = (p >= 0.5) == (T > 0.5)
    per_label = jax.vmap(_ece_from, in_axes=(1, 1, 1))(conf, correct, known > 0)
    return per_label.mean()


def brier(p, T, known, task: str):
    sq = (p - T) ** 2
    if check_task(task).exclusive:
        return _row_mean(sq.sum(-1), known)
    return ((known * sq).sum(0) / jnp.maximum(known.sum(0), 1)).mean()


def nll(p, T, known, task: str):
    q = jnp.clip(p, EPS, 1 - EPS)
    if check_task(task).exclusive:
        q = q / q.sum(-1, keepdims=True)  # as sklearn log_loss renormalises after clipping
        return _row_mean(-(T * jnp.log(q)).sum(-1), known)
    ll = T * jnp.log(q) + (1 - T) * jnp.log(1 - q)
    return (-(known * ll).sum(0) / jnp.maximum(known.sum(0), 1)).mean()


def accuracy(p, T, known, task: str):
    if check_task(task).exclusive:
        return _row_mean((p.argmax(-1) == T.argmax(-1)).astype(p.dtype), known)
    hit = ((p >= 0.5) == (T > 0.5)) & (known > 0)
    return (hit.sum(0) / jnp.maximum(known.sum(0), 1)).mean()


NAMES = ("auroc", "ece", "brier", "nll", "accuracy")


def _one(lp, T, known, task):
    p = jnp.exp(lp)
    return jnp.stack(
        [auroc(lp, T, known), ece(p, T, known, task), brier(p, T, known, task),
         nll(p, T, known, task), accuracy(p, T, known, task)]
    )


def all_metrics(log_probs, T, known, task: str, counted=None) -> np.ndarray:
    """log_probs [..., n, K] -> [..., 5] in the order of ``NAMES`` (numpy), over the rows ``counted``
    ([n] bool, default all); shapes padded as ``crs.probe.padded.per_probe`` says.

    AUROC ranks the log-probabilities themselves (``crs.probe.core.log_link``: distinct where the
    probabilities round to 0 or 1); the other metrics take their exp."""
    return padded.per_probe(_all_jit, log_probs, T, known, task, counted)


_all_jit = compiled.jit(jax.vmap(_one, in_axes=(0, None, None, None)), static_argnums=3)
