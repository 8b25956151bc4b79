"""Reliability metrics as polars DataFrame -> DataFrame functions over a long prediction table.

The prediction table has one row per (image, class) of each evaluated probe:

    <key columns...>  image (Int64)  class (Int64)  prob (Float64)  target (Int8, 0|1)  known (Boolean)

``target`` is the one-hot label for a multi-class task and the label for a multi-label
task; ``known`` is False where a multi-label entry is unknown (always True for
multi-class). ``long_table`` builds it from stored probabilities. Every metric takes the
table and ``by`` (the key columns that identify one probe evaluation, e.g. encoder,
dataset, seed, fraction, condition) and returns one row per key with the metric, so
they chain with ``.pipe`` and never depend on the order of the rows.

AUROC and the binned calibration errors have one definition each: the numpy kernels
``weighted_auroc`` and ``binned_ece`` below, which take multiplicities ``weights [image,
replicate]``. The table functions call them with unit weights; the image bootstrap calls
them with the resampled multiplicities of every replicate at once (``crs.scoring.resample``).
The probe's JAX copies (``crs.probe.metrics``) are tested equal to them.

Conventions (the same as the probe's run-record metrics in crs.probe.metrics):

* AUROC: Mann-Whitney U with average ranks for ties (= sklearn ``roc_auc_score``);
  multi-class: macro one-vs-rest; multi-label: mean over labels. Classes without both
  positives and negatives are left out of the mean (null if none is left).
* Equal-width bins: 15 bins, bin ``min(floor(15 c), 14)``, so bin b is [b/15, (b+1)/15)
  and the last one includes 1. (scikit-learn's ``calibration_curve`` puts a value that
  lies exactly on an inner edge in the lower bin; tests pin the difference.)
* ECE (top-label): ``sum_b (n_b / n) |acc_b - conf_b|`` on the top-label confidence;
  multi-label: mean over labels of the binary top-label ECE with confidence
  ``max(p, 1 - p)`` and prediction ``p >= 0.5`` (docs/crs-v1.md section 1).
* Classwise ECE (Kull et al. 2019): mean over classes k of
  ``sum_b (n_b / n) |mean_b y_k - mean_b p_k|``, bins on ``p_k``.
* Brier: multi-class ``mean_i sum_k (p_ik - y_ik)^2``; multi-label: mean over labels of
  the binary Brier score.
* NLL: ``-mean log p(y)`` with probabilities clipped to [eps, 1 - eps] (float32 eps)
  and renormalised (as sklearn ``log_loss``); multi-label: mean over labels of the
  binary log loss.
* Accuracy: top-1 (ties to the lowest class, as ``argmax``); multi-label: mean per-label
  accuracy at threshold 0.5. Balanced accuracy: mean recall over the classes present
  (= sklearn ``balanced_accuracy_score``); multi-label: mean over labels of the binary
  balanced accuracy at 0.5.
* Quadratic-weighted kappa (ordinal tasks): ``1 - sum_i (y_i - h_i)^2 / E`` with
  ``E = (1/n) sum_i sum_j (y_i - h_j)^2``, the same disagreement under independent
  marginals (= sklearn ``cohen_kappa_score(weights='quadratic')`` with every class listed).
* AURC (Geifman et al. 2019): order images by confidence, highest first; risk at
  coverage k/n is the error rate of the k most confident; AURC is the mean of the risks
  over k = 1..n. Within a run of tied confidences the cumulative errors grow linearly
  (the mean over orderings of the tied images), so the value does not depend on row
  order. Multi-label: mean over labels of the binary AURC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from crs.labels import check_task, targets

N_BINS = 15
EPS = float(np.finfo(np.float32).eps)

_SCHEMA = {
    "image": pl.Int64,
    "class": pl.Int64,
    "prob": pl.Float64,
    "target": pl.Int8,
    "known": pl.Boolean,
}


# ------------------------------------------------------- numpy kernels (one definition)
def bin_index(conf: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Equal-width bin of each confidence: ``min(floor(n_bins c), n_bins - 1)``, clipped at 0."""
    return np.clip(np.floor(np.asarray(conf) * n_bins).astype(np.int64), 0, n_bins - 1)


