"""The figures of label efficiency, robustness to perturbations and distribution shift."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from crs.scoring.figures.style import (
    DPI,
    Absent,
    error_bars,
    marker_kw,
    need_columns,
    panels,
    styles,
)


# ----------------------------------------------------- label efficiency
def label_efficiency(curves: pl.DataFrame, order: Sequence[str], unit: str = "seed",
                     reference: str | None = None) -> Figure:
    """Clean AUROC against label fraction per dataset, one line per encoder with its bootstrap band."""
    need_columns(curves, ["encoder", "dataset", "fraction", "auroc", "auroc_low", "auroc_high"],
                 "label-efficiency curves", "run `crs score` first")
    datasets = sorted(curves["dataset"].unique().to_list())
    style = styles(order, reference)
    fig, axes = panels(len(datasets), 3, 4.2, 3.4)
    for ax, dataset in zip(axes, datasets, strict=True):
        for e in order:
            c = curves.filter((pl.col("dataset") == dataset) & (pl.col("encoder") == e)).sort("fraction")
            if not c.height:
                continue
            f = 100 * c["fraction"].to_numpy()
            ax.fill_between(f, c["auroc_low"].to_numpy(), c["auroc_high"].to_numpy(), color=style[e]["color"],
                            alpha=0.2, lw=0)
            ax.plot(f, c["auroc"].to_numpy(), label=style[e]["label"], **marker_kw(style[e], 6))
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
    ax.plot(x, r["retention"].to_numpy(), label=label, lw=2.2 if st["reference"] else 1.6, **marker_kw(st, 6))


def robustness(detail: pl.DataFrame, dataset: str, order: Sequence[str], reference: str | None = None,
               summary: pl.DataFrame | None = None) -> Figure:
    """One readable figure per dataset: mean retention over the families against severity (left), and
    each family's retention at the highest severity, families grouped (right); intervals where known.

    ``summary``: rows (encoder, dataset, severity, retention[, retention_low, retention_high]) of the
    mean over families; computed here as the plain mean of ``detail`` when not given.
    """
    need_columns(detail, ["encoder", "dataset", "family", "severity", "retention", "kind"], "robustness detail",
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
            ax.errorbar(v, yy, xerr=error_bars(v, r["retention_low"].to_numpy(), r["retention_high"].to_numpy()),
                        ls="none", elinewidth=1.2, capsize=2, **marker_kw(style[e], 6))
        else:
            ax.plot(v, yy, ls="none", **marker_kw(style[e], 6))
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
    need_columns(detail, ["encoder", "dataset", "family", "severity", "retention", "kind"], "robustness detail",
                 "run `crs score` on records with perturbed conditions")
    rows = detail.filter((pl.col("dataset") == dataset) & (pl.col("kind") == "perturbed"))
    if not rows.height:
        raise Absent(f"no perturbed conditions for dataset {dataset!r} (extracted with --no-perturb?)")
    families = _grouped(rows["family"].unique().to_list())
    style = styles(order, reference)
    fig, axes = panels(len(families), 5, 2.8, 2.5)
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
    handles = [Line2D([], [], label=style[e]["label"], **marker_kw(style[e], 6)) for e in order]
    per_row = max(1, int(fig.get_size_inches()[0] / 2.4))  # legend entries that fit across the figure
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(order), per_row), fontsize=9)
    fig.suptitle(f"{dataset}: retention per perturbation family (bands: intervals, where known)", fontsize=10)
    return fig


def shift_gap(per_dataset: pl.DataFrame, detail: pl.DataFrame, order: Sequence[str],
              reference: str | None = None) -> Figure:
    """Clean against shift-target AUROC per encoder (a dumbbell per encoder), one panel per shifted dataset."""
    need_columns(detail, ["encoder", "dataset", "kind", "auroc", "condition"], "robustness detail", "run `crs score`")
    shifts = detail.filter(pl.col("kind") == "shift")
    if not shifts.height:
        raise Absent("no shift condition in the results (no dataset with a shift target was probed)")
    pairs = shifts.select("dataset", "condition").unique().sort("dataset", "condition").rows()
    style = styles(order, reference)
    fig, axes = panels(len(pairs), 2, 6.0, 0.42 * len(order) + 1.6)
    for ax, (dataset, condition) in zip(axes, pairs, strict=True):
        names = [e for e in order if e in set(shifts.filter(pl.col("dataset") == dataset)["encoder"].to_list())]
        for i, e in enumerate(names):
            clean = per_dataset.filter((pl.col("encoder") == e) & (pl.col("dataset") == dataset))["discrimination"]
            s = shifts.filter((pl.col("encoder") == e) & (pl.col("condition") == condition))["auroc"]
            if not clean.len() or not s.len():
                continue
            a, b = float(clean[0]), float(s[0])
            kw = marker_kw(style[e], 8)
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
