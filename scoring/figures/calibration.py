"""The calibration figures: reliability diagrams before and after temperature scaling."""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl
from matplotlib.figure import Figure

from crs.scoring.figures.style import DPI, Absent, need_columns, styles


def reliability_bins(reliability: pl.DataFrame, condition: str = "clean") -> pl.DataFrame:
    """Bins pooled over seeds and labels: count-weighted mean confidence and accuracy.

    One row per (encoder, dataset, scaled, bin) of ``condition``; a multi-class task has
    one top-label row per seed and bin, a multi-label task one per label too.
    """
    need_columns(reliability, ["encoder", "dataset", "condition", "scaled", "bin", "count", "confidence", "accuracy"],
                 "reliability bins",
                 "they need the probe's stored probabilities: run `crs score --store STORE` (or pass --store to "
                 "`crs report`)")
    rows = reliability.filter(pl.col("condition") == condition)
    return (
        rows.group_by("encoder", "dataset", "scaled", "bin")
        .agg(
            count=pl.col("count").sum(),
            confidence=(pl.col("confidence") * pl.col("count")).sum() / pl.col("count").sum(),
            accuracy=(pl.col("accuracy") * pl.col("count")).sum() / pl.col("count").sum(),
        )
        .sort("encoder", "dataset", "scaled", "bin")
    )


def ece_before_after(probe_metrics: pl.DataFrame, dataset: str) -> dict[str, tuple[float, float]]:
    """encoder -> (ECE, ECE after temperature scaling): seed means, clean test split, all labels."""
    if probe_metrics is None or not {"ece", "ece_ts", "condition", "fraction"} <= set(probe_metrics.columns):
        return {}
    rows = probe_metrics.filter((pl.col("dataset") == dataset) & (pl.col("condition") == "clean")
                                & ((pl.col("fraction") - 1.0).abs() < 1e-9))
    g = rows.group_by("encoder").agg(pl.col("ece").mean(), pl.col("ece_ts").mean()).sort("encoder")
    return {r["encoder"]: (r["ece"], r["ece_ts"]) for r in g.iter_rows(named=True)}


def reliability_diagrams(reliability: pl.DataFrame, dataset: str, order: Sequence[str],
                         probe_metrics: pl.DataFrame | None = None, reference: str | None = None) -> Figure:
    """Reliability diagrams of one dataset, a panel per encoder (before and after temperature scaling),
    each over a histogram of the images per bin, with the ECE before and after in the panel."""
    bins = reliability_bins(reliability).filter(pl.col("dataset") == dataset)
    if not bins.height:
        raise Absent(f"no clean reliability bins for dataset {dataset!r}")
    names = [e for e in order if e in set(bins["encoder"].to_list())]
    style = styles(order, reference)
    ece = ece_before_after(probe_metrics, dataset)
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(3.3 * ncols + 0.6, 4.1 * nrows + 0.7), dpi=DPI, layout="constrained")
    gs = fig.add_gridspec(2 * nrows, ncols, height_ratios=[3, 1.1] * nrows)
    for i, e in enumerate(names):
        top = fig.add_subplot(gs[2 * (i // ncols), i % ncols])
        hist = fig.add_subplot(gs[2 * (i // ncols) + 1, i % ncols], sharex=top)
        top.plot([0, 1], [0, 1], color="#777777", lw=0.8, ls=":", label="perfect calibration")
        for scaled, ls, label in ((False, "-", "before scaling"), (True, "--", "after temperature scaling")):
            b = bins.filter((pl.col("encoder") == e) & (pl.col("scaled") == scaled))
            if not b.height:
                continue
            colour = "#0072B2" if scaled else "#555555"  # the same two colours in every panel
            top.plot(b["confidence"], b["accuracy"], ls=ls, lw=1, color=colour, label=label)
            # marker area by the bin's share of images, so a near-empty bin does not catch the eye
            share = b["count"].to_numpy() / max(int(b["count"].sum()), 1)
            top.scatter(b["confidence"], b["accuracy"], s=8 + 240 * share, marker="s" if scaled else "o",
                        color=colour, zorder=3)
            width = 1.0 / max(int(b["bin"].max()) + 1, 15)
            hist.bar(b["confidence"].to_numpy(), b["count"].to_numpy(), width=width * 0.9,
                     color=colour if not scaled else "none", edgecolor=colour, alpha=0.6 if not scaled else 1.0,
                     ls=ls, label=label)
        if e in ece:
            before, after = ece[e]
            top.text(0.97, 0.04, f"ECE {before:.3f} before\nECE {after:.3f} after", transform=top.transAxes,
                     ha="right", va="bottom", fontsize=8,
                     bbox={"facecolor": "white", "edgecolor": "#cccccc", "alpha": 0.9})
        top.set_xlim(0, 1)
        top.set_ylim(0, 1)
        top.set_title(style[e]["label"], fontsize=10)
        top.set_xlabel("mean confidence (0-1)", fontsize=8)
        top.set_ylabel("observed accuracy (0-1)", fontsize=8)
        top.grid(alpha=0.3)
        hist.set_xlabel("confidence bin", fontsize=8)
        hist.set_ylabel("images", fontsize=8)
        hist.tick_params(labelsize=7)
        if i == 0:
            top.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{dataset}: reliability, clean test split, 100% labels (bins pooled over seeds"
                 " and, multi-label, labels); below each, the images per bin", fontsize=10)
    return fig
