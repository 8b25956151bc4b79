"""The report's figures: polars tables from ``crs score`` -> matplotlib Figures.

Every function takes the score tables and returns a ``matplotlib.figure.Figure`` (built
without pyplot, so nothing global is kept), or raises ``Absent`` saying which input is
missing, so the page can say so in that section. Every axes gets an x and a y label;
colours come from the Okabe-Ito palette (distinguishable with the common forms of colour
blindness), with markers cycling too once there are more than eight encoders.
matplotlib is imported here only, and this module only by ``report``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from crs.scoring.axes import AXES, REGISTRY  # noqa: E402

# Okabe & Ito (2008), "Color Universal Design"; yellow last (weak on white)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
AXIS_SHORT = {a.name: a.symbol for a in REGISTRY.values()}
AXIS_LABEL = {a: f"{AXIS_SHORT[a]}\n{a.replace('_', ' ')}" for a in AXES}
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


# ------------------------------------------------------------- profiles
def reference_profile(encoders: pl.DataFrame, per_dataset: pl.DataFrame, reference: str) -> np.ndarray:
    """Axis values [axis] the q-scores are relative to, averaged over datasets like the encoders' values.

    A named reference: its own row. 'median': the per-dataset median over encoders, then
    the mean over datasets (docs/crs-v1.md section 2 takes the median per dataset).
    """
    if reference in encoders["encoder"].to_list():
        row = encoders.filter(pl.col("encoder") == reference)
        return row.select(AXES).to_numpy()[0].astype(float)
    med = per_dataset.group_by("dataset").agg([pl.col(a).median() for a in AXES])
    return med.select(AXES).mean().to_numpy()[0].astype(float)


def profiles(encoders: pl.DataFrame, per_dataset: pl.DataFrame, settings: dict) -> Figure:
    """One panel per encoder: its four axis values as points with bootstrap intervals; the reference as bars.

    The axes are categories, so nothing joins them: a line from D to C would suggest an order.
    """
    _need(encoders, AXES, "encoder table", "run `crs score` first")
    names = encoders["encoder"].to_list()
    ref_name = settings.get("reference", "median")
    style = styles(names, ref_name)
    ref = reference_profile(encoders, per_dataset, ref_name)
    ref_label = (f"{ref_name}{REFERENCE_TAG}: grey dash" if ref_name in names
                 else "reference (per-axis median): grey dash")
    fig, axes = _grid(len(names), 4, 3.2, 2.9)
    x = np.arange(len(AXES))
    for ax, row in zip(axes, encoders.iter_rows(named=True), strict=True):
        e = row["encoder"]
        v = np.array([row[a] for a in AXES], dtype=float)
        lo = np.array([_col(row, f"{a}_low") for a in AXES])
        hi = np.array([_col(row, f"{a}_high") for a in AXES])
        ax.plot(x, ref, ls="none", color="#555555", marker="_", ms=26, mew=2, label=ref_label)
        ax.errorbar(x, v, yerr=_yerr(v, lo, hi), ls="none", elinewidth=2, capsize=4,
                    label=style[e]["label"], **_marker_kw(style[e]))
        ax.set_xticks(x, [AXIS_SHORT[a] for a in AXES])
        ax.set_xlim(-0.6, len(AXES) - 0.4)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{style[e]['label']}\nCRS {row['crs']:.1f}", fontsize=10)
        ax.set_xlabel("axis (D, C, L, R)")
        ax.set_ylabel("axis value (0-1, higher better)")
        ax.grid(axis="y", alpha=0.3)
    handles = [Line2D([], [], ls="none", color="#555555", marker="_", ms=20, mew=2, label=ref_label),
               Line2D([], [], ls="none", color="#999999", marker="o", ms=7, label="encoder (bar: interval)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle("Profiles: seed means over the comparison set, bars = bootstrap "
                 f"{100 * settings.get('bootstrap', {}).get('confidence', 0.95):.0f}% intervals, "
                 "grey dash = reference", fontsize=10)
    return fig


# ---------------------------------------------------------- rank change
def rank_slope(encoders: pl.DataFrame, rank_comparison: dict, reference: str | None = None) -> Figure:
    """AUROC rank (left) against CRS rank (right), one line per encoder; lines of reversed pairs bold."""
    _need(encoders, ["auroc_rank", "crs_rank"], "ranks", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    reversed_ = {e for pair in rank_comparison.get("reversed_pairs", []) for e in pair}
    n = len(names)
    fig = Figure(figsize=(7.0, 0.45 * n + 2.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for row in encoders.iter_rows(named=True):
        e = row["encoder"]
        hot = e in reversed_
        kw = _marker_kw(style[e])
        if not hot:
            kw["color"] = "#999999"
        ax.plot([0, 1], [row["auroc_rank"], row["crs_rank"]], lw=3 if hot else 1.2, ls="-" if hot else ":", **kw)
        ax.text(-0.06, row["auroc_rank"], style[e]["label"], ha="right", va="center", fontsize=9)
        ax.text(1.06, row["crs_rank"], style[e]["label"], ha="left", va="center", fontsize=9,
                fontweight="bold" if hot else "normal")
    ax.set_xlim(-0.9, 1.9)
    ax.set_ylim(n + 0.5, 0.5)
    ax.set_xticks([0, 1], ["AUROC rank", "CRS rank"])
    ax.set_yticks(range(1, n + 1))
    ax.set_xlabel("ranking by")
    ax.set_ylabel("rank (1 = best)")
    rc = rank_comparison
    ax.set_title(f"{rc.get('discordant_pairs', 0)} of {rc.get('pairs', 0)} pairs reversed (bold); Kendall tau-b "
                 f"{_fmt(rc.get('kendall_tau_b'), '.2f')}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig


# --------------------------------------------------------------- Pareto
def pareto(encoders: pl.DataFrame, reference: str | None = None) -> Figure:
    """q discrimination against q calibration with intervals, q robustness as colour AND as a printed value.

    The colour scale spans the q robustness actually observed (not -1..1, which painted every
    encoder the same); each point is also labelled with its q R, and front membership is the
    marker's shape, so the figure reads the same in grey.
    """
    cols = ["q_discrimination", "q_calibration", "q_robustness", "pareto"]
    _need(encoders, cols, "Pareto flags", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    fig = Figure(figsize=(7.6, 5.6), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    r = encoders["q_robustness"].to_numpy().astype(float)
    lo, hi = float(np.nanmin(r)), float(np.nanmax(r))
    if not hi > lo:
        lo, hi = lo - 0.01, hi + 0.01
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    sm = ScalarMappable(Normalize(lo, hi), SCALAR_CMAP)
    for row in encoders.iter_rows(named=True):
        e = row["encoder"]
        d, c = row["q_discrimination"], row["q_calibration"]
        ax.errorbar([d], [c], xerr=_yerr([d], [_col(row, "q_discrimination_low")],
                                          [_col(row, "q_discrimination_high")]),
                    yerr=_yerr([c], [_col(row, "q_calibration_low")], [_col(row, "q_calibration_high")]),
                    color="#666666", lw=1, capsize=3, ls="none", zorder=1)
        front = bool(row["pareto"])
        edge = REFERENCE_EDGE if style[e]["reference"] else {"edgecolor": "black", "linewidth": 0.8}
        ax.scatter([d], [c], color=sm.to_rgba(row["q_robustness"]), marker="*" if front else "o",
                   s=340 if front else 110, zorder=3, **edge)
        _annotate(ax, f"{style[e]['label']}\nq R {row['q_robustness']:+.3f}", d, c,
                  encoders["q_discrimination"].to_numpy().astype(float))
    ax.axhline(0, color="#777777", lw=0.8, ls="--")
    ax.axvline(0, color="#777777", lw=0.8, ls="--")
    ax.margins(0.25)
    ax.set_xlabel("q discrimination (0 = reference)")
    ax.set_ylabel("q calibration (0 = reference)")
    fig.colorbar(sm, ax=ax, label="q robustness (observed range)", pad=0.02)
    handles = [Line2D([], [], marker="*", ms=14, color="#bbbbbb", mec="black", ls="", label="on the 4-axis front"),
               Line2D([], [], marker="o", ms=8, color="#bbbbbb", mec="black", ls="", label="dominated"),
               Line2D([], [], marker="o", ms=8, color="#bbbbbb", mec="black", mew=2.2, ls="", label="reference (ring)")]
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    ax.set_title("q discrimination vs q calibration\n(front computed on all four q-axes)", fontsize=10)
    return fig


# ---------------------------------------------------------- reliability
def reliability_bins(reliability: pl.DataFrame, condition: str = "clean") -> pl.DataFrame:
    """Bins pooled over seeds and labels: count-weighted mean confidence and accuracy.

    One row per (encoder, dataset, scaled, bin) of ``condition``; a multi-class task has
    one top-label row per seed and bin, a multi-label task one per label too.
    """
    _need(reliability, ["encoder", "dataset", "condition", "scaled", "bin", "count", "confidence", "accuracy"],
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
    g = rows.group_by("encoder").agg(pl.col("ece").mean(), pl.col("ece_ts").mean())
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


# ----------------------------------------------------- label efficiency
def label_efficiency(curves: pl.DataFrame, order: Sequence[str], unit: str = "seed",
                     reference: str | None = None) -> Figure:
    """Clean AUROC against label fraction per dataset, one line per encoder with its bootstrap band."""
    _need(curves, ["encoder", "dataset", "fraction", "auroc", "auroc_low", "auroc_high"], "label-efficiency curves",
          "run `crs score` first")
    datasets = sorted(curves["dataset"].unique().to_list())
    style = styles(order, reference)
    fig, axes = _grid(len(datasets), 3, 4.2, 3.4)
    for ax, dataset in zip(axes, datasets, strict=True):
        for e in order:
            c = curves.filter((pl.col("dataset") == dataset) & (pl.col("encoder") == e)).sort("fraction")
            if not c.height:
                continue
            f = 100 * c["fraction"].to_numpy()
            ax.fill_between(f, c["auroc_low"].to_numpy(), c["auroc_high"].to_numpy(), color=style[e]["color"],
                            alpha=0.2, lw=0)
            ax.plot(f, c["auroc"].to_numpy(), label=style[e]["label"], **_marker_kw(style[e], 6))
        ax.set_xscale("log")
        ticks = sorted(set((100 * curves.filter(pl.col("dataset") == dataset)["fraction"]).to_list()))
        ax.set_xticks(ticks, [f"{t:g}%" for t in ticks])
        ax.minorticks_off()
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("labelled share of the training split (log)")
        ax.set_ylabel("clean test AUROC (0-1)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Label efficiency: seed mean, band = 95% {unit}-bootstrap interval", fontsize=10)
    return fig


# ----------------------------------------------------------- robustness
FAMILY_GROUPS = (("noise", "_noise"), ("blur", "_blur"), ("intensity", ("brightness", "contrast", "gamma")),
                 ("compression", ("jpeg", "pixelate")))


def family_group(family: str) -> str:
    """The group a perturbation family is drawn in (noise, blur, intensity, compression, artefact)."""
    for group, key in FAMILY_GROUPS:
        if (family.endswith(key) if isinstance(key, str) else family.startswith(key)):
            return group
    return "artefact"


def _grouped(families: Sequence[str]) -> list[str]:
    order = [g for g, _ in FAMILY_GROUPS] + ["artefact"]
    return sorted(families, key=lambda f: (order.index(family_group(f)), f))


def _band(ax, x, r: pl.DataFrame, st: dict, label: str | None) -> None:
    if {"retention_low", "retention_high"} <= set(r.columns) and r["retention_low"].is_not_null().any():
        ax.fill_between(x, r["retention_low"].to_numpy().astype(float), r["retention_high"].to_numpy().astype(float),
                        color=st["color"], alpha=0.18, lw=0)
    ax.plot(x, r["retention"].to_numpy(), label=label, lw=2.2 if st["reference"] else 1.6, **_marker_kw(st, 6))


def robustness(detail: pl.DataFrame, dataset: str, order: Sequence[str], reference: str | None = None,
               summary: pl.DataFrame | None = None) -> Figure:
    """One readable figure per dataset: mean retention over the families against severity (left), and
    each family's retention at the highest severity, families grouped (right); intervals where known.

    ``summary``: rows (encoder, dataset, severity, retention[, retention_low, retention_high]) of the
    mean over families; computed here as the plain mean of ``detail`` when not given.
    """
    _need(detail, ["encoder", "dataset", "family", "severity", "retention", "kind"], "robustness detail",
          "run `crs score` on records with perturbed conditions")
    rows = detail.filter((pl.col("dataset") == dataset) & (pl.col("kind") == "perturbed"))
    if not rows.height:
        raise Absent(f"no perturbed conditions for dataset {dataset!r} (extracted with --no-perturb?)")
    if summary is None or not summary.height:
        summary = rows.group_by("encoder", "dataset", "severity").agg(pl.col("retention").mean())
    summary = summary.filter(pl.col("dataset") == dataset)
    style = styles(order, reference)
    severities = sorted(rows["severity"].drop_nulls().unique().to_list())
    families = _grouped(rows["family"].unique().to_list())
    fig = Figure(figsize=(11.5, max(4.4, 0.3 * len(families) + 1.8)), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
    _retention_by_severity(left, summary, order, style, severities)
    _families_at_top(right, rows, order, style, families, max(severities))
    fig.suptitle(f"{dataset}: share of the clean above-chance AUROC kept under perturbation", fontsize=10)
    return fig


def _retention_by_severity(ax, summary: pl.DataFrame, order: Sequence[str], style: dict, severities: list) -> None:
    """The left panel of ``robustness``: mean retention over families against severity, with bands."""
    for e in order:
        r = summary.filter(pl.col("encoder") == e).sort("severity")
        if r.height:
            _band(ax, r["severity"].to_numpy(), r, style[e], style[e]["label"])
    ax.set_xticks(severities)
    ax.set_xlim(min(severities) - 0.3, max(severities) + 0.3)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("severity (1 = mild, 5 = severe)")
    ax.set_ylabel("AUROC retention, mean over families (0-1)")
    ax.set_title("All perturbation families", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")


def _families_at_top(ax, rows: pl.DataFrame, order: Sequence[str], style: dict, families: list[str], top) -> None:
    """The right panel of ``robustness``: each family's retention at the highest severity, families grouped."""
    at_top = rows.filter(pl.col("severity") == top)
    y = {f: i for i, f in enumerate(families)}
    k = max(1, len(order))
    for j, e in enumerate(order):
        r = at_top.filter(pl.col("encoder") == e)
        if not r.height:
            continue
        yy = np.array([y[f] for f in r["family"].to_list()]) + (j - (k - 1) / 2) * min(0.6 / k, 0.18)
        v = r["retention"].to_numpy().astype(float)
        if {"retention_low", "retention_high"} <= set(r.columns):
            ax.errorbar(v, yy, xerr=_yerr(v, r["retention_low"].to_numpy(), r["retention_high"].to_numpy()),
                        ls="none", elinewidth=1.2, capsize=2, **_marker_kw(style[e], 6))
        else:
            ax.plot(v, yy, ls="none", **_marker_kw(style[e], 6))
    groups = [family_group(f) for f in families]
    for i in range(1, len(families)):
        if groups[i] != groups[i - 1]:
            ax.axhline(i - 0.5, color="#999999", lw=0.8)
    ax.set_yticks(range(len(families)), [f"{f}  [{g}]" for f, g in zip(families, groups, strict=True)], fontsize=8)
    ax.set_ylim(len(families) - 0.5, -0.5)
    ax.set_xlim(-0.03, 1.03)
    ax.set_xlabel(f"AUROC retention at severity {top} (0-1)")
    ax.set_ylabel("perturbation family [group]")
    ax.set_title(f"Each family at severity {top}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)


def robustness_grid(detail: pl.DataFrame, dataset: str, order: Sequence[str], reference: str | None = None) -> Figure:
    """Retention against severity for one dataset, one panel per perturbation family (the appendix view)."""
    _need(detail, ["encoder", "dataset", "family", "severity", "retention", "kind"], "robustness detail",
          "run `crs score` on records with perturbed conditions")
    rows = detail.filter((pl.col("dataset") == dataset) & (pl.col("kind") == "perturbed"))
    if not rows.height:
        raise Absent(f"no perturbed conditions for dataset {dataset!r} (extracted with --no-perturb?)")
    families = _grouped(rows["family"].unique().to_list())
    style = styles(order, reference)
    fig, axes = _grid(len(families), 5, 2.8, 2.5)
    severities = sorted(rows["severity"].drop_nulls().unique().to_list())
    for ax, fam in zip(axes, families, strict=True):
        for e in order:
            r = rows.filter((pl.col("family") == fam) & (pl.col("encoder") == e)).sort("severity")
            if r.height:
                _band(ax, r["severity"].to_numpy(), r, style[e], None)
        ax.set_title(f"{fam} [{family_group(fam)}]", fontsize=9)
        ax.set_xticks(severities)
        ax.set_xlim(min(severities) - 0.5, max(severities) + 0.5)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("severity", fontsize=8)
        ax.set_ylabel("retention (0-1)", fontsize=8)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], label=style[e]["label"], **_marker_kw(style[e], 6)) for e in order]
    per_row = max(1, int(fig.get_size_inches()[0] / 2.4))  # legend entries that fit across the figure
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(order), per_row), fontsize=9)
    fig.suptitle(f"{dataset}: retention per perturbation family (bands: intervals, where known)", fontsize=10)
    return fig


