"""What every figure shares: the palette and markers, the reference's ring, the panel grid, ``Absent``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from crs.scoring.axes import REGISTRY

# Okabe & Ito (2008), "Color Universal Design"; yellow last (weak on white)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
AXIS_SHORT = {a.name: a.symbol for a in REGISTRY.values()}
SCALAR_CMAP = "cividis"  # perceptually uniform and colour-blind safe
DPI = 100


class Absent(Exception):
    """A figure's input is not in the results; the message says what and how to get it."""


REFERENCE_EDGE = {"edgecolor": "black", "linewidth": 2.2}  # the ring every figure draws round the reference
REFERENCE_TAG = " (reference)"


def styles(encoders: Sequence[str], reference: str | None = None) -> dict[str, dict]:
    """Colour, marker and label per encoder, in the order given (the leaderboard's).

    The reference encoder is marked the same way in every figure: its label ends in
    " (reference)" and its markers carry a thick black ring (``REFERENCE_EDGE``).
    """
    return {
        e: {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[(i // len(PALETTE) + i) % len(MARKERS)],
            "label": e + (REFERENCE_TAG if e == reference else ""), "reference": e == reference}
        for i, e in enumerate(encoders)
    }


def _marker_kw(st: dict, ms: float = 7) -> dict:
    """Line2D marker keywords of one encoder's style, the reference ringed."""
    kw = {"color": st["color"], "marker": st["marker"], "ms": ms}
    if st["reference"]:
        kw.update(mec=REFERENCE_EDGE["edgecolor"], mew=REFERENCE_EDGE["linewidth"])
    return kw


def _grid(n: int, ncols: int, width: float = 3.4, height: float = 3.0):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    # at least 6.5 in wide, so a one-panel figure still has room for its title and legend
    fig = Figure(figsize=(max(width * ncols + 0.6, 6.5), height * nrows + 0.7), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.remove()
    return fig, list(axes[:n])


def _need(table: pl.DataFrame, columns: Sequence[str], what: str, how: str) -> None:
    if table is None or not table.height or not set(columns) <= set(table.columns):
        raise Absent(f"no {what} in the results; {how}")


def _yerr(v, lo, hi) -> np.ndarray:
    """Error-bar lengths [2, n] from interval ends; a missing end draws no bar."""
    v, lo, hi = (np.asarray(x, dtype=float) for x in (v, lo, hi))
    return np.nan_to_num(np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]))


def _annotate(ax, text: str, x: float, y: float, xs: np.ndarray, log: bool = False, fontsize: float = 8.5) -> None:
    """A point's label beside it, on the side with room: left of the points in the right third of ``xs``."""
    f = np.log10 if log else (lambda v: v)
    lo, hi = float(np.nanmin(f(xs))), float(np.nanmax(f(xs)))
    right = hi > lo and (f(x) - lo) / (hi - lo) > 0.66
    ax.annotate(text, (x, y), textcoords="offset points", xytext=(-9 if right else 9, 6),
                ha="right" if right else "left", fontsize=fontsize)


def _col(row: dict, name: str) -> float:
    x = row.get(name)
    return float("nan") if x is None else float(x)


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)
