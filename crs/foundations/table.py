"""A dataset's per-image table, as a dataset kind builds it (``crs.extract``) and the store keeps it
(``crs.store.table.DatasetTable`` adds its name and attributes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crs.foundations.names import SPLIT_CODE


@dataclass(frozen=True)
class Table:
    """A dataset's metadata, one entry a row, rows in the order the dataset defines."""

    ids: np.ndarray  # [image] str, unique, e.g. 'demo_derm-000123'
    labels: np.ndarray  # [image] int64 class index, or [image, label] int8 in {1, 0, -1} (-1: uncertain or unknown)
    split: np.ndarray  # [image] int8: 0 train, 1 val, 2 test (crs.foundations.names.SPLIT_CODE)
    group: np.ndarray  # [image] str: lesion or patient id; a group never straddles splits

    def rows(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == SPLIT_CODE[split])

    @property
    def n_test(self) -> int:
        return int((self.split == SPLIT_CODE["test"]).sum())
