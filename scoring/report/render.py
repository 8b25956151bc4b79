"""The report's figures rendered to PNG files, shared between this process and one forked helper.

Rendering (layout and rasterising) is most of a report's time and runs on one core. Where the
platform forks cheaply (Linux) and two cores are free, one child process forked after the
figures are built takes figures from the same queue (a pipe of figure numbers both read) and
writes each as a whole file; the parent reads those files back. The child inherits the figures,
so nothing is pickled, and it touches neither polars nor JAX. The result is the same files
either way: a PNG's bytes do not depend on the process that drew it.

Whatever happens to the child, the parent finishes the job: a figure the child took but did
not report written (it crashed, was killed, or went quiet for ``STALL_SECONDS``) is rendered by
the parent. The child dies with the parent (``PR_SET_PDEATHSIG``), so a killed report leaves
no process behind, and it holds the report's writer lock with the parent (an inherited flock).
"""

from __future__ import annotations

import os
import select
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from crs.foundations import forked
from crs.foundations.files import atomic_write, put
from crs.scoring.report.sections import png

STALL_SECONDS = 120.0  # no figure from the child for this long: it is stuck, and the parent takes over
_ITEM = struct.Struct("<H")  # a figure's number on the pipes


def parallel_ok(n_figures: int) -> bool:
    """Whether forking a helper pays: Linux, at least two usable cores, and at least four figures."""
    return n_figures >= 4 and forked.available()


def render_figures(figures: Sequence[tuple[str, object]], path_of: Callable[[str], Path], *,
                   parallel: bool | None = None) -> dict[str, bytes]:
    """Render each (stem, figure) to PNG, write it whole at ``path_of(stem)``, and return the bytes by stem.

    ``parallel`` None decides by :func:`parallel_ok`; False renders in this process only.
    """
    if parallel is None:
        parallel = parallel_ok(len(figures))
    done: dict[int, bytes] = {}
    if parallel and len(figures) > 1:
        _share(figures, path_of, done)
    for i, (stem, fig) in enumerate(figures):
        if i not in done:
            done[i] = _render_one(fig, path_of(stem))
    return {stem: done[i] for i, (stem, _) in enumerate(figures)}


def _render_one(fig, path: Path) -> bytes:
    data = png(fig)
    atomic_write(path, lambda p: put(p, data))
    return data


def _share(figures, path_of, done: dict[int, bytes]) -> None:
    """Render with a forked helper; fill ``done`` with what either process finished (nothing where no
    helper could be had: the caller then renders every figure)."""
    queue_r, queue_w = os.pipe()
    report_r, report_w = os.pipe()
    try:
        try:
            os.write(queue_w, b"".join(_ITEM.pack(i) for i in range(len(figures))))
        finally:
            os.close(queue_w)  # both processes read to the end of the queue
        helper = forked.start(lambda: _draw_share(figures, path_of, queue_r, (report_r, report_w)))
    except BaseException:
        os.close(queue_r)
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    theirs: set[int] = set()
    try:
        while helper is not None and (i := _take(queue_r)) is not None:
            stem, fig = figures[i]
            done[i] = _render_one(fig, path_of(stem))
        theirs = _collect(report_r) if helper is not None else set()
    finally:
        if helper is not None and helper.end():  # killed mid-figure: its temporary is the only one (writer lock)
            for f in path_of(figures[0][0]).parent.glob(".*.tmp"):
                f.unlink(missing_ok=True)
        os.close(queue_r)
        os.close(report_r)
    for i in theirs:
        path = path_of(figures[i][0])
        try:
            done[i] = path.read_bytes()
        except OSError:
            pass  # rendered again below


def _draw_share(figures, path_of, queue_r: int, report: tuple[int, int]) -> None:
    """The helper's work: render what it takes from the queue and report each figure once it is written."""
    report_r, report_w = report
    os.close(report_r)
    while (i := _take(queue_r)) is not None:
        stem, fig = figures[i]
        _render_one(fig, path_of(stem))
        os.write(report_w, _ITEM.pack(i))


def _take(fd: int) -> int | None:
    """The next figure number from the queue, None when it is empty (a 2-byte read from a pipe is whole)."""
    raw = os.read(fd, _ITEM.size)
    return _ITEM.unpack(raw)[0] if len(raw) == _ITEM.size else None


def _collect(fd: int) -> set[int]:
    """The figures the helper reported written, until it closes its end or stalls for STALL_SECONDS."""
    got, buf = set(), b""
    while True:
        ready, _, _ = select.select([fd], [], [], STALL_SECONDS)
        if not ready:
            return got  # stalled: the caller kills it and renders the rest
        chunk = os.read(fd, 4096)
        if not chunk:
            return got
        buf += chunk
        while len(buf) >= _ITEM.size:
            got.add(_ITEM.unpack(buf[:_ITEM.size])[0])
            buf = buf[_ITEM.size:]
