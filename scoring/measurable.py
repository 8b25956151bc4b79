"""Which (dataset, axis) values can be measured at all, so that none decides a tier by accident.

AUROC is undefined for a class without a positive or without a negative test image, and a probe
scores a class it never saw in training at chance; a macro AUROC over no class that has both is no
measurement, yet it arrives as a number (0.5, or NaN turned into a rank). ``not_measurable`` lists the
datasets where that happens, with the axes it takes away and why; ``Scores`` carries the list in
``settings["not_measurable"]`` (scores.json) and as the per-dataset table's ``measurable`` column, and
the verdict names no leader while the list is not empty (``crs.scoring.verdict.build``).

A class (multi-label: a finding) counts where the training split holds it (a finding: a positive and a
negative image) and the test split, images that failed to decode left out, holds at least
``MIN_POSITIVES`` positive and one negative image of it. A dataset with no class that counts is not
measurable on any axis: discrimination, label efficiency and robustness are AUROCs or ratios of them,
and calibration of classes never learned says nothing of the encoder. The stored table decides, so scoring
without a store flags nothing (a NaN AUROC in the run records is refused there already).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.foundations.labels import check_task
from crs.foundations.names import SPLIT_CODE
from crs.scoring.axes import AXES

MIN_POSITIVES = 1  # positive test images a class needs for its AUROC to exist (and one negative)

_FIX = ("give the dataset a split whose train and test parts hold every class (crs datasets check on it says "
        "what each split lacks)")


def _counted(labels: np.ndarray, split: np.ndarray, task: str, k: int) -> int:
    """How many of the ``k`` classes (findings) count, as the module docstring says."""
    train, test = split == SPLIT_CODE["train"], split == SPLIT_CODE["test"]
    if check_task(task).exclusive:
        pos = np.array([((labels == c) & test).sum() for c in range(k)])
        neg = test.sum() - pos
        seen = np.array([((labels == c) & train).sum() for c in range(k)])
        return int(((seen > 0) & (pos >= MIN_POSITIVES) & (neg > 0)).sum())
    y = labels.reshape(len(split), k)
    seen = ((y[train] == 1).any(axis=0)) & ((y[train] == 0).any(axis=0))
    pos, neg = (y[test] == 1).sum(axis=0), (y[test] == 0).sum(axis=0)
    return int((seen & (pos >= MIN_POSITIVES) & (neg > 0)).sum())


def _reason_from_store(store, dataset: str) -> str | None:
    """Why ``dataset``'s values cannot be measured, from its stored table; None where they can (or the
    store does not hold it: the run records decide then)."""
    if store is None or not store.has_dataset(dataset):
        return None
    table = store.dataset(dataset)
    labels, split = np.asarray(table.labels), np.asarray(table.split)
    failed = np.isin(np.asarray(table.ids).astype(str), np.asarray(store.failures(dataset)["image_id"]).astype(str))
    if _counted(labels[~failed], split[~failed], table.task, len(table.classes)):
        return None
    return (f"no class has a training image and at least {MIN_POSITIVES} positive and one negative test image: "
            f"its AUROC is undefined and every axis rests on chance; {_FIX}")


def not_measurable(store, datasets: Sequence[str]) -> list[dict]:
    """[{dataset, axes, reason}] for each dataset of ``datasets`` whose values cannot be measured; [] where
    every one can, or no store is given."""
    out = []
    for dataset in datasets:
        reason = _reason_from_store(store, dataset)
        if reason is not None:
            out.append({"dataset": dataset, "axes": list(AXES), "reason": reason})
    return out


def with_measurable(per_dataset: pl.DataFrame, unmeasured: list[dict]) -> pl.DataFrame:
    """``per_dataset`` with ``measurable``: False on the rows of a dataset ``not_measurable`` lists."""
    out = {u["dataset"] for u in unmeasured}
    return per_dataset.with_columns(measurable=~pl.col("dataset").is_in(list(out)))


def without_tier(summary: pl.DataFrame, unmeasured: list[dict]) -> pl.DataFrame:
    """The bootstrap summary with no tier (null for every encoder) where some dataset cannot be measured: a value
    no probe could measure decides no set for the best, in the tables as in the verdict."""
    if not unmeasured:
        return summary
    return summary.with_columns(tier=pl.lit(None, dtype=pl.Boolean))
