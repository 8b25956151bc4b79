"""What every dataset kind shares: its metadata table, and the rule its registry keeps.

``synthetic`` and ``real`` both build a ``Table``; ``datasets`` (the registry a user sees)
imports both, so the shared pieces live here, below all three.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from crs.foundations.table import (
    Table,  # one definition, shared with the store (its DatasetTable adds name and attributes)
)

__all__ = ["Table", "check_unique", "registry"]


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
