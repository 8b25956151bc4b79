"""The error classes every stage shares.

``CrsError`` is the root. ``UserError`` is a problem with what the user gave us (bad
input, a damaged or incompatible store, a dataset folder that is not usable, weights that
cannot be loaded): the command line prints its message and exits 2. Any other exception
is a bug of ours and exits 1. Stages raise a subclass of ``UserError`` for the first kind;
nothing is ever classified by the name of its type. ``user_os_error`` tells an OSError that
is the user's (permission denied, a read-only file system, a file where a folder belongs, a
full disk: exit 2 naming the path and the repair) from one that is ours. An OSError that carries no
file name (zarr's and polars' writes raise ENOSPC so) is named by its writer: ``writing_to``.
"""

from __future__ import annotations

import contextlib
import errno
import os


class CrsError(Exception):
    """Root of every error CRS-Bench raises on purpose."""


class UserError(CrsError):
    """The user's input, files or environment are wrong; the message says what and how to fix it (exit 2)."""


class BadInput(UserError, ValueError):
    """A value given on the command line, in a config file or to a stage function is not usable."""


# errno -> (what is wrong with the path, how to repair it); only faults of the user's files or
# environment, each naming a path the user gave or that lies under one.
_OS_FAULTS = {
    errno.EACCES: ("permission denied", "give your user access to it (ls -ld shows the owner and mode; chmod or "
                   "chown fixes it) or choose a location you can write to"),
    errno.EPERM: ("operation not permitted", "give your user access to it (ls -ld shows the owner and mode) or "
                  "choose a location you can write to"),
    errno.EROFS: ("is on a read-only file system", "choose a folder on a writable file system"),
    errno.EISDIR: ("is a folder where a file is expected", "pass a file's path, or move the folder away"),
    errno.ENOTDIR: ("has a file where a folder is expected (this path or one of its parents)",
                    "pass a folder's path, or move the file away"),
    errno.EEXIST: ("already exists", "remove or rename it, or choose another path"),
    errno.ENOSPC: ("no space left on the device", "free space there (or choose a folder on another device), then "
                   "run the command again"),
    errno.EDQUOT: ("disk quota exceeded", "free space in your quota (or choose a folder elsewhere), then run the "
                   "command again"),
    errno.EFBIG: ("file too large (for this process's file-size limit, `ulimit -f`, or the file system)",
                  "raise the limit (or choose a folder on another file system), then run the command again"),
    errno.ENAMETOOLONG: ("name too long", "choose a shorter path"),
}


def user_os_error(exc: OSError) -> UserError | None:
    """An OSError that is the user's files' or environment's fault, as a UserError naming the path and the
    repair; None for any other (a bug of ours, exit 1). Told apart by errno, never by type names."""
    if exc.errno not in _OS_FAULTS or exc.filename is None:
        return None
    what, fix = _OS_FAULTS[exc.errno]
    path = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        path += f" -> {os.fsdecode(exc.filename2)}"
    return UserError(f"{path}: {what}; {fix}")


# what a write can meet that is the machine's or the user's doing, whichever call raised it
WRITE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


@contextlib.contextmanager
def writing_to(folder: str | os.PathLike):
    """Inside the block, an OSError of ``WRITE_FAULTS`` without a file name becomes a UserError naming
    ``folder`` (the writer knows where it writes; the library that failed did not say). One that names
    its file passes unchanged: the command line names that file."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in WRITE_FAULTS or exc.filename is not None:
            raise
        named = user_os_error(OSError(exc.errno, exc.strerror or os.strerror(exc.errno), os.fspath(folder)))
        raise named from exc
