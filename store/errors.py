"""The store's error, and the wrapper that names the store of a write that failed for lack of room or rights."""

from __future__ import annotations

import functools

from crs.foundations.errors import UserError, writing_to


class StoreError(UserError):
    """A store problem the user can act on (bad path, other schema, missing or incomplete data)."""


class NoStore(StoreError):
    """No store at the path given (nothing there, or an empty folder): a score can do without one."""


def writes(method):
    """``method`` of an object that writes into the store at its ``path``: a full disk, a quota, a read-only file
    system or a refused permission met without a file name is named by the store's path
    (``crs.foundations.errors.writing_to``)."""
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        with writing_to(self.path):
            return method(self, *args, **kwargs)
    return wrapped
