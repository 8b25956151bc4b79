"""The metrics of many probability arrays of one split at once, ``tables.all_metrics``'s values without the
long table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crs.foundations.labels import check_task
from crs.scoring.metrics.tables import BASE
from crs.scoring.metrics.weighted import EPS, N_BINS, bin_index


def auroc_rows(scores: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Binary AUROC [row] of scores [row, image]: positives against negatives (entries in neither are left out).

    ``weighted_auroc`` with unit weights, vectorised over rows with one sort each. The numerator,
    sum over positives of (negatives before its tie run + negatives through its run) / 2, is a sum of
    integers and halves, so it is exact in float64, as the kernel's is: the values are the same to
    the bit. Rows without ties take the kernel's shortcut (a positive's run is itself: the negatives
    below it). NaN for a row without both a positive and a negative.
    """
    r, n = scores.shape
    order = np.argsort(scores, axis=1)
    ss = np.take_along_axis(scores, order, axis=1)
    pos = np.take_along_axis(positive, order, axis=1)
    cum = np.cumsum(np.take_along_axis(negative, order, axis=1), axis=1, dtype=np.int64)  # negatives in the first i + 1
    untied = (ss[:, 1:] != ss[:, :-1]).all(axis=1)
    num = np.zeros(r)
    num[untied] = np.where(pos[untied], cum[untied], 0).sum(axis=1)
    tied = np.flatnonzero(~untied)
    if tied.size:
        num[tied] = _tied_numerator(ss[tied], pos[tied], cum[tied])
    den = pos.sum(axis=1).astype(np.float64) * cum[:, -1].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def tie_runs(ss: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, new) per row of sorted scores: the first and last index of each element's run of
    equal scores, and whether an element opens a run."""
    r, n = ss.shape
    new = np.ones((r, n), dtype=bool)
    new[:, 1:] = ss[:, 1:] != ss[:, :-1]
    idx = np.arange(n)
    start = np.maximum.accumulate(np.where(new, idx, 0), axis=1)
    last = np.ones((r, n), dtype=bool)
    last[:, :-1] = new[:, 1:]
    end = np.minimum.accumulate(np.where(last, idx, n - 1)[:, ::-1], axis=1)[:, ::-1]
    return start, end, new


def _tied_numerator(ss: np.ndarray, pos: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """sum over positives of (negatives before its tie run + through its run) / 2, per row of sorted scores."""
    start, end, _ = tie_runs(ss)
    before = np.where(start > 0, np.take_along_axis(cum, np.maximum(start - 1, 0), axis=1), 0)
    through = np.take_along_axis(cum, end, axis=1)
    return np.where(pos, before + through, 0).sum(axis=1) / 2.0


def _binned_rows(conf: np.ndarray, hit: np.ndarray, use: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """``binned_ece`` [row] with unit weights on the ``use`` entries of conf, hit [row, image]; NaN where none."""
    r = conf.shape[0]
    bins = bin_index(conf, n_bins) + n_bins * np.arange(r)[:, None]
    gap = np.where(use, hit - conf, 0.0)
    per_bin = np.bincount(bins.ravel(), gap.ravel(), minlength=r * n_bins).reshape(r, n_bins)
    total = use.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(per_bin).sum(axis=1) / np.maximum(total, 1), np.nan)


def _aurc_rows(conf: np.ndarray, error: np.ndarray, use: np.ndarray) -> np.ndarray:
    """``aurc`` [row] of the ``use`` entries of conf, error [row, image]: most confident first, risk
    (e0 + j e / m) / (n0 + j) at the j-th image of a run of m tied confidences holding e errors, n0
    images and e0 errors before it; the mean of the risks. NaN where a row uses no entry."""
    n = conf.shape[1]
    key = np.where(use, -conf, np.inf)  # descending confidence, unused entries last
    order = np.argsort(key, axis=1)
    ks = np.take_along_axis(key, order, axis=1)
    es = np.take_along_axis(np.where(use, error, 0.0), order, axis=1)
    n_use = use.sum(axis=1)
    idx = np.arange(n)
    start, end, _ = tie_runs(ks)
    cum = np.cumsum(es, axis=1)
    e0 = np.where(start > 0, np.take_along_axis(cum, np.maximum(start - 1, 0), axis=1), 0.0)
    e_run = np.take_along_axis(cum, end, axis=1) - e0
    m = (end - start + 1).astype(np.float64)
    j = (idx - start + 1).astype(np.float64)
    risk = (e0 + j * e_run / m) / (idx + 1.0)
    kept = idx[None, :] < n_use[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_use > 0, np.where(kept, risk, 0.0).sum(axis=1) / np.maximum(n_use, 1), np.nan)


def nanmean_last(x: np.ndarray) -> np.ndarray:
    """Mean over the last axis leaving NaN out (NaN where nothing is left), as polars' mean of a column with nulls."""
    ok = ~np.isnan(x)
    n_ok = ok.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ok > 0, np.where(ok, x, 0.0).sum(axis=-1) / np.maximum(n_ok, 1), np.nan)


ARRAY_METRICS = (*BASE, "kappa_quadratic")