def _cumsum_rows(c: np.ndarray) -> None:
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
    _cumsum_rows(c)  # c[i] = negative weight among the i + 1 lowest scores
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
    if check_task(task) == "multiclass":
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
    if check_task(task) == "multiclass":
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


# ------------------------------------------------------------------ the table
def long_table(
    probs: np.ndarray,
    labels: np.ndarray,
    task: str,
    keys: Mapping[str, Sequence] | None = None,
    scores: np.ndarray | None = None,
) -> pl.DataFrame:
    """The long prediction table from probabilities [*lead, image, class].

    ``keys`` names the leading axes in order, each with its values (e.g.
    ``{"seed": [0, 1], "fraction": [0.5, 1.0]}``); ``labels`` are the stored labels of
    the images (class indices, or int8 {1, 0, -1} [image, class]). ``scores`` (the shape of
    ``probs``): what AUROC ranks where it differs from the probabilities (stored
    log-probabilities, ``crs.forms``), as the column ``score``.
    """
    p = np.asarray(probs, dtype=np.float64)
    keys = dict(keys or {})
    lead = p.shape[:-2]
    if len(keys) != len(lead) or any(len(v) != n for v, n in zip(keys.values(), lead)):
        raise ValueError(
            f"keys {[(k, len(v)) for k, v in keys.items()]} do not match the leading axes {lead} "
            "of the probabilities"
        )
    n, k = p.shape[-2:]
    t, known = targets(labels, task, k)
    if t.shape[0] != n:
        raise ValueError(f"{t.shape[0]} labels for {n} images")
    reps = int(np.prod(lead)) if lead else 1
    cols: dict[str, object] = {}
    idx = np.indices(lead).reshape(len(lead), -1) if lead else np.zeros((0, 1), dtype=int)
    for j, (name, values) in enumerate(keys.items()):
        cols[name] = np.repeat(np.asarray(values)[idx[j]], n * k)
    cols["image"] = np.tile(np.repeat(np.arange(n, dtype=np.int64), k), reps)
    cols["class"] = np.tile(np.arange(k, dtype=np.int64), n * reps)
    cols["prob"] = p.reshape(-1)
    cols["target"] = np.tile(t.reshape(-1), reps)
    cols["known"] = np.tile(known.reshape(-1), reps)
    if scores is not None:
        cols["score"] = np.asarray(scores, dtype=np.float64).reshape(-1)
    return pl.DataFrame(cols).cast({c: d for c, d in _SCHEMA.items() if c in cols})


# ----------------------------------------------------------------- helpers
def _by(by: Sequence[str] | str) -> list[str]:
    return [by] if isinstance(by, str) else list(by)


def _group(frame: pl.DataFrame, by: list[str], *aggs: pl.Expr, **named: pl.Expr) -> pl.DataFrame:
    if by:
        return frame.group_by(by).agg(*aggs, **named).sort(by)
    return frame.select(*aggs, **named)


def _with_bin(rows: pl.DataFrame, conf: str, n_bins: int) -> pl.DataFrame:
    return rows.with_columns(bin=pl.Series(bin_index(rows[conf].to_numpy(), n_bins), dtype=pl.Int64))


def _per_group(rows: pl.DataFrame, keys: list[str], name: str, kernel) -> pl.DataFrame:
    """One row per ``keys`` with ``name`` = kernel(group rows, unit weights [row, 1]); NaN -> null."""

    def value(g: pl.DataFrame) -> float:
        return float(kernel(g, np.ones((g.height, 1)))[0])

    if not keys:
        return pl.DataFrame({name: [value(rows)]}, schema={name: pl.Float64}).fill_nan(None)
    # one stable sort, then each group is a zero-copy slice (partition_by copies every group)
    rows = rows.sort(keys, maintain_order=True)
    out = rows.group_by(keys, maintain_order=True).agg(pl.len().alias("_n"))
    starts = np.concatenate([[0], np.cumsum(out["_n"].to_numpy())[:-1]])
    values = [value(rows.slice(int(a), int(n))) for a, n in zip(starts, out["_n"].to_numpy())]
    return out.drop("_n").with_columns(pl.Series(name, values, dtype=pl.Float64).fill_nan(None))


