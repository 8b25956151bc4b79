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


def styles(encoders: Sequence[str]) -> dict[str, dict]:
    """Colour and marker per encoder, in the order given (the leaderboard's)."""
    return {
        e: {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[(i // len(PALETTE) + i) % len(MARKERS)]}
        for i, e in enumerate(encoders)
    }


def _grid(n: int, ncols: int, width: float = 3.4, height: float = 3.0):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(width * ncols + 0.6, height * nrows + 0.7), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.remove()
    return fig, list(axes[:n])


def _need(table: pl.DataFrame, columns: Sequence[str], what: str, how: str) -> None:
    if table is None or not table.height or not set(columns) <= set(table.columns):
        raise Absent(f"no {what} in the results; {how}")


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
    """One panel per encoder: its four axis values with bootstrap intervals; the reference dashed."""
    _need(encoders, AXES, "encoder table", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names)
    ref = reference_profile(encoders, per_dataset, settings.get("reference", "median"))
    ref_name = settings.get("reference", "median")
    ref_label = f"reference: {ref_name}" if ref_name != "median" else "reference: per-axis median"
    fig, axes = _grid(len(names), 4, 3.2, 2.9)
    x = np.arange(len(AXES))
    for ax, row in zip(axes, encoders.iter_rows(named=True), strict=True):
        e = row["encoder"]
        v = np.array([row[a] for a in AXES], dtype=float)
        lo = np.array([row.get(f"{a}_low", np.nan) for a in AXES], dtype=float)
        hi = np.array([row.get(f"{a}_high", np.nan) for a in AXES], dtype=float)
        ax.plot(x, ref, ls="--", color="#777777", lw=1.5, marker="|", label=ref_label)
        yerr = np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)])
        yerr = np.nan_to_num(yerr)
        ax.errorbar(x, v, yerr=yerr, color=style[e]["color"], marker=style[e]["marker"], lw=2, capsize=3,
                    label=e)
        ax.set_xticks(x, [AXIS_SHORT[a] for a in AXES])
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{e}\nCRS {row['crs']:.1f}", fontsize=10)
        ax.set_xlabel("axis (D, C, L, R)")
        ax.set_ylabel("axis value (0-1, higher better)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Encoder profiles on the four axes (seed means over the comparison set; bars: bootstrap "
                 f"{100 * settings.get('bootstrap', {}).get('confidence', 0.95):.0f}% intervals)", fontsize=10)
    return fig


