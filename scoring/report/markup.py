"""The page's small pieces: escaped text, numbers as the page prints them, table cells."""

from __future__ import annotations

import html as _html

import numpy as np


def interval(lo, hi, spec: str = ".1f") -> str:
    return f"[{num(lo, spec)}, {num(hi, spec)}]"


def esc(value) -> str:
    return _html.escape(str(value), quote=True)


def num(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    if spec.endswith("d"):  # a count read back as a float (a column with nulls) still prints as one
        value = int(round(float(value)))
    return format(value, spec)


def td(cls: str, text, sort=None) -> str:
    key = "" if sort is None or (isinstance(sort, float) and not np.isfinite(sort)) else sort
    return f"<td class='{cls}' data-sort='{esc(key)}'>{esc(text)}</td>"


def th(head: str, title: str = "") -> str:
    return f"<th scope='col'{f' title={chr(39)}{esc(title)}{chr(39)}' if title else ''}>{esc(head)}</th>"


def nobreak(text: str) -> str:
    """``text`` that a narrow cell breaks before or after, never inside (an interval keeps its line)."""
    return text.replace(" ", "\u00a0")
