"""The metrics as polars DataFrame -> DataFrame functions over a long prediction table (the package
docstring gives the table and the conventions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from crs.foundations.labels import Task, check_task, targets
from crs.scoring.metrics.weighted import EPS, N_BINS, bin_index, binned_ece, weighted_auroc

_SCHEMA = {
    "image": pl.Int64,
    "class": pl.Int64,
    "prob": pl.Float64,
    "target": pl.Int8,
    "known": pl.Boolean,
}


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
    log-probabilities, ``crs.foundations.forms``), as the column ``score``.
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
    if check_task(task).exclusive:
        return top_label(frame, by), by
    return binary_view(frame), [*by, "class"]


def _mean_over_labels(table: pl.DataFrame, by: list[str], task: str, name: str) -> pl.DataFrame:
    if check_task(task).exclusive:
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


def accuracy(frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS) -> pl.DataFrame:
    """Top-1 accuracy, or mean per-label accuracy at 0.5 for a multi-label task."""
    by = _by(by)
    rows, unit = _per_unit(frame, by, task)
    return _mean_over_labels(_group(rows, unit, accuracy=pl.col("correct").mean()), by, task, "accuracy")


def balanced_accuracy(
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS
) -> pl.DataFrame:
    """Mean recall over the classes present; multi-label: mean over labels of binary balanced accuracy."""
    by = _by(by)
    if check_task(task).exclusive:
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
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS, n_bins: int = N_BINS
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
    task: str = Task.MULTICLASS,
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


def brier(frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS) -> pl.DataFrame:
    """Multi-class Brier ``mean_i sum_k (p - y)^2``; multi-label: mean of per-label binary Brier."""
    by = _by(by)
    sq = (pl.col("prob") - pl.col("target").cast(pl.Float64)) ** 2
    if check_task(task).exclusive:
        per_image = _group(frame.with_columns(sq=sq), [*by, "image"], sq=pl.col("sq").sum())
        return _group(per_image, by, brier=pl.col("sq").mean())
    per_label = _group(frame.filter(pl.col("known")).with_columns(sq=sq), [*by, "class"], brier=pl.col("sq").mean())
    return _group(per_label, by, pl.col("brier").mean())


def nll(frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS) -> pl.DataFrame:
    """Negative log-likelihood per image (multi-label: mean of per-label binary log losses)."""
    by = _by(by)
    q = pl.col("prob").clip(EPS, 1.0 - EPS)
    if check_task(task).exclusive:
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
def aurc(frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS) -> pl.DataFrame:
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
    frame: pl.DataFrame, by: Sequence[str] = (), task: str = Task.MULTICLASS, ordinal: bool = False
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
    if ordinal and check_task(task).exclusive:
        parts.append(kappa_quadratic(frame, by))
    if not by:
        return pl.concat(parts, how="horizontal")
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on=by, how="left", maintain_order="left")
    return out