def top_label(frame: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """One row per (by, image) of a multi-class table: label, pred, confidence, correct.

    ``pred`` is the class of the highest probability, the lowest such class on a tie.
    """
    by = _by(by)
    out = frame.group_by(*by, "image").agg(
        label=pl.col("class").filter(pl.col("target") == 1).first(),
        pred=pl.col("class").filter(pl.col("prob") == pl.col("prob").max()).min(),
        confidence=pl.col("prob").max(),
    )
    return out.with_columns(correct=(pl.col("pred") == pl.col("label")).cast(pl.Float64))


def binary_view(frame: pl.DataFrame) -> pl.DataFrame:
    """Known multi-label entries with confidence max(p, 1 - p) and correct (p >= 0.5 == target)."""
    return frame.filter(pl.col("known")).with_columns(
        confidence=pl.max_horizontal(pl.col("prob"), 1.0 - pl.col("prob")),
        correct=((pl.col("prob") >= 0.5) == (pl.col("target") == 1)).cast(pl.Float64),
    )


def _per_unit(frame: pl.DataFrame, by: list[str], task: str) -> tuple[pl.DataFrame, list[str]]:
    """Top-label rows with the grouping that one binned/ordered metric runs over.

    Multi-class: one row per image, grouped by ``by``. Multi-label: one row per known
    (image, label), grouped by ``by`` + class (a metric per label, averaged afterwards).
    """
    if check_task(task) == "multiclass":
        return top_label(frame, by), by
    return binary_view(frame), [*by, "class"]


def _mean_over_labels(table: pl.DataFrame, by: list[str], task: str, name: str) -> pl.DataFrame:
    if task == "multiclass":
        return table
    return _group(table, by, pl.col(name).mean())


# ---------------------------------------------------------------- discrimination
def auroc_per_class(frame: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """One-vs-rest AUROC per (by, class) on known entries (``weighted_auroc``); null without both classes.
    Ranks the column ``score`` where the table has one (``long_table``), else ``prob``."""
    by = _by(by)
    ranked = "score" if "score" in frame.columns else "prob"

    def kernel(g: pl.DataFrame, w: np.ndarray) -> np.ndarray:
        return weighted_auroc(g[ranked].to_numpy(), g["target"].to_numpy() == 1, w)

    return _per_group(frame.filter(pl.col("known")), [*by, "class"], "auroc", kernel)


def auroc(frame: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Macro one-vs-rest AUROC (multi-class) or mean per-label AUROC (multi-label) per ``by``."""
    by = _by(by)
    return _group(auroc_per_class(frame, by), by, pl.col("auroc").mean())


def accuracy(frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass") -> pl.DataFrame:
    """Top-1 accuracy, or mean per-label accuracy at 0.5 for a multi-label task."""
    by = _by(by)
    rows, unit = _per_unit(frame, by, task)
    return _mean_over_labels(_group(rows, unit, accuracy=pl.col("correct").mean()), by, task, "accuracy")


def balanced_accuracy(
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass"
) -> pl.DataFrame:
    """Mean recall over the classes present; multi-label: mean over labels of binary balanced accuracy."""
    by = _by(by)
    if check_task(task) == "multiclass":
        rows = top_label(frame, by)
        recall = _group(rows, [*by, "label"], recall=pl.col("correct").mean())
        return _group(recall, by, balanced_accuracy=pl.col("recall").mean())
    rows = binary_view(frame)
    recall = _group(rows, [*by, "class", "target"], recall=pl.col("correct").mean())
    per_label = _group(recall, [*by, "class"], balanced_accuracy=pl.col("recall").mean())
    return _group(per_label, by, pl.col("balanced_accuracy").mean())


def kappa_quadratic(frame: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Quadratic-weighted Cohen's kappa of the top-1 prediction (multi-class, ordinal classes).

    With a = true class index and b = predicted index over n images,
    ``sum_ij (a_i - b_j)^2 = n sum a^2 + n sum b^2 - 2 sum a sum b``, so the expected
    disagreement needs only sums. Null where it is 0 (a single class everywhere).
    """
    by = _by(by)
    rows = top_label(frame, by).with_columns(
        a=pl.col("label").cast(pl.Float64), b=pl.col("pred").cast(pl.Float64)
    )
    n = pl.len().cast(pl.Float64)
    observed = ((pl.col("a") - pl.col("b")) ** 2).sum()
    expected = (
        (pl.col("a") ** 2).sum()
        + (pl.col("b") ** 2).sum()
        - 2.0 * pl.col("a").sum() * pl.col("b").sum() / n
    )
    kappa = pl.when(expected > 0).then(1.0 - observed / expected).otherwise(None)
    return _group(rows, by, kappa_quadratic=kappa)


# ------------------------------------------------------------------- calibration
def ece(
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass", n_bins: int = N_BINS
) -> pl.DataFrame:
    """Top-label ECE with ``n_bins`` equal-width bins (multi-label: mean of per-label ECEs), ``binned_ece``."""
    by = _by(by)
    rows, unit = _per_unit(frame, by, task)

    def kernel(g: pl.DataFrame, w: np.ndarray) -> np.ndarray:
        return binned_ece(g["confidence"].to_numpy(), g["correct"].to_numpy(), w, n_bins)

    return _mean_over_labels(_per_group(rows, unit, "ece", kernel), by, task, "ece")


def classwise_ece(frame: pl.DataFrame, by: Sequence[str] = (), n_bins: int = N_BINS) -> pl.DataFrame:
    """Mean over classes of ``binned_ece`` with conf p_k and hit y_k (known entries)."""
    by = _by(by)

    def kernel(g: pl.DataFrame, w: np.ndarray) -> np.ndarray:
        return binned_ece(g["prob"].to_numpy(), g["target"].to_numpy(), w, n_bins)

    per_class = _per_group(frame.filter(pl.col("known")), [*by, "class"], "ece", kernel)
    return _group(per_class, by, classwise_ece=pl.col("ece").mean())


def reliability(
    frame: pl.DataFrame,
    by: Sequence[str] = (),
    task: str = "multiclass",
    kind: str = "top_label",
    n_bins: int = N_BINS,
) -> pl.DataFrame:
    """Reliability-diagram data: one row per non-empty bin.

    kind 'top_label': bins on the top-label confidence (multi-label: per label, on
    max(p, 1 - p)); kind 'class': per class, bins on p_k against y_k (what
    sklearn's ``calibration_curve`` computes for one class). Columns: by, [class,] bin,
    lower, upper, count, confidence (mean), accuracy (mean of correct, or of y_k).
    """
    by = _by(by)
    if kind == "top_label":
        rows, unit = _per_unit(frame, by, task)
        rows = _with_bin(rows, "confidence", n_bins).with_columns(hit=pl.col("correct"))
    elif kind == "class":
        rows, unit = frame.filter(pl.col("known")), [*by, "class"]
        rows = _with_bin(rows.with_columns(confidence=pl.col("prob")), "confidence", n_bins).with_columns(
            hit=pl.col("target").cast(pl.Float64)
        )
    else:
        raise ValueError(f"kind must be 'top_label' or 'class', not {kind!r}")
    return _group(
        rows,
        [*unit, "bin"],
        count=pl.len(),
        confidence=pl.col("confidence").mean(),
        accuracy=pl.col("hit").mean(),
    ).with_columns(
        lower=pl.col("bin").cast(pl.Float64) / n_bins,
        upper=(pl.col("bin") + 1).cast(pl.Float64) / n_bins,
    ).select(*unit, "bin", "lower", "upper", "count", "confidence", "accuracy")


def brier(frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass") -> pl.DataFrame:
    """Multi-class Brier ``mean_i sum_k (p - y)^2``; multi-label: mean of per-label binary Brier."""
    by = _by(by)
    sq = (pl.col("prob") - pl.col("target").cast(pl.Float64)) ** 2
    if check_task(task) == "multiclass":
        per_image = _group(frame.with_columns(sq=sq), [*by, "image"], sq=pl.col("sq").sum())
        return _group(per_image, by, brier=pl.col("sq").mean())
    per_label = _group(frame.filter(pl.col("known")).with_columns(sq=sq), [*by, "class"], brier=pl.col("sq").mean())
    return _group(per_label, by, pl.col("brier").mean())


def nll(frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass") -> pl.DataFrame:
    """Negative log-likelihood per image (multi-label: mean of per-label binary log losses)."""
    by = _by(by)
    q = pl.col("prob").clip(EPS, 1.0 - EPS)
    if check_task(task) == "multiclass":
        f = frame.with_columns(q=q).with_columns(q=pl.col("q") / pl.col("q").sum().over(*by, "image"))
        per_image = _group(
            f, [*by, "image"], ll=pl.col("q").filter(pl.col("target") == 1).log().sum()
        )
        return _group(per_image, by, nll=-pl.col("ll").mean())
    y = pl.col("target").cast(pl.Float64)
    ll = y * q.log() + (1.0 - y) * (1.0 - q).log()
    per_label = _group(frame.filter(pl.col("known")).with_columns(ll=ll), [*by, "class"], nll=-pl.col("ll").mean())
    return _group(per_label, by, pl.col("nll").mean())


# -------------------------------------------------------- selective prediction
def aurc(frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass") -> pl.DataFrame:
    """Area under the risk-coverage curve (0/1 risk), ties in confidence averaged; see module doc."""
    by = _by(by)
    rows, unit = _per_unit(frame, by, task)
    groups = _group(rows, [*unit, "confidence"], m=pl.len(), e=(1.0 - pl.col("correct")).sum())
    # runs of equal confidence, most confident first; counts before each run
    groups = groups.sort([*unit, "confidence"], descending=[False] * len(unit) + [True])
    over = unit or None
    before_n = pl.col("m").cum_sum() - pl.col("m")
    before_e = pl.col("e").cum_sum() - pl.col("e")
    if over:
        before_n, before_e = before_n.over(over), before_e.over(over)
    groups = groups.with_columns(n0=before_n, e0=before_e, j=pl.int_ranges(1, pl.col("m") + 1))
    steps = groups.explode("j").with_columns(
        risk=(pl.col("e0") + pl.col("j") * pl.col("e") / pl.col("m")) / (pl.col("n0") + pl.col("j"))
    )
    per_unit = _group(steps, unit, aurc=pl.col("risk").mean())
    return _mean_over_labels(per_unit, by, task, "aurc")


# ------------------------------------------------------------------ everything
BASE = ("auroc", "accuracy", "balanced_accuracy", "ece", "classwise_ece", "brier", "nll", "aurc")


def all_metrics(
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = "multiclass", ordinal: bool = False
) -> pl.DataFrame:
    """Every metric of this module per ``by`` in one wide table (kappa_quadratic when ordinal)."""
    by = _by(by)
    parts = [
        auroc(frame, by),
        accuracy(frame, by, task),
        balanced_accuracy(frame, by, task),
        ece(frame, by, task),
        classwise_ece(frame, by),
        brier(frame, by, task),
        nll(frame, by, task),
        aurc(frame, by, task),
    ]
    if ordinal and task == "multiclass":
        parts.append(kappa_quadratic(frame, by))
    if not by:
        return pl.concat(parts, how="horizontal")
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on=by, how="left", maintain_order="left")
    return out


# ------------------------------------------- every metric of many arrays at once (the fast path)
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
    if check_task(task) == "multiclass":
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
