"""Image-level bootstrap: metrics under resampled test images, every replicate at once.

A replicate draws n test images with replacement; the same draw is used for every
encoder, seed, fraction and condition of a dataset (paired), and a shift target gets its
own draw of its own test images. A draw is a matrix of multiplicities
``counts [image, replicate]`` (how often each image was drawn), and every metric is a
weighted version of the plain one:

* AUROC from sorted scores with multiplicities. Sort the scores of one probe once; for
  a replicate with counts c, the Mann-Whitney numerator is
  ``sum_{i positive} c_i (N_below(i) + N_tied(i) / 2)``, where N_below / N_tied are the
  total counts of negatives scoring strictly below / equal to i: a cumulative sum of
  the sorted negative counts read at the start and end of i's run of tied scores. The
  denominator is (positive count) x (negative count). One sort per probe, O(B n) per
  probe for B replicates, no sort per replicate.
* ECE: an image's bin and its (correct - confidence) gap do not depend on the draw, so
  the per-bin gap sums of all replicates are one weighted sum per bin over its images.

Axis values then follow docs/crs-v1.md section 1 from the resampled AUROC and ECE arrays.
"""

from __future__ import annotations

import numpy as np

from crs.scoring.metrics import N_BINS


def image_counts(n_images: int, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities int32 [image, replicate]: n_images draws with replacement per replicate.

    Images are the leading axis so that reordering images (one sort per probe) moves
    whole contiguous rows and cumulative sums run down the rows, vectorised over replicates.
    """
    if n_images < 1 or n_bootstrap < 1:
        raise ValueError(f"need at least one image and one replicate, got {n_images} and {n_bootstrap}")
    draw = rng.integers(0, n_images, size=(n_bootstrap, n_images))
    offsets = draw + n_images * np.arange(n_bootstrap)[:, None]
    counts = np.bincount(offsets.ravel(), minlength=n_bootstrap * n_images)
    return np.ascontiguousarray(counts.reshape(n_bootstrap, n_images).T.astype(np.int32))


def _cumsum_rows(c: np.ndarray) -> None:
    """In-place cumulative sum down the rows of c [image, replicate].

    Row by row: each step adds two contiguous rows, which ran about 3x faster than
    ``np.cumsum(axis=0)`` (strided) on [5000, 1000] int32 arrays in
    benchmarks/score_bench.py's setting. The loop is over images, never replicates.
    """
    for i in range(1, c.shape[0]):
        np.add(c[i], c[i - 1], out=c[i])


def weighted_auroc(
    scores: np.ndarray, positive: np.ndarray, counts: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """Binary AUROC [replicate] of scores [image] with multiplicities counts [image, replicate].

    Ties count one half (= sklearn ``roc_auc_score`` on the images repeated by their
    counts). NaN for a replicate without both a positive and a negative.
    """
    scores = np.asarray(scores)
    positive = np.asarray(positive, dtype=bool)
    if valid is not None:
        keep = np.flatnonzero(valid)
        scores, positive, counts = scores[keep], positive[keep], counts[keep]
    n_rep = counts.shape[1]
    if scores.size == 0:
        return np.full(n_rep, np.nan)
    order = np.argsort(scores, kind="stable")
    s, pos = scores[order], positive[order]
    p_idx = np.flatnonzero(pos)
    c = counts[order]  # [sorted image, replicate], a fresh copy
    if not (np.issubdtype(c.dtype, np.floating) or c.dtype == np.int32):
        c = c.astype(np.int64)  # int32 counts from image_counts sum to n per replicate
    cp = c[p_idx].astype(np.float64)  # positive multiplicities
    c[p_idx] = 0
    _cumsum_rows(c)  # c[i] = negative draws among the i + 1 lowest scores
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
    probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """Macro one-vs-rest (or mean per-label) AUROC [replicate] of probs [image, class].

    A class without both positives and negatives in a replicate is left out of that
    replicate's mean, as in the plain metric.
    """
    per_class = np.stack(
        [
            weighted_auroc(probs[:, k], target[:, k] == 1, counts, known[:, k])
            for k in range(probs.shape[1])
        ],
        axis=1,
    )  # [replicate, class]
    ok = ~np.isnan(per_class)
    n_ok = ok.sum(axis=1)
    total = np.where(ok, per_class, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ok > 0, total / np.maximum(n_ok, 1), np.nan)


def _binned_ece(conf: np.ndarray, correct: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """ECE [replicate] from per-image conf, correct [image] and weights [image, replicate]."""
    bins = np.clip(np.floor(conf * n_bins).astype(int), 0, n_bins - 1)
    gap = correct - conf
    # each image sits in one bin: a weighted sum per occupied bin, one pass over the weights
    # (einsum's own loop; a dense [bin, image] @ weights product spent more CPU on BLAS threads)
    per_bin = np.stack(
        [np.einsum("n,nb->b", gap[bins == k], weights[bins == k]) for k in np.unique(bins)]
    )  # [occupied bin, replicate]
    total = weights.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(per_bin).sum(axis=0) / np.maximum(total, 1e-300), np.nan)


def weighted_ece(
    probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts: np.ndarray, task: str,
    n_bins: int = N_BINS,
) -> np.ndarray:
    """Top-label ECE [replicate] (multi-label: mean of per-label binary ECEs), as crs.scoring.metrics.ece."""
    w = counts if counts.dtype == np.float64 else counts.astype(np.float64)
    if task == "multiclass":
        conf = probs.max(axis=1).astype(np.float64)
        correct = (probs.argmax(axis=1) == target.argmax(axis=1)).astype(float)
        return _binned_ece(conf, correct, w, n_bins)
    per_label = []
    for k in range(probs.shape[1]):
        p = probs[:, k].astype(np.float64)
        conf = np.maximum(p, 1.0 - p)
        correct = ((p >= 0.5) == (target[:, k] == 1)).astype(float)
        per_label.append(_binned_ece(conf, correct, w * known[:, k, None], n_bins))
    return np.nanmean(np.stack(per_label, axis=1), axis=1)


def retain(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """clip((a - 0.5) / (D - 0.5), 0, 1), and 0 where D <= 0.5 (docs/crs-v1.md section 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip((a - 0.5) / (d - 0.5), 0.0, 1.0)
    return np.where(d > 0.5, r, 0.0)


def axes_from(
    d: np.ndarray,
    ece: np.ndarray,
    low_fraction: np.ndarray,
    perturbed: np.ndarray | None,
    shift: np.ndarray | None,
) -> np.ndarray:
    """The four axis values [..., 4] (docs/crs-v1.md section 1) from AUROC and ECE arrays.

    d, ece [...]: clean AUROC and ECE at fraction 1; low_fraction [..., f]: clean AUROC at
    each fraction below 1; perturbed [..., c] at fraction 1 (None if none); shift [..., t]
    the AUROC on each shift target at fraction 1 (None if none). R = (P + S) / 2 with
    both, else whichever exists; S is the mean retention over the shift targets.
    """
    dd = d[..., None]
    label_eff = retain(low_fraction, dd).mean(axis=-1)
    parts = []
    if perturbed is not None and perturbed.shape[-1]:
        parts.append(retain(perturbed, dd).mean(axis=-1))
    if shift is not None and shift.shape[-1]:
        parts.append(retain(shift, dd).mean(axis=-1))
    if not parts:
        raise ValueError("robustness needs at least one perturbed or shift condition")
    robustness = sum(parts) / len(parts)
    return np.stack([d, 1.0 - ece, label_eff, robustness], axis=-1)
