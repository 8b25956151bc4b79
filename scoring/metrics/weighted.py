"""The numpy kernels of AUROC and the binned calibration errors, one definition each, over multiplicities
``weights [image, replicate]`` (the package docstring gives the conventions)."""

from __future__ import annotations

import numpy as np

from crs.foundations.labels import check_task

N_BINS = 15


EPS = float(np.finfo(np.float32).eps)


def bin_index(conf: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Equal-width bin of each confidence: ``min(floor(n_bins c), n_bins - 1)``, clipped at 0."""
    return np.clip(np.floor(np.asarray(conf) * n_bins).astype(np.int64), 0, n_bins - 1)


def cumsum_rows(c: np.ndarray) -> None:
    """In-place cumulative sum down the rows of c [image, replicate].

    Row by row when there are many replicates, so each step adds two contiguous rows;
    ``np.cumsum(axis=0)`` walks such an array with a stride (benchmarks/score_bench.py
    measures the difference). The loop is over images, never replicates. Both add in the
    same order, so the sums are the same to the bit.
    """
    if c.shape[1] <= 64:  # few replicates (plain use: one; the image bootstrap's check draws): numpy's loop wins
        np.cumsum(c, axis=0, out=c)
        return
    for i in range(1, c.shape[0]):
        np.add(c[i], c[i - 1], out=c[i])


def weighted_auroc(
    scores: np.ndarray, positive: np.ndarray, weights: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """Binary AUROC [replicate] of scores [image] with multiplicities weights [image, replicate].

    Mann-Whitney with ties counting one half (= sklearn ``roc_auc_score`` on the images
    repeated by their weights); NaN for a replicate without both a positive and a negative.
    Sort the scores once; for one replicate with weights c the numerator is
    ``sum_{i positive} c_i (N_below(i) + N_tied(i) / 2)``, N_below / N_tied the total weight
    of negatives scoring strictly below / equal to i: a cumulative sum of the sorted
    negative weights read at the start and end of i's run of tied scores. The denominator
    is (positive weight) x (negative weight). O(B n) for B replicates, no sort per replicate.
    """
    scores = np.asarray(scores)
    positive = np.asarray(positive, dtype=bool)
    if valid is not None:
        keep = np.flatnonzero(valid)
        scores, positive, weights = scores[keep], positive[keep], weights[keep]
    n_rep = weights.shape[1]
    if scores.size == 0:
        return np.full(n_rep, np.nan)
    order = np.argsort(scores, kind="stable")
    s, pos = scores[order], positive[order]
    p_idx = np.flatnonzero(pos)
    c = weights[order]  # [sorted image, replicate], a fresh copy
    if not (np.issubdtype(c.dtype, np.floating) or c.dtype == np.int32):
        c = c.astype(np.int64)  # int32 counts from image_counts sum to n per replicate
    cp = c[p_idx].astype(np.float64)  # positive multiplicities
    c[p_idx] = 0
    cumsum_rows(c)  # c[i] = negative weight among the i + 1 lowest scores
    new_run = np.r_[True, s[1:] != s[:-1]]
    if new_run.all():  # no ties: a positive's own row is 0, so c there counts the negatives below
        num = np.einsum("jb,jb->b", cp, c[p_idx].astype(np.float64))
    else:  # below + tied / 2 = (negatives before its run + negatives through its run) / 2
        starts = np.flatnonzero(new_run)
        run = np.cumsum(new_run)[p_idx] - 1
        ends = np.r_[starts[1:], s.size]
        before = c[np.maximum(starts[run] - 1, 0)].astype(np.float64)
        before[starts[run] == 0] = 0.0
        num = np.einsum("jb,jb->b", cp, before + c[ends[run] - 1]) / 2.0
    n_pos, n_neg = cp.sum(axis=0), c[-1].astype(np.float64)
    den = n_pos * n_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_macro_auroc(
    probs: np.ndarray, target: np.ndarray, known: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Macro one-vs-rest (or mean per-label) AUROC [replicate] of probs [image, class].

    A class without both positives and negatives in a replicate is left out of that
    replicate's mean, as in ``auroc``.
    """
    per_class = np.stack(
        [
            weighted_auroc(probs[:, k], target[:, k] == 1, weights, known[:, k])
            for k in range(probs.shape[1])
        ],
        axis=1,
    )  # [replicate, class]
    ok = ~np.isnan(per_class)
    n_ok = ok.sum(axis=1)
    total = np.where(ok, per_class, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ok > 0, total / np.maximum(n_ok, 1), np.nan)


def binned_ece(
    conf: np.ndarray, hit: np.ndarray, weights: np.ndarray, n_bins: int = N_BINS
) -> np.ndarray:
    """``sum_b (n_b / n) |mean_b hit - mean_b conf|`` [replicate], bins on conf [image].

    hit [image] is ``correct`` (top-label ECE) or the class target y_k (classwise ECE,
    conf = p_k); weights [image, replicate]. An image's bin and its (hit - conf) gap do not
    depend on the weights, so every replicate's per-bin gap sums are one weighted sum per
    occupied bin over its images (einsum's own loop: a dense [bin, image] @ weights
    product costs a BLAS call that multiplies mostly zeros). NaN where the weights sum to 0.
    """
    conf = np.asarray(conf, dtype=np.float64)
    bins = bin_index(conf, n_bins)
    gap = np.asarray(hit, dtype=np.float64) - conf
    per_bin = np.stack(
        [np.einsum("n,nb->b", gap[bins == k], weights[bins == k]) for k in np.unique(bins)]
    ) if bins.size else np.zeros((1, weights.shape[1]))  # [occupied bin, replicate]
    total = weights.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(per_bin).sum(axis=0) / np.maximum(total, 1e-300), np.nan)


