"""What every figure shares: the palette and markers, the reference's ring, the panel grid, ``Absent``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

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


def marker_kw(st: dict, ms: float = 7) -> dict:
    """Line2D marker keywords of one encoder's style, the reference ringed."""
    kw = {"color": st["color"], "marker": st["marker"], "ms": ms}
    if st["reference"]:
        kw.update(mec=REFERENCE_EDGE["edgecolor"], mew=REFERENCE_EDGE["linewidth"])
    return kw


def panels(n: int, ncols: int, width: float = 3.4, height: float = 3.0):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    # at least 6.5 in wide, so a one-panel figure still has room for its title and legend
    fig = Figure(figsize=(max(width * ncols + 0.6, 6.5), height * nrows + 0.7), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.remove()
    return fig, list(axes[:n])


def need_columns(table: pl.DataFrame, columns: Sequence[str], what: str, how: str) -> None:
    if table is None or not table.height or not set(columns) <= set(table.columns):
        raise Absent(f"no {what} in the results; {how}")


def error_bars(v, lo, hi) -> np.ndarray:
    """Error-bar lengths [2, n] from interval ends; a missing end draws no bar."""
    v, lo, hi = (np.asarray(x, dtype=float) for x in (v, lo, hi))
    return np.nan_to_num(np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]))


def annotate(ax, text: str, x: float, y: float, xs: np.ndarray, log: bool = False,
             fontsize: float = 8.5) -> Annotation:
    """A point's label beside it, on the side with room: left of the points in the right third of ``xs``."""
    f = np.log10 if log else (lambda v: v)
    lo, hi = float(np.nanmin(f(xs))), float(np.nanmax(f(xs)))
    right = hi > lo and (f(x) - lo) / (hi - lo) > 0.66
    return ax.annotate(text, (x, y), textcoords="offset points", xytext=(-9 if right else 9, 6),
                       ha="right" if right else "left", fontsize=fontsize)


def cell(row: dict, name: str) -> float:
    x = row.get(name)
    return float("nan") if x is None else float(x)


def fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


# ------------------------------------------------------------- labels apart
def _renderer(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # the Agg backend: drawing only

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _unshown_ticks(fig) -> set[int]:
    """ids of the tick labels a draw leaves out: those of ticks outside their axis's view (the Text objects stay)."""
    out = set()
    for ax in fig.axes:
        for axis, k in ((ax.xaxis, 0), (ax.yaxis, 1)):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(abs(lo), abs(hi), 1.0)
            for t in [*axis.get_ticklabels(which="both"), *[tk.label2 for tk in axis.get_major_ticks()]]:
                if not lo - eps <= t.get_position()[k] <= hi + eps:
                    out.add(id(t))
    return out


def text_boxes(fig) -> list[tuple[Text, Bbox]]:
    """Every text a draw of the figure shows, with its box in pixels, after a draw (layout settled)."""
    renderer = _renderer(fig)
    hidden = _unshown_ticks(fig)
    return [(t, t.get_window_extent(renderer)) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and t.figure is not None and id(t) not in hidden]


def overlapping_texts(fig, pad: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of visible texts of ``fig`` whose drawn boxes overlap by more than ``pad`` pixels each way."""
    boxes = text_boxes(fig)
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            if min(ba.x1, bb.x1) - max(ba.x0, bb.x0) > pad and min(ba.y1, bb.y1) - max(ba.y0, bb.y0) > pad:
                out.append((a.get_text(), b.get_text()))
    return out


def _hits(box: Bbox, others: list[Bbox], gap: float) -> bool:
    return any(min(box.x1, o.x1) - max(box.x0, o.x0) > -gap and min(box.y1, o.y1) - max(box.y0, o.y0) > -gap
               for o in others)


def keep_apart(fig, labels: Sequence[Annotation], gap: float = 2.0, rounds: int = 3) -> None:
    """Move point labels (annotations with an offset in points) until no two texts of ``fig`` overlap.

    Each label in turn, where its box meets any other text (the labels already placed, titles, ticks,
    legends), tries offsets stepped by its own height up and down, on its side and then on the other side of
    its point, and keeps the first that meets nothing and stays inside its axes. Layout moves the points as
    labels move, so this draws and checks again, ``rounds`` times at most."""
    labels = list(labels)
    per_px = 72.0 / fig.dpi  # offsets are in points, boxes in pixels
    for _ in range(rounds):
        boxes = text_boxes(fig)
        fixed = [b for t, b in boxes if t not in labels]
        moved = False
        for lab in labels:
            box = lab.get_window_extent(fig.canvas.get_renderer())
            if not _hits(box, fixed, gap):
                fixed.append(box)
                continue
            inside = lab.axes.get_window_extent() if lab.axes is not None else fig.bbox
            best = _free_offset(lab, box, fixed, inside, gap, per_px)
            if best is not None:
                (dx, dy), ha, box = best
                lab.set_position((dx, dy))
                lab.set_ha(ha)
                moved = True
            fixed.append(box)
        if not moved:
            return


def _free_offset(lab: Annotation, box: Bbox, fixed: list[Bbox], inside: Bbox, gap: float, per_px: float):
    """((dx, dy) in points, alignment, box) of the nearest free place for ``lab``, or None."""
    x0, y0 = lab.get_position()  # the current offset, points
    h = box.height + gap
    flip = {"left": "right", "right": "left"}
    for side in (1, -1):
        # the other side of the point mirrors the offset and the alignment: the box moves by twice the offset and
        # its own width
        ha = lab.get_ha() if side == 1 else flip.get(lab.get_ha(), "center")
        shift_x = 0.0 if side == 1 else -2 * x0 / per_px + {"left": -box.width, "right": box.width}.get(
            lab.get_ha(), 0.0)
        for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5):
            if side == 1 and k == 0:
                continue
            cand = box.translated(shift_x, k * h)
            if (cand.x0 >= inside.x0 and cand.x1 <= inside.x1 and cand.y0 >= inside.y0 and cand.y1 <= inside.y1
                    and not _hits(cand, fixed, gap)):
                return (side * x0, y0 + k * h * per_px), ha, cand
    return None
