"""Path-safe names for the store: node names and lock files made from user-given ids."""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[a-z0-9._\-]")


def store_key(text: str) -> str:
    """An injective, path-safe store key for a user-given id such as ``hf:org/Name``.

    Lowercase letters, digits, '.', '_' and '-' pass through; every other character
    (upper case, '/', ':', '~', control characters, ...) becomes ``~XXXX`` (its code point
    in hex), and a leading '.' is escaped too, so '..' and hidden names cannot occur.
    '~' is escaped itself, so two ids never map to one key. Upper case is escaped rather
    than lowered for the same reason (``hf:A/b`` and ``hf:a/b`` are different repos).
    """
    out = []
    for i, ch in enumerate(text):
        if _SAFE.fullmatch(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.append(f"~{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"~~{ord(ch):06x}")
    key = "".join(out)
    if not key:
        raise ValueError("an encoder id must not be empty")
    if len(key) > 200:  # file systems cap names at 255 bytes; keep it injective with a digest
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        key = key[:180] + "~h" + digest
    return key