def weighted_ece(
    probs: np.ndarray, target: np.ndarray, known: np.ndarray, weights: np.ndarray, task: str,
    n_bins: int = N_BINS,
) -> np.ndarray:
    """Top-label ECE [replicate] of probs [image, class] (multi-label: mean of per-label binary ECEs)."""
    w = weights if weights.dtype == np.float64 else weights.astype(np.float64)
    if check_task(task).exclusive:
        conf = probs.max(axis=1).astype(np.float64)
        correct = (probs.argmax(axis=1) == target.argmax(axis=1)).astype(float)
        return binned_ece(conf, correct, w, n_bins)
    per_label = []
    for k in range(probs.shape[1]):
        p = probs[:, k].astype(np.float64)
        conf = np.maximum(p, 1.0 - p)
        correct = ((p >= 0.5) == (target[:, k] == 1)).astype(float)
        per_label.append(binned_ece(conf, correct, w * known[:, k, None], n_bins))
    return np.nanmean(np.stack(per_label, axis=1), axis=1)


def ece_draws(
    probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts_t: np.ndarray, task: str,
    n_bins: int = N_BINS,
) -> np.ndarray:
    """``weighted_ece`` [replicate] for many replicates at once, as one matrix product.

    counts_t [replicate, image] (float64: the multiplicities transposed). The per-bin gap
    sums are linear in the multiplicities, ``S[b, k] = sum_i counts[b, i] A[i, k]`` with
    ``A[i, k] = (hit_i - conf_i) [bin_i = k]``, so every replicate's bins come out of one
    BLAS product (multi-label: one column block per label, plus its known-entry total);
    ECE_b = sum_k |S[b, k]| / (total weight of replicate b). The same sums as
    ``binned_ece``, added in another order (tests compare them to 1e-12).
    """
    n, k = probs.shape
    if check_task(task).exclusive:
        conf = probs.max(axis=1).astype(np.float64)
        hit = (probs.argmax(axis=1) == target.argmax(axis=1)).astype(np.float64)
        a = np.zeros((n, n_bins + 1))
        a[np.arange(n), bin_index(conf, n_bins)] = hit - conf
        a[:, n_bins] = 1.0
        s = counts_t @ a  # [replicate, bin + total]
        total = s[:, n_bins]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, np.abs(s[:, :n_bins]).sum(axis=1) / np.maximum(total, 1e-300), np.nan)
    p = probs.astype(np.float64)
    conf = np.maximum(p, 1.0 - p)  # [image, label]
    hit = ((p >= 0.5) == (target == 1)).astype(np.float64)
    kn = known.astype(np.float64)
    a = np.zeros((n, k, n_bins + 1))
    rows, labels = np.indices((n, k))
    a[rows, labels, bin_index(conf, n_bins)] = (hit - conf) * kn
    a[:, :, n_bins] = kn
    s = (counts_t @ a.reshape(n, -1)).reshape(-1, k, n_bins + 1)
    total = s[:, :, n_bins]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_label = np.where(total > 0, np.abs(s[:, :, :n_bins]).sum(axis=2) / np.maximum(total, 1e-300), np.nan)
        ok = ~np.isnan(per_label)
        n_ok = ok.sum(axis=1)
        return np.where(n_ok > 0, np.where(ok, per_label, 0.0).sum(axis=1) / np.maximum(n_ok, 1), np.nan)