def array_metrics(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str,
                  names: Sequence[str] = BASE) -> dict[str, np.ndarray]:
    """``all_metrics`` of each probability array of probs [array, image, class] at once: {name: [array]}.

    The same definitions as the table functions above (module doc), computed on arrays instead of a
    long table, vectorised over arrays: ``names`` from ``ARRAY_METRICS``; NaN where the table
    functions give null. AUROC is bit-identical to ``weighted_auroc``'s; the others add the same
    terms in another order (tests compare them to 1e-12).
    """
    p = np.asarray(probs, dtype=np.float64)  # the long table's values: float32 -> float64 is exact
    m, n, k = p.shape
    tgt, kn = np.asarray(target) == 1, np.asarray(known, dtype=bool)
    out: dict[str, np.ndarray] = {}
    want = set(names)
    if "auroc" in want:
        per_class = auroc_rows(np.swapaxes(p, 1, 2).reshape(m * k, n), np.tile((tgt & kn).T, (m, 1)),
                               np.tile((~tgt & kn).T, (m, 1))).reshape(m, k)
        out["auroc"] = nanmean_last(per_class)
    if "classwise_ece" in want:
        pk = np.swapaxes(p, 1, 2).reshape(m * k, n)
        per_class = _binned_rows(pk, np.tile(tgt.T, (m, 1)).astype(np.float64), np.tile(kn.T, (m, 1)))
        out["classwise_ece"] = nanmean_last(per_class.reshape(m, k))
    if check_task(task).exclusive:
        out.update(_multiclass_arrays(p, tgt, want))
    else:
        out.update(_multilabel_arrays(p, tgt, kn, want))
    return {name: out[name] for name in names}


def _multiclass_arrays(p: np.ndarray, tgt: np.ndarray, want: set) -> dict[str, np.ndarray]:
    m, n, k = p.shape
    label = tgt.argmax(axis=1)  # [image]
    pred = p.argmax(axis=2)  # [array, image], the lowest class on a tie
    conf = p.max(axis=2)
    correct = (pred == label).astype(np.float64)
    use = np.ones((m, n), dtype=bool)
    out = {}
    if "accuracy" in want:
        out["accuracy"] = correct.mean(axis=1)
    if "balanced_accuracy" in want:
        present = np.flatnonzero(np.bincount(label, minlength=k))
        recall = np.stack([correct[:, label == c].mean(axis=1) for c in present], axis=1)
        out["balanced_accuracy"] = recall.mean(axis=1)
    if "ece" in want:
        out["ece"] = _binned_rows(conf, correct, use)
    if "brier" in want:
        out["brier"] = ((p - tgt) ** 2).sum(axis=2).mean(axis=1)
    if "nll" in want:
        q = np.clip(p, EPS, 1.0 - EPS)
        q = q / q.sum(axis=2, keepdims=True)
        out["nll"] = -np.log(q[:, np.arange(n), label]).mean(axis=1)
    if "aurc" in want:
        out["aurc"] = _aurc_rows(conf, 1.0 - correct, use)
    if "kappa_quadratic" in want:
        a, b = label.astype(np.float64)[None, :], pred.astype(np.float64)
        observed = ((a - b) ** 2).sum(axis=1)
        expected = (a**2).sum() + (b**2).sum(axis=1) - 2.0 * a.sum() * b.sum(axis=1) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            out["kappa_quadratic"] = np.where(expected > 0, 1.0 - observed / np.where(expected > 0, expected, 1.0),
                                              np.nan)
    return out


def _multilabel_arrays(p: np.ndarray, tgt: np.ndarray, kn: np.ndarray, want: set) -> dict[str, np.ndarray]:
    """Per label over its known entries, then the mean over labels with a known entry (the binary view)."""
    m, n, k = p.shape
    rows = np.swapaxes(p, 1, 2).reshape(m * k, n)  # [array x label, image]
    y = np.tile(tgt.T, (m, 1))
    use = np.tile(kn.T, (m, 1))
    conf = np.maximum(rows, 1.0 - rows)
    correct = ((rows >= 0.5) == y).astype(np.float64)
    n_use = use.sum(axis=1)
    has = n_use > 0

    def per_label(values: np.ndarray) -> np.ndarray:  # [array x label] -> [array], labels without entries left out
        return nanmean_last(np.where(has, values, np.nan).reshape(m, k))

    def mean_used(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(use, x, 0.0).sum(axis=1) / n_use

    out = {}
    if "accuracy" in want:
        out["accuracy"] = per_label(mean_used(correct))
    if "balanced_accuracy" in want:
        recalls = []
        for cls in (True, False):
            sel = use & (y == cls)
            with np.errstate(invalid="ignore", divide="ignore"):
                recalls.append(np.where(sel.any(axis=1), np.where(sel, correct, 0.0).sum(axis=1)
                                        / np.maximum(sel.sum(axis=1), 1), np.nan))
        out["balanced_accuracy"] = per_label(nanmean_last(np.stack(recalls[::-1], axis=1)))
    if "ece" in want:
        out["ece"] = per_label(_binned_rows(conf, correct, use))
    if "brier" in want:
        out["brier"] = per_label(mean_used((rows - y) ** 2))
    if "nll" in want:
        q = np.clip(rows, EPS, 1.0 - EPS)
        out["nll"] = per_label(-mean_used(np.where(y, np.log(q), np.log(1.0 - q))))
    if "aurc" in want:
        out["aurc"] = per_label(_aurc_rows(conf, 1.0 - correct, use))
    if "kappa_quadratic" in want:
        out["kappa_quadratic"] = np.full(m, np.nan)
    return out
