"""Stored labels -> per-class targets: one definition for the probe and for scoring.

Multi-class labels are class indices; multi-label ones int8 {1, 0, -1} with -1 unknown
(CheXpert's uncertain labels under the ``ignore`` policy, or a missing finding).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np


class Task(StrEnum):
    """The kind of a dataset's labels; what differs between kinds is defined here.

    A string enum, so a stored or configured ``"multiclass"`` compares and serialises as
    before.
    """

    MULTICLASS = "multiclass"  # one class per image: labels are class indices
    MULTILABEL = "multilabel"  # any number of findings per image: int8 {1, 0, -1}

    @property
    def exclusive(self) -> bool:
        """Classes exclude each other: softmax over classes, one-hot targets, argmax."""
        return self is Task.MULTICLASS

    @property
    def label_dtype(self) -> type:
        """The dtype labels are stored with."""
        return np.int64 if self.exclusive else np.int8


TASKS = tuple(t.value for t in Task)


def check_task(task: str | Task) -> Task:
    """``task`` as a :class:`Task`; a ValueError naming the kinds for anything else."""
    try:
        return Task(task)
    except ValueError:
        raise ValueError(f"task must be one of {TASKS}, not {task!r}") from None


def targets(labels: np.ndarray, task: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(target int8 [image, class] in {0, 1}, known bool [image, class]) from stored labels."""
    labels = np.asarray(labels)
    if check_task(task).exclusive:
        if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= n_classes)):
            raise ValueError(
                f"multi-class labels must be class indices in [0, {n_classes}), got shape "
                f"{labels.shape} with range [{labels.min() if labels.size else None}, "
                f"{labels.max() if labels.size else None}]"
            )
        t = np.zeros((labels.size, n_classes), dtype=np.int8)
        t[np.arange(labels.size), labels] = 1
        return t, np.ones_like(t, dtype=bool)
    if labels.ndim != 2 or labels.shape[1] != n_classes:
        raise ValueError(f"multi-label labels must be [image, {n_classes}], got shape {labels.shape}")
    return (labels == 1).astype(np.int8), labels >= 0