def shift_gap(per_dataset: pl.DataFrame, detail: pl.DataFrame, order: Sequence[str],
              reference: str | None = None) -> Figure:
    """Clean against shift-target AUROC per encoder (a dumbbell per encoder), one panel per shifted dataset."""
    _need(detail, ["encoder", "dataset", "kind", "auroc", "condition"], "robustness detail", "run `crs score`")
    shifts = detail.filter(pl.col("kind") == "shift")
    if not shifts.height:
        raise Absent("no shift condition in the results (no dataset with a shift target was probed)")
    pairs = shifts.select("dataset", "condition").unique().sort("dataset", "condition").rows()
    style = styles(order, reference)
    fig, axes = _grid(len(pairs), 2, 6.0, 0.42 * len(order) + 1.6)
    for ax, (dataset, condition) in zip(axes, pairs, strict=True):
        names = [e for e in order if e in set(shifts.filter(pl.col("dataset") == dataset)["encoder"].to_list())]
        for i, e in enumerate(names):
            clean = per_dataset.filter((pl.col("encoder") == e) & (pl.col("dataset") == dataset))["discrimination"]
            s = shifts.filter((pl.col("encoder") == e) & (pl.col("condition") == condition))["auroc"]
            if not clean.len() or not s.len():
                continue
            a, b = float(clean[0]), float(s[0])
            kw = _marker_kw(style[e], 8)
            kw.pop("marker")
            ax.plot([a, b], [i, i], color=style[e]["color"], lw=2)
            ax.plot(a, i, marker="o", ls="", **kw)
            ax.plot(b, i, marker="o", mfc="white", ls="", **{**kw, "mec": kw.get("mec", style[e]["color"])})
            ax.text(max(a, b) + 0.01, i, f"gap {a - b:+.3f}", va="center", fontsize=8)
        ax.set_yticks(range(len(names)), [style[e]["label"] for e in names])
        ax.set_ylim(len(names) - 0.5, -0.5)
        clean_all = per_dataset.filter(pl.col("dataset") == dataset)["discrimination"]
        lo = min(0.5, float(shifts["auroc"].min()) - 0.02, float(clean_all.min()) - 0.02)
        ax.set_xlim(lo, 1.1)
        ax.set_title(f"{dataset} -> {condition.removeprefix('shift:')}", fontsize=10)
        ax.set_xlabel("test AUROC (0-1)")
        ax.set_ylabel("encoder")
        ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", color="#555555", ls="", label="clean test split"),
               Line2D([], [], marker="o", mfc="white", mec="#555555", ls="", label="shift target")]
    # below the panels, where no dumbbell or gap label can sit under it
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    fig.suptitle("Shift gap: clean AUROC minus shift-target AUROC (100% labels, seed means)", fontsize=10)
    return fig


