"""The figures of the ranking: axis profiles, rank slope, Pareto view, rank distribution, weight map, cost
against quality."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from crs.scoring.axes import AXES
from crs.scoring.figures.style import (
    AXIS_SHORT,
    DPI,
    REFERENCE_EDGE,
    REFERENCE_TAG,
    SCALAR_CMAP,
    Absent,
    annotate,
    cell,
    error_bars,
    fmt,
    keep_apart,
    marker_kw,
    need_columns,
    panels,
    styles,
)


# ------------------------------------------------------------- profiles
def reference_profile(encoders: pl.DataFrame, per_dataset: pl.DataFrame, reference: str,
                      version: str | None = None) -> np.ndarray:
    """Axis values [axis] the q-scores are relative to, averaged over datasets like the encoders' values.

    A named reference: its own row. 'median': the per-dataset median over encoders by the CRS ``version``'s
    definition (v2's is smoothed, docs/crs-v2.md section 2; v1's and None: the plain median), then the mean over
    datasets (docs/crs-v1.md section 2 takes the median per dataset).
    """
    if reference in encoders["encoder"].to_list():
        row = encoders.filter(pl.col("encoder") == reference)
        return row.select(AXES).to_numpy()[0].astype(float)
    full = per_dataset.drop_nulls(AXES)
    if version is not None and full.height == full["encoder"].n_unique() * full["dataset"].n_unique():
        from crs.scoring.versions import get  # numpy only; the figures load without the scoring core otherwise

        rows = full.sort("encoder", "dataset")
        x = rows.select(AXES).to_numpy().astype(float).reshape(rows["encoder"].n_unique(), -1, len(AXES))
        return get(version).reference(x, "median").mean(axis=0)
    med = per_dataset.group_by("dataset").agg([pl.col(a).median() for a in AXES])
    return med.select(AXES).mean().to_numpy()[0].astype(float)


def profiles(encoders: pl.DataFrame, per_dataset: pl.DataFrame, settings: dict) -> Figure:
    """One panel per encoder: its four axis values as points with bootstrap intervals; the reference as bars.

    The axes are categories, so nothing joins them: a line from D to C would suggest an order.
    """
    need_columns(encoders, AXES, "encoder table", "run `crs score` first")
    names = encoders["encoder"].to_list()
    ref_name = settings.get("reference", "median")
    style = styles(names, ref_name)
    ref = reference_profile(encoders, per_dataset, ref_name, settings.get("crs_version"))
    ref_label = (f"{ref_name}{REFERENCE_TAG}: grey dash" if ref_name in names
                 else "reference (per-axis median): grey dash")
    fig, axes = panels(len(names), 4, 3.2, 2.9)
    x = np.arange(len(AXES))
    for ax, row in zip(axes, encoders.iter_rows(named=True), strict=True):
        e = row["encoder"]
        v = np.array([row[a] for a in AXES], dtype=float)
        lo = np.array([cell(row, f"{a}_low") for a in AXES])
        hi = np.array([cell(row, f"{a}_high") for a in AXES])
        ax.plot(x, ref, ls="none", color="#555555", marker="_", ms=26, mew=2, label=ref_label)
        ax.errorbar(x, v, yerr=error_bars(v, lo, hi), ls="none", elinewidth=2, capsize=4,
                    label=style[e]["label"], **marker_kw(style[e]))
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
    need_columns(encoders, ["auroc_rank", "crs_rank"], "ranks", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    reversed_ = {e for pair in rank_comparison.get("reversed_pairs", []) for e in pair}
    n = len(names)
    fig = Figure(figsize=(7.0, 0.45 * n + 2.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for row in encoders.iter_rows(named=True):
        e = row["encoder"]
        hot = e in reversed_
        kw = marker_kw(style[e])
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
                 f"{fmt(rc.get('kendall_tau_b'), '.2f')}", fontsize=10)
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
    need_columns(encoders, cols, "Pareto flags", "run `crs score` first")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    fig = Figure(figsize=(7.6, 5.6), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    r = encoders["q_robustness"].to_numpy().astype(float)
    lo, hi = float(np.nanmin(r)), float(np.nanmax(r))
    if not hi > lo:
        lo, hi = lo - 0.01, hi + 0.01
    sm = ScalarMappable(Normalize(lo, hi), SCALAR_CMAP)
    labels = []
    for row in encoders.iter_rows(named=True):
        e = row["encoder"]
        d, c = row["q_discrimination"], row["q_calibration"]
        ax.errorbar([d], [c], xerr=error_bars([d], [cell(row, "q_discrimination_low")],
                                               [cell(row, "q_discrimination_high")]),
                    yerr=error_bars([c], [cell(row, "q_calibration_low")], [cell(row, "q_calibration_high")]),
                    color="#666666", lw=1, capsize=3, ls="none", zorder=1)
        front = bool(row["pareto"])
        edge = REFERENCE_EDGE if style[e]["reference"] else {"edgecolor": "black", "linewidth": 0.8}
        ax.scatter([d], [c], color=sm.to_rgba(row["q_robustness"]), marker="*" if front else "o",
                   s=340 if front else 110, zorder=3, **edge)
        labels.append(annotate(ax, f"{style[e]['label']}\nq R {row['q_robustness']:+.3f}", d, c,
                               encoders["q_discrimination"].to_numpy().astype(float)))
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
    keep_apart(fig, labels)  # encoders close in D and C: their labels would print over each other
    return fig


# --------------------------------------------------------- rank spread
def rank_distribution(dist: pl.DataFrame, order: Sequence[str], n_bootstrap: int | None = None,
                      reference: str | None = None) -> Figure:
    """Share of bootstrap replicates giving each encoder each CRS rank (a heat map, leaderboard order)."""
    need_columns(dist, ["encoder", "rank", "share"], "bootstrap rank distribution",
                 "re-run `crs score` (these scores lack rank_distribution)")
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
    need_columns(grid, ["w_dominance", "w_balance", "w_worst_axis", "leader"], "weight-sensitivity grid",
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
    """CRS (with its interval) against each cost the store recorded; the cost-quality Pareto front drawn as a dashed
    step line where two or more encoders make it up, and named in a panel's corner where one encoder alone does."""
    present = [(c, lab, hi) for c, lab, hi in COSTS
               if c in encoders.columns and encoders[c].cast(pl.Float64, strict=False).is_not_null().any()]
    if not present:
        raise Absent("no cost data in the results (parameters, GFLOPs per image, images/s): the store was "
                     "extracted by a crs that did not measure them; re-run `crs extract` and `crs score` to "
                     "record them")
    names = encoders["encoder"].to_list()
    style = styles(names, reference)
    fig, axes = panels(len(present), 2, 5.6, 4.4)
    labels, dashed = [], False
    for ax, (col, label, higher) in zip(axes, present, strict=True):
        rows = encoders.filter(pl.col(col).is_not_null() & (pl.col(col).cast(pl.Float64) > 0))
        x = rows[col].cast(pl.Float64).to_numpy()
        y = rows["crs"].to_numpy().astype(float)
        for row, xi, yi in zip(rows.iter_rows(named=True), x, y, strict=True):
            st = style[row["encoder"]]
            ax.errorbar([xi], [yi], yerr=error_bars([yi], [cell(row, "crs_low")], [cell(row, "crs_high")]), ls="none",
                        capsize=3, **marker_kw(st, 9))
            labels.append(annotate(ax, st["label"], xi, yi, x, log=True))
        front = cost_front(x, y, higher)
        notes = []
        if front.sum() >= 2:
            idx = np.argsort(x[front])
            ax.step(x[front][idx], y[front][idx], where="post" if not higher else "pre", color="#444444", lw=1.2,
                    ls="--", label="cost-quality front (dashed)", zorder=0)
            ax.legend(fontsize=8, loc="best")
            dashed = True
        elif front.any():  # one encoder is both the cheapest and the best: a front of one point draws no line
            notes.append(f"front: {rows['encoder'][int(np.argmax(front))]} alone (cheapest and best)")
        missing = encoders.height - rows.height
        if missing:
            notes.append(f"{missing} encoder(s) without this cost")
        if notes:
            ax.text(0.02, 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="bottom")
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
    fig.suptitle("Quality against cost" + (": points on the dashed front are not beaten on both" if dashed else
                                           ""), fontsize=10)
    keep_apart(fig, labels)  # encoders of about the same cost and CRS: their labels would print over each other
    return fig
