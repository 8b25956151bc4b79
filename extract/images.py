"""Image decoding errors shared by the file-based dataset adapters and extraction.

(Placeholder for the class the dataset adapters' branch defines with its PIL decoding
helper; the two files are reconciled at merge. The contract: ``ImageError(path, reason)``
with ``.path`` and ``.reason``.)
"""

from __future__ import annotations


class ImageError(Exception):
    """A file that cannot be read as an image: ``path`` and a short ``reason``."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = str(reason)
