"""Small file helpers shared by the stages.

A table is encoded in memory and its bytes written by Python's own file calls (``write_frame``): polars,
writing a file itself, reports a full disk as a ComputeError or an OSError without an errno, which no
writer can tell from a bug of ours; Python's write raises OSError(ENOSPC), which ``crs.foundations.errors.writing_to``
turns into a message naming the folder and the repair.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from crs.foundations.errors import writing_to


def umask() -> int:
    """The process's file-mode creation mask, read without changing it where the OS allows.

    Linux shows it in /proc/self/status; elsewhere it is read by setting and restoring it
    (``os.umask`` has no read-only form).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``.

    A crash leaves either the old file or the new one, never half of one; concurrent
    writers each get their own temporary name. The file gets the mode any new file of
    the user gets (0666 less the umask), not ``mkstemp``'s private 0600, so a shared
    results folder stays readable by the colleagues the user's umask lets in.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with writing_to(path.parent):  # a writer such as polars raises ENOSPC without the file's name
            try:
                os.fchmod(fd, 0o666 & ~umask())
            finally:
                os.close(fd)
            write(Path(tmp))
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def encode(frame, kind: str, metadata: Mapping[str, str] | None = None) -> bytes:
    """A polars DataFrame as the bytes of a ``kind`` ("parquet" or "csv") file, made in memory."""
    buf = io.BytesIO()
    if kind == "parquet":
        frame.write_parquet(buf, metadata=dict(metadata) if metadata else None)
    elif kind == "csv":
        frame.write_csv(buf)
    else:
        raise ValueError(f"no table file kind {kind!r} (parquet, csv)")
    return buf.getvalue()


def put(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, flushed to the disk before returning (a rename after it publishes it whole)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_frame(path: Path, frame, kind: str = "parquet", metadata: Mapping[str, str] | None = None) -> None:
    """A table as the file ``path``, whole or not at all (``atomic_write``)."""
    atomic_write(Path(path), lambda tmp: put(tmp, encode(frame, kind, metadata)))


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes as hex, read a MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
