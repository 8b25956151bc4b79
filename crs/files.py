"""Small file helpers shared by the stages."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from crs.errors import writing_to


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