# ------------------------------------------------------------------ cost
COSTS = (("gflops", "GFLOPs per image (log scale; lower is cheaper)", False),
         ("images_per_s", "extraction throughput, images/s (log scale; higher is cheaper)", True))


def cost_front(cost: np.ndarray, crs: np.ndarray, higher_is_cheaper: bool) -> np.ndarray:
    """bool [encoder]: no other encoder is at least as cheap and at least as good, and better on one."""
    c = -cost if higher_is_cheaper else cost
    out = np.ones(len(c), bool)
    for i in range(len(c)):
        better = (c <= c[i]) & (crs >= crs[i]) & ((c < c[i]) | (crs > crs[i]))
        out[i] = not better.any()
    return out


def cost_quality(encoders: pl.DataFrame, reference: str | None = None) -> Figure:
    """CRS (with its interval) against each cost the store recorded, the cost-quality Pareto front drawn."""
    present = [(c, lab, hi) for c, lab, hi in COSTS
               if c in encoders.columns and encoders[c].cast(pl.Float64, strict=False).is_not_null().any()]
    if not present:
        raise Absent("no cost data in the results (parameters, GFLOPs per image, images/s): the store was "
                     "extracted by a crs that did not measure them; re-run `crs extract` and `crs score` to "
                     "record them")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    fig, axes = _grid(len(present), 2, 5.6, 4.4)
    for ax, (col, label, higher) in zip(axes, present, strict=True):
        rows = encoders.filter(pl.col(col).is_not_null() & (pl.col(col).cast(pl.Float64) > 0))
        x = rows[col].cast(pl.Float64).to_numpy()
        y = rows["crs"].to_numpy().astype(float)
        for row, xi, yi in zip(rows.iter_rows(named=True), x, y, strict=True):
            st = style[row["encoder"]]
            ax.errorbar([xi], [yi], yerr=_yerr([yi], [_col(row, "crs_low")], [_col(row, "crs_high")]), ls="none",
                        capsize=3, **_marker_kw(st, 9))
            _annotate(ax, st["label"], xi, yi, x, log=True)
        front = cost_front(x, y, higher)
        if front.any():
            idx = np.argsort(x[front])
            ax.step(x[front][idx], y[front][idx], where="post" if not higher else "pre", color="#444444", lw=1.2,
                    ls="--", label="cost-quality front", zorder=0)
        missing = encoders.height - rows.height
        if missing:
            ax.text(0.02, 0.02, f"{missing} encoder(s) without this cost", transform=ax.transAxes, fontsize=8)
        ax.set_xscale("log")
        span = float(np.log10(x.max() / x.min())) if x.size and x.min() > 0 else 0.0
        # 1-2-5 ticks within two decades; decades only beyond, so the labels never run into each other
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if span < 2 else (1.0,), numticks=8))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.25, y=0.15)
        ax.set_xlabel(label, fontsize=9)
        ax.set_ylabel("CRS (bars: 95% interval)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("Quality against cost: points on the dashed front are not beaten on both", fontsize=10)
    return fig


# --------------------------------------------------------- rank spread
def rank_distribution(dist: pl.DataFrame, order: Sequence[str], n_bootstrap: int | None = None,
                      reference: str | None = None) -> Figure:
    """Share of bootstrap replicates giving each encoder each CRS rank (a heat map, leaderboard order)."""
    _need(dist, ["encoder", "rank", "share"], "bootstrap rank distribution",
          "re-run `crs score` (scores written before the report existed lack rank_distribution)")
    style = styles(order, reference)
    ranks = sorted(dist["rank"].unique().to_list())
    m = np.zeros((len(order), len(ranks)))
    for r in dist.iter_rows(named=True):
        if r["encoder"] in order:
            m[order.index(r["encoder"]), ranks.index(r["rank"])] = r["share"]
    fig = Figure(figsize=(1.0 * len(ranks) + 5.0, 0.45 * len(order) + 1.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(m, cmap=SCALAR_CMAP, vmin=0, vmax=1, aspect="auto")
    for i in range(len(order)):
        for j in range(len(ranks)):
            if m[i, j] > 0:
                ax.text(j, i, f"{100 * m[i, j]:.0f}%", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(ranks)), [f"{r:g}" for r in ranks])
    ax.set_yticks(range(len(order)), [style[e]["label"] for e in order])
    ax.set_xlabel("CRS rank in a replicate (1 = best; ties share the mean)")
    ax.set_ylabel("encoder")
    fig.colorbar(im, ax=ax, label="share of replicates (0-1)")
    b = f" (B = {n_bootstrap})" if n_bootstrap else ""
    ax.set_title(f"Bootstrap distribution of CRS ranks{b}", fontsize=10)
    return fig


def weight_map(grid: pl.DataFrame, order: Sequence[str], weights: dict | None = None,
               reference: str | None = None) -> Figure:
    """The CRS leader at each point of the weight simplex; the run's weights marked."""
    _need(grid, ["w_dominance", "w_balance", "w_worst_axis", "leader"], "weight-sensitivity grid",
          "run `crs score` first")
    style = styles(order, reference)
    fig = Figure(figsize=(7.0, 5.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    n = grid.height
    for e in [e for e in order if e in set(grid["leader"].to_list())]:
        g = grid.filter(pl.col("leader") == e)
        ax.scatter(g["w_balance"], g["w_worst_axis"], marker="s", s=70, color=style[e]["color"],
                   label=f"{style[e]['label']} leads ({100 * g.height / n:.0f}% of points)")
    if weights:
        ax.scatter([weights.get("balance", np.nan)], [weights.get("worst_axis", np.nan)], marker="*", s=320,
                   facecolor="white", edgecolor="black", lw=1.5, label="this run's weights", zorder=5)
    ax.plot([0, 1], [1, 0], color="#777777", lw=0.8)
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(-0.04, 1.04)
    ax.set_aspect("equal")
    ax.set_xlabel("weight on profile balance w_bal (0-1)")
    ax.set_ylabel("weight on worst axis w_worst (0-1)")
    ax.text(0.55, 0.75, "w_dom = 1 - w_bal - w_worst\n(origin: dominance only)", fontsize=8, color="#444444")
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("Weight sensitivity: top CRS at each weighting", fontsize=10)
    return fig


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)
