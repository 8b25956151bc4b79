"""A stored dataset's table (``DatasetTable``): a dataset kind's ``crs.foundations.table.Table`` with its name
and attributes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crs.foundations.table import Table

__all__ = ["DatasetTable", "Table"]


@dataclass(frozen=True, kw_only=True)
class DatasetTable(Table):
    """A stored dataset's table: its name and attributes, rows in store order (test, val, train)."""

    name: str
    attrs: dict[str, Any]

    @property
    def task(self) -> str:
        return self.attrs["task"]

    @property
    def classes(self) -> list[str]:
        return list(self.attrs["classes"])
