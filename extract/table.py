"""What every dataset kind shares: its metadata table, and the rule its registry keeps.

``synthetic`` and ``real`` both build a ``Table``; ``datasets`` (the registry a user sees)
imports both, so the shared pieces live here, below all three.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np


@dataclass(frozen=True)
class Table:
    """A dataset's metadata, one entry a row, rows in the order the dataset defines."""

    ids: np.ndarray  # [N] str, unique, e.g. 'demo_derm-000123'
    labels: np.ndarray  # [N] int64 class index, or [N, K] int8 in {1, 0, -1} (-1: uncertain or unknown)
    split: np.ndarray  # [N] int8: 0 train, 1 val, 2 test (crs.names.SPLIT_CODE)
    group: np.ndarray  # [N] str: lesion or patient id; a group never straddles splits


R = TypeVar("R")


def check_unique(names: Iterable[str], what: str) -> None:
    """Refuse (ValueError) a name given twice: registry names are keys in the store and the CLI."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} {name!r} is registered twice; each {what} needs its own name")
        seen.add(name)


def registry(records: Iterable[R], what: str) -> dict[str, R]:
    """``{record.name: record}`` in the given order; a name given twice is refused (ValueError)."""
    records = list(records)
    check_unique((r.name for r in records), what)
    return {r.name: r for r in records}
