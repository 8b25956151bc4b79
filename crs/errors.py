"""The error classes every stage shares.

``CrsError`` is the root. ``UserError`` is a problem with what the user gave us (bad
input, a damaged or incompatible store, a dataset folder that is not usable, weights that
cannot be loaded): the command line prints its message and exits 2. Any other exception
is a bug of ours and exits 1. Stages raise a subclass of ``UserError`` for the first kind;
nothing is ever classified by the name of its type.
"""

from __future__ import annotations


class CrsError(Exception):
    """Root of every error CRS-Bench raises on purpose."""


class UserError(CrsError):
    """The user's input, files or environment are wrong; the message says what and how to fix it (exit 2)."""


class BadInput(UserError, ValueError):
    """A value given on the command line, in a config file or to a stage function is not usable."""