# ---------------------------------------------------------- rank change
def rank_slope(encoders: pl.DataFrame, rank_comparison: dict) -> Figure:
    """AUROC rank (left) against CRS rank (right), one line per encoder; lines of reversed pairs bold."""
    _need(encoders, ["auroc_rank", "crs_rank"], "ranks", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names)
    reversed_ = {e for pair in rank_comparison.get("reversed_pairs", []) for e in pair}
    n = len(names)
    fig = Figure(figsize=(6.5, 0.45 * n + 2.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for row in encoders.iter_rows(named=True):
        e = row["encoder"]
        hot = e in reversed_
        ax.plot([0, 1], [row["auroc_rank"], row["crs_rank"]], color=style[e]["color"] if hot else "#999999",
                lw=3 if hot else 1.2, ls="-" if hot else ":", marker=style[e]["marker"], ms=7)
        ax.text(-0.04, row["auroc_rank"], e, ha="right", va="center", fontsize=9)
        ax.text(1.04, row["crs_rank"], e, ha="left", va="center", fontsize=9,
                fontweight="bold" if hot else "normal")
    ax.set_xlim(-0.75, 1.75)
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
def pareto(encoders: pl.DataFrame) -> Figure:
    """q discrimination against q calibration, coloured by q robustness; non-dominated encoders starred."""
    cols = ["q_discrimination", "q_calibration", "q_robustness", "pareto"]
    _need(encoders, cols, "Pareto flags", "run `crs score` first")
    fig = Figure(figsize=(7.2, 5.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    d = encoders["q_discrimination"].to_numpy()
    c = encoders["q_calibration"].to_numpy()
    r = encoders["q_robustness"].to_numpy()
    front = encoders["pareto"].to_numpy().astype(bool)
    sc = None
    for mask, marker, size, label in ((~front, "o", 90, "dominated"), (front, "*", 320, "non-dominated (4 q-axes)")):
        if mask.any():
            sc = ax.scatter(d[mask], c[mask], c=r[mask], cmap=SCALAR_CMAP, vmin=-1, vmax=1, marker=marker, s=size,
                            edgecolors="black", linewidths=0.8, label=label)
    for e, x, y in zip(encoders["encoder"].to_list(), d, c, strict=True):
        ax.annotate(e, (x, y), textcoords="offset points", xytext=(7, 5), fontsize=9)
    ax.axhline(0, color="#777777", lw=0.8, ls="--")
    ax.axvline(0, color="#777777", lw=0.8, ls="--")
    ax.set_xlabel("q discrimination (reference-relative, -1 to 1; 0 = reference)")
    ax.set_ylabel("q calibration (reference-relative, -1 to 1)")
    fig.colorbar(sc, ax=ax, label="q robustness (reference-relative, -1 to 1)", pad=0.02)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    ax.set_title("Pareto view: the front is computed on all four q-axes, drawn on two", fontsize=10)
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


def reliability_diagrams(reliability: pl.DataFrame, dataset: str, order: Sequence[str]) -> Figure:
    """Reliability diagrams of one dataset, a panel per encoder: before and after temperature scaling."""
    bins = reliability_bins(reliability).filter(pl.col("dataset") == dataset)
    if not bins.height:
        raise Absent(f"no clean reliability bins for dataset {dataset!r}")
    names = [e for e in order if e in set(bins["encoder"].to_list())]
    fig, axes = _grid(len(names), 4, 3.1, 3.0)
    for ax, e in zip(axes, names, strict=True):
        ax.plot([0, 1], [0, 1], color="#777777", lw=0.8, ls=":", label="perfect calibration")
        for scaled, ls, label in ((False, "-", "before scaling"), (True, "--", "after temperature scaling")):
            b = bins.filter((pl.col("encoder") == e) & (pl.col("scaled") == scaled))
            if b.height:  # the same two colours in every panel: grey before, blue after
                ax.plot(b["confidence"], b["accuracy"], ls=ls, marker="s" if scaled else "o", ms=4,
                        color="#0072B2" if scaled else "#555555", label=label)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(e, fontsize=10)
        ax.set_xlabel("mean confidence (0-1)")
        ax.set_ylabel("observed accuracy (0-1)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{dataset}: top-label reliability, clean test split, 100% labels (bins pooled over seeds"
                 " and, multi-label, over labels)", fontsize=10)
    return fig


# ----------------------------------------------------- label efficiency
def label_efficiency(curves: pl.DataFrame, order: Sequence[str], unit: str = "seed") -> Figure:
    """Clean AUROC against label fraction per dataset, one line per encoder with its bootstrap band."""
    _need(curves, ["encoder", "dataset", "fraction", "auroc", "auroc_low", "auroc_high"], "label-efficiency curves",
          "run `crs score` first")
    datasets = sorted(curves["dataset"].unique().to_list())
    style = styles(order)
    fig, axes = _grid(len(datasets), 3, 4.2, 3.4)
    for ax, dataset in zip(axes, datasets, strict=True):
        for e in order:
            c = curves.filter((pl.col("dataset") == dataset) & (pl.col("encoder") == e)).sort("fraction")
            if not c.height:
                continue
            f = 100 * c["fraction"].to_numpy()
            ax.fill_between(f, c["auroc_low"].to_numpy(), c["auroc_high"].to_numpy(), color=style[e]["color"],
                            alpha=0.2, lw=0)
            ax.plot(f, c["auroc"].to_numpy(), color=style[e]["color"], marker=style[e]["marker"], label=e)
        ax.set_xscale("log")
        ticks = sorted(set((100 * curves.filter(pl.col("dataset") == dataset)["fraction"]).to_list()))
        ax.set_xticks(ticks, [f"{t:g}%" for t in ticks])
        ax.minorticks_off()
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("labelled share of the training split (log scale)")
        ax.set_ylabel("clean test AUROC (0-1)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Label efficiency: seed mean, band = 95% {unit}-bootstrap interval", fontsize=10)
    return fig


# ----------------------------------------------------------- robustness
def robustness(detail: pl.DataFrame, dataset: str, order: Sequence[str]) -> Figure:
    """Retention against severity for one dataset, one panel per perturbation family."""
    _need(detail, ["encoder", "dataset", "family", "severity", "retention", "kind"], "robustness detail",
          "run `crs score` on records with perturbed conditions")
    rows = detail.filter((pl.col("dataset") == dataset) & (pl.col("kind") == "perturbed"))
    if not rows.height:
        raise Absent(f"no perturbed conditions for dataset {dataset!r} (extracted with --no-perturb?)")
    families = sorted(rows["family"].unique().to_list())
    style = styles(order)
    fig, axes = _grid(len(families), 5, 2.7, 2.4)
    severities = sorted(rows["severity"].drop_nulls().unique().to_list())
    for ax, fam in zip(axes, families, strict=True):
        for e in order:
            r = rows.filter((pl.col("family") == fam) & (pl.col("encoder") == e)).sort("severity")
            if r.height:
                ax.plot(r["severity"], r["retention"], color=style[e]["color"], marker=style[e]["marker"], ms=5,
                        label=e)
        ax.set_title(fam, fontsize=9)
        ax.set_xticks(severities)
        ax.set_xlim(min(severities) - 0.5, max(severities) + 0.5)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("severity (1-5)", fontsize=8)
        ax.set_ylabel("AUROC retention (0-1)", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"{dataset}: share of clean above-chance AUROC kept under each perturbation (seed means)",
                 fontsize=10)
    return fig


def shift_gap(per_dataset: pl.DataFrame, detail: pl.DataFrame, order: Sequence[str]) -> Figure:
    """Clean against shift-target AUROC per encoder (a dumbbell per encoder), one panel per shifted dataset."""
    _need(detail, ["encoder", "dataset", "kind", "auroc", "condition"], "robustness detail", "run `crs score`")
    shifts = detail.filter(pl.col("kind") == "shift")
    if not shifts.height:
        raise Absent("no shift condition in the results (no dataset with a shift target was probed)")
    pairs = shifts.select("dataset", "condition").unique().sort("dataset", "condition").rows()
    style = styles(order)
    fig, axes = _grid(len(pairs), 2, 5.6, 0.42 * len(order) + 1.6)
    for ax, (dataset, condition) in zip(axes, pairs, strict=True):
        names = [e for e in order if e in set(shifts.filter(pl.col("dataset") == dataset)["encoder"].to_list())]
        for i, e in enumerate(names):
            clean = per_dataset.filter((pl.col("encoder") == e) & (pl.col("dataset") == dataset))["discrimination"]
            s = shifts.filter((pl.col("encoder") == e) & (pl.col("condition") == condition))["auroc"]
            if not clean.len() or not s.len():
                continue
            a, b = float(clean[0]), float(s[0])
            ax.plot([a, b], [i, i], color=style[e]["color"], lw=2)
            ax.plot(a, i, marker="o", color=style[e]["color"], ms=8, ls="")
            ax.plot(b, i, marker="o", mfc="white", mec=style[e]["color"], mew=2, ms=8, ls="")
            ax.text(max(a, b) + 0.01, i, f"gap {a - b:+.3f}", va="center", fontsize=8)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(len(names) - 0.5, -0.5)
        clean_all = per_dataset.filter(pl.col("dataset") == dataset)["discrimination"]
        lo = min(0.5, float(shifts["auroc"].min()) - 0.02, float(clean_all.min()) - 0.02)
        ax.set_xlim(lo, 1.08)
        ax.set_title(f"{dataset} -> {condition.removeprefix('shift:')}", fontsize=10)
        ax.set_xlabel("test AUROC (0-1)")
        ax.set_ylabel("encoder")
        ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", color="#555555", ls="", label="clean test split"),
               Line2D([], [], marker="o", mfc="white", mec="#555555", ls="", label="shift target")]
    axes[0].legend(handles=handles, fontsize=8, loc="lower right")
    fig.suptitle("Shift gap: clean AUROC minus AUROC on the shift target (100% labels, seed means)", fontsize=10)
    return fig


# --------------------------------------------------------- rank spread
def rank_distribution(dist: pl.DataFrame, order: Sequence[str], n_bootstrap: int | None = None) -> Figure:
    """Share of bootstrap replicates giving each encoder each CRS rank (a heat map, leaderboard order)."""
    _need(dist, ["encoder", "rank", "share"], "bootstrap rank distribution",
          "re-run `crs score` (scores written before the report existed lack rank_distribution)")
    ranks = sorted(dist["rank"].unique().to_list())
    m = np.zeros((len(order), len(ranks)))
    for r in dist.iter_rows(named=True):
        if r["encoder"] in order:
            m[order.index(r["encoder"]), ranks.index(r["rank"])] = r["share"]
    fig = Figure(figsize=(1.0 * len(ranks) + 4.0, 0.45 * len(order) + 1.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(m, cmap=SCALAR_CMAP, vmin=0, vmax=1, aspect="auto")
    for i in range(len(order)):
        for j in range(len(ranks)):
            if m[i, j] > 0:
                ax.text(j, i, f"{100 * m[i, j]:.0f}%", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(ranks)), [f"{r:g}" for r in ranks])
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("CRS rank in a bootstrap replicate (1 = best; ties share the mean rank)")
    ax.set_ylabel("encoder")
    fig.colorbar(im, ax=ax, label="share of replicates (0-1)")
    b = f" (B = {n_bootstrap})" if n_bootstrap else ""
    ax.set_title(f"Bootstrap distribution of CRS ranks{b}", fontsize=10)
    return fig


def weight_map(grid: pl.DataFrame, order: Sequence[str], weights: dict | None = None) -> Figure:
    """The CRS leader at each point of the weight simplex; the run's weights marked."""
    _need(grid, ["w_dominance", "w_balance", "w_worst_axis", "leader"], "weight-sensitivity grid",
          "run `crs score` first")
    style = styles(order)
    fig = Figure(figsize=(6.8, 5.6), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    n = grid.height
    for e in [e for e in order if e in set(grid["leader"].to_list())]:
        g = grid.filter(pl.col("leader") == e)
        ax.scatter(g["w_balance"], g["w_worst_axis"], marker="s", s=70, color=style[e]["color"],
                   label=f"{e} leads ({100 * g.height / n:.0f}% of points)")
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
    ax.set_title("Weight sensitivity: which encoder has the top CRS at each weighting", fontsize=10)
    return fig


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)
