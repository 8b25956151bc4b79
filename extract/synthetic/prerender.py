"""The synthetic datasets' images rendered ahead by a forked helper, while extraction imports torch and
builds its models (seconds in which the parent uses one core).

``start(datasets)`` forks a helper (``crs.foundations.forked``) that renders every row of each synthetic
dataset, in order, into memory shared with the parent (one anonymous shared mapping per dataset) and says
on a pipe when a dataset is whole (a byte each, in order). ``SyntheticDataset.images`` then copies rows
from there (``take``), and renders them itself where that dataset is not whole yet, the helper failed, or
the caller is another process (a data loader's worker, forked later): the same pixels either way, since
every row is drawn from its own keyed stream. ``finish()`` reaps the helper and frees the memory. Nothing
is started off Linux, with one core, or where the datasets' pixels would take more than ``MAX_BYTES``.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from crs.foundations import forked

MAX_BYTES = 512 << 20  # the most shared memory the rendered pixels may take


@dataclass
class _Ahead:
    owner: int  # the process that started the helper: the only one that takes from it
    helper: forked.Helper
    fd: int  # the pipe on which the helper says which datasets are whole
    arrays: dict[tuple, np.ndarray]  # by dataset key: [rows, H, W, 3] uint8 over shared memory
    order: list[tuple]  # the keys in the helper's order (its messages are their positions)
    whole: set[tuple] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the news is read by one thread at a time


_ahead: _Ahead | None = None


def key(ds) -> tuple:
    return ds.name, float(ds.size), int(ds.seed), int(ds.image_size)


def start(datasets) -> bool:
    """Render the synthetic ones among ``datasets`` ahead in a helper; whether one was started."""
    global _ahead
    finish()
    todo = {key(ds): ds for ds in datasets if hasattr(ds, "render_rows")}
    shapes = {k: (len(ds.table().ids), ds.image_size, ds.image_size, 3) for k, ds in todo.items()}
    sizes = {k: int(np.prod(s)) for k, s in shapes.items()}
    if not todo or sum(sizes.values()) > MAX_BYTES or not forked.available():
        return False
    arrays = {k: np.frombuffer(mmap.mmap(-1, max(1, sizes[k])), dtype=np.uint8)[:sizes[k]].reshape(s)
              for k, s in shapes.items()}
    order = list(todo)
    read, write = os.pipe()
    try:
        helper = forked.start(lambda: _render_all([(todo[k], arrays[k]) for k in order], read, write))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    if helper is None:
        os.close(read)
        return False
    os.set_blocking(read, False)
    _ahead = _Ahead(os.getpid(), helper, read, arrays, order)
    return True


def _render_all(jobs, read: int, write: int) -> None:
    """The helper's work: each dataset's every row, then one byte on the pipe."""
    os.close(read)
    for ds, out in jobs:
        out[:] = ds.render_rows(np.arange(len(out)))
        os.write(write, b".")


def take(ds, rows: np.ndarray) -> np.ndarray | None:
    """Those rows of ``ds`` as the helper rendered them (a copy), or None where this process must render
    them itself."""
    ahead = _ahead
    if ahead is None or ahead.owner != os.getpid():
        return None
    k = key(ds)
    if k not in ahead.arrays:
        return None
    if k not in ahead.whole:
        with ahead.lock:
            _read_news(ahead)
        if k not in ahead.whole:
            return None
    return ahead.arrays[k][rows]


def _read_news(ahead: _Ahead) -> None:
    try:
        news = os.read(ahead.fd, 4096)
    except BlockingIOError:
        return
    done = len(ahead.whole)
    for _ in news:
        if done < len(ahead.order):
            ahead.whole.add(ahead.order[done])
            done += 1


def finish() -> None:
    """Reap the helper (killed if still rendering) and free its memory; a no-op when none was started."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is None or ahead.owner != os.getpid():
        return
    ahead.helper.end()
    os.close(ahead.fd)
