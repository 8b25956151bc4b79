"""Where the commands print: ``out`` (stdout) and ``err`` (stderr) consoles, ``show`` for a table, and
the progress display."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from crs.foundations import config as cfgmod
from crs.foundations import progress as prog


class _Console(Console):
    """rich's Console, except that a reader going away (`crs encoders | head -2`) ends the command quietly
    with exit 0, as for ``print`` (``friendly_errors``): rich's own choice is exit 1 without a word."""

    def on_broken_pipe(self) -> None:
        quiet_stdout()
        raise SystemExit(0)


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not meet the closed pipe again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# a pipe or a file gets at least 120 columns for text (more where COLUMNS says so); a terminal keeps its own width
_COLUMNS = os.environ.get("COLUMNS", "")
out = _Console(width=None if sys.stdout.isatty() else max(120, int(_COLUMNS) if _COLUMNS.isdigit() else 0))
err = _Console(stderr=True)


def show(table) -> None:
    """Print a table whole: a pipe or a file gets the width the table needs, so that no number is cut
    (a terminal keeps its own width, where rich folds what does not fit)."""
    if out.is_terminal:
        out.print(table)
        return
    need = Measurement.get(out, out.options.update(width=10_000), table).maximum
    text_width = out.width
    out.width = max(text_width, need)  # Console.print(width=) cannot go beyond the console's own width
    try:
        out.print(table)
    finally:
        out.width = text_width

def progress_bar(quiet: bool, interval: float = cfgmod.Config().log_interval, unit: str | None = None):
    """The progress display (it satisfies ``crs.foundations.progress.Progress``), on stderr; nothing with --quiet.

    A terminal gets a rich bar; a file or a pipe (a batch job's log) gets a plain line per running
    task every ``interval`` seconds (``crs.foundations.progress.LineProgress``). Both show the average rate since
    the start with the task's unit (``add_task(..., unit=)``, else ``unit``: what the one stage a
    command runs counts), and the time left at that rate."""
    unit = unit or prog.DEFAULT_UNIT
    if not quiet and not err.is_terminal:
        return prog.LineProgress(interval, lambda line: err.print(line, markup=False, highlight=False,
                                                                   soft_wrap=True), unit=unit)

    class Count(MofNCompleteColumn):
        def render(self, task):  # a step without a count (scoring, the report) shows its time alone
            return Text("") if task.total is None else super().render(task)

    class Rate(ProgressColumn):
        def render(self, task):
            if task.total is None:
                return Text("")
            return Text(prog.rate_text(prog.average_rate(task.completed, task.elapsed or 0),
                                       task.fields.get("unit") or unit))

    class Left(ProgressColumn):
        def render(self, task):
            if task.total is None:
                return Text("")
            left = prog.time_left(task.completed, task.total, task.elapsed or 0)
            return Text("-:--:--" if left is None or task.finished else prog.clock(left), style="progress.remaining")

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), Count(), Rate(),
        TimeElapsedColumn(), Left(), console=err, disable=quiet,
    )
