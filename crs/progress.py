"""The progress interface the stages report to.

The workers call exactly these methods of ``rich.progress.Progress``; the command line
passes a rich Progress, a library caller passes nothing and gets ``NoProgress``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Progress(Protocol):
    def add_task(self, description: str, total: float | None = None, **fields: Any) -> Any: ...

    def update(self, task: Any, **fields: Any) -> None: ...

    def advance(self, task: Any, advance: float = 1) -> None: ...


class NoProgress:
    """A Progress that shows nothing."""

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        return 0

    def update(self, task: Any, **fields: Any) -> None:
        pass

    def advance(self, task: Any, advance: float = 1) -> None:
        pass


NO_PROGRESS = NoProgress()
