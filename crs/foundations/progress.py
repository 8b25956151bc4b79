"""The progress interface the stages report to.

The workers call exactly these methods of ``rich.progress.Progress``; the command line
passes a rich Progress on a terminal and a ``LineProgress`` (plain lines at a fixed
interval) where its output is a file or a pipe; a library caller passes nothing and gets
``NoProgress``. A task may name what it counts: ``add_task(..., unit="chunks")``; rates
are averages since the task began, with that unit. ``update(task, visible=False)`` ends a task
that counts nothing (a vectorised step) when its step is over: rich hides it, ``LineProgress``
writes its last line then, not at the end of the command.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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


# ------------------------------------------------------------------ plain lines for batch jobs
DEFAULT_UNIT = "steps"  # what a task counts when its stage names no ``unit`` field (add_task(..., unit="chunks"))


def clock(seconds: float) -> str:
    """0:03:07 for 187 s; days are hours (a benchmark's time left can pass 24 h)."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def average_rate(completed: float, elapsed: float) -> float | None:
    """Work done per second since the task began (not a recent window); None before the first step."""
    return completed / elapsed if completed > 0 and elapsed > 0 else None


def rate_text(rate: float | None, unit: str) -> str:
    return f"-- {unit}/s" if rate is None else f"{rate:.3g} {unit}/s"


def time_left(completed: float, total: float | None, elapsed: float) -> float | None:
    """Seconds left at the average rate since the start: (total - done) / (done / elapsed)."""
    rate = average_rate(completed, elapsed)
    return None if rate is None or not total else max(0.0, total - completed) / rate


def status_line(description: str, completed: float, total: float | None, elapsed: float, unit: str,
                finished: bool = False) -> str:
    """One task as one plain line: done/total with its unit, the average rate since the start, the time
    elapsed and (before the end) the time left at that rate."""
    if total is None:  # nothing to count (a vectorised step): the time it has taken is all there is
        return f"{description}: {'done' if finished else 'running'}, {clock(elapsed)} elapsed"
    n = f"{completed:g}/{total:g} {unit} ({100 * completed / total:.0f}%)" if total else f"{completed:g} {unit}"
    parts = [n, f"{rate_text(average_rate(completed, elapsed), unit)} average", f"{clock(elapsed)} elapsed"]
    left = time_left(completed, total, elapsed)
    if not finished:
        parts.append("time left unknown" if left is None else f"about {clock(left)} left")
    return f"{description}: " + ", ".join(parts)


@dataclass
class _Task:
    description: str
    total: float | None
    start: float
    unit: str
    completed: float = 0.0
    ended: bool = False  # its last line was written


class LineProgress:
    """A Progress for output that is not a terminal (a batch job's log): every ``interval`` seconds one plain
    line per running task (``status_line``), one when a task completes, and at the end one for each task
    still open. A background thread keeps the lines coming while a long step runs without advancing.
    ``unit``: what a task counts when its ``add_task`` names no unit."""

    def __init__(self, interval: float, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 unit: str = DEFAULT_UNIT):
        if not interval > 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.interval, self.write, self.clock, self.unit = interval, write, clock, unit
        self.tasks: list[_Task] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        with self._lock:
            self.tasks.append(_Task(description, total, self.clock(), str(fields.get("unit") or self.unit)))
            return len(self.tasks) - 1

    def update(self, task: int, **fields: Any) -> None:
        if fields.get("visible") is False:  # its step is over: its last line now, not at the command's end
            self._end(task)
            return
        with self._lock:
            t = self.tasks[task]
            t.description = fields.get("description", t.description)
            t.total = fields.get("total", t.total)
            t.unit = str(fields.get("unit") or t.unit)
            t.completed = fields.get("completed", t.completed) + fields.get("advance", 0)
        self._maybe_finished(task)

    def advance(self, task: int, advance: float = 1) -> None:
        with self._lock:
            self.tasks[task].completed += advance
        self._maybe_finished(task)

    def _line(self, t: _Task, finished: bool) -> str:
        return status_line(t.description, t.completed, t.total, self.clock() - t.start, t.unit, finished)

    def _maybe_finished(self, task: int) -> None:
        with self._lock:
            t = self.tasks[task]
            if t.ended or t.total is None or t.completed < t.total:
                return
            t.ended = True
            line = self._line(t, finished=True)
        self.write(line)

    def _end(self, task: int) -> None:
        with self._lock:
            t = self.tasks[task]
            if t.ended:
                return
            t.ended = True
            line = self._line(t, finished=t.total is None or t.completed >= t.total)
        self.write(line)

    def log(self) -> None:
        """One line for each task still running."""
        with self._lock:
            lines = [self._line(t, finished=False) for t in self.tasks if not t.ended]
        for line in lines:
            self.write(line)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.log()

    def __enter__(self) -> LineProgress:
        self._thread = threading.Thread(target=self._run, name="crs-progress-log", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:  # a step without a count ends here; a counted one still open was interrupted
            lines = [self._line(t, finished=exc_type is None if t.total is None else t.completed >= t.total)
                     for t in self.tasks if not t.ended]
            for t in self.tasks:
                t.ended = True
        for line in lines:
            self.write(line)
