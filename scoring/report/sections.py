"""The page's figure sections in reading order, each with its figures (``crs.scoring.figures``), their
captions and alt text, or why a figure is not drawn."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import NamedTuple

import polars as pl

from crs.scoring import figures as fg
from crs.scoring.axes import AXES, REGISTRY
from crs.scoring.bootstrap import unit_words
from crs.scoring.figures import Absent
from crs.scoring.report.inputs import Inputs
from crs.scoring.report.markup import num
from crs.scoring.verdict import percent

AXIS_SYMBOL = {a.name: a.symbol for a in REGISTRY.values()}


class Drawn(NamedTuple):
    stem: str  # file stem under figures/
    figure: object  # matplotlib Figure
    caption: str  # what to look at
    alt: str  # what the image shows, for a reader who cannot see it


@dataclass
class Section:
    key: str
    title: str
    text: str  # what the figure shows, HTML-escaped when rendered
    figures: list[Drawn] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # why a figure is not there


def _try(section: Section, stem: str, build, caption: str, alt: str) -> None:
    try:
        section.figures.append(Drawn(stem, build(), caption, alt))
    except Absent as exc:
        section.absent.append(str(exc))


class _View(NamedTuple):
    """What every section reads from the inputs."""

    inputs: Inputs
    order: list[str]  # encoders, best CRS first
    datasets: list[str]
    conf: float  # interval confidence, percent
    unit: str  # bootstrap unit
    reference: str | None  # the reference encoder, None for the per-axis median


def sections(inputs: Inputs) -> list[Section]:
    """The page's figure sections in reading order, each holding its Figures or why they are absent."""
    s = inputs.settings
    datasets = list(s.get("datasets") or sorted(inputs.table("per_dataset")["dataset"].unique().to_list()))
    view = _View(inputs, inputs.order, datasets, 100 * s.get("bootstrap", {}).get("confidence", 0.95),
                 s.get("bootstrap", {}).get("unit", "seed"), inputs.reference)
    return [build(view) for build in SECTIONS]


def _ref_words(v: _View) -> str:
    return (f"the reference ({v.reference}) is ringed in black and labelled '(reference)'" if v.reference
            else "the reference is the per-axis median over the encoders")


def _cost(v: _View) -> Section:
    enc = v.inputs.table("encoders")
    sec = Section("cost", "Cost beside quality",
                  "CRS against what each encoder costs to run: floating-point operations per image at its input "
                  "size (counted with torch.utils.flop_counter) and the extraction throughput measured during "
                  "`crs extract` on the device named in the leaderboard.")
    listed = ", ".join(f"{r['encoder']} {num(r.get('gflops'), '.3g')} GFLOPs" for r in enc.iter_rows(named=True)
                       if r.get("gflops") is not None)
    _try(sec, "cost_quality", lambda: fg.cost_quality(enc, v.reference),
         "Look for the encoders on the cost-quality front (a dashed line where two or more make it up, named in "
         "the corner where one does): nothing else is both cheaper and better. An encoder below the front pays "
         "more for less; overlapping CRS bars mean the quality gap is not established.",
         f"Scatter plot of CRS (with {v.conf:.0f}% interval bars) against cost per encoder, log cost axis, with "
         f"the cost-quality Pareto front. {listed}.")
    return sec


FLAT = 1e-6  # an axis interval narrower than this is zero width (float32 probabilities leave ~1e-8 of noise)


def flat_intervals(encoders: pl.DataFrame) -> list[str]:
    """Symbols of the axes whose bootstrap interval has zero width for every encoder (e.g. D, C and R under a
    seed bootstrap, where every seed trains on the same images at 100% labels)."""
    out = []
    for a in AXES:
        lo, hi = f"{a}_low", f"{a}_high"
        if {lo, hi} <= set(encoders.columns) and encoders.height:
            w = (encoders[hi] - encoders[lo]).abs().drop_nulls()
            if w.len() and float(w.max()) < FLAT:
                out.append(AXIS_SYMBOL[a])
    return out


def flat_note(encoders: pl.DataFrame, settings: dict) -> str:
    """A sentence saying which intervals are zero-width and why, so that a missing bar is not read as exactness."""
    flat = flat_intervals(encoders)
    if not flat:
        return ""
    unit = settings.get("bootstrap", {}).get("unit", "seed")
    return (f"The bootstrap intervals ({unit_words(unit)}) of {', '.join(flat)} have zero width: "
            + ("at 100% labels every seed trains the probe on the same images, so resampling seeds cannot move "
               "them. " if unit == "seed" else "")
            + "This does not make them exact; `crs score --bootstrap-unit image --store STORE` resamples the test "
              "images and gives them intervals.")


def _profiles(v: _View) -> Section:
    sec = Section("profiles", "Profiles on the four axes",
                  "Each encoder's discrimination (D), calibration (C), label efficiency (L) and robustness (R), "
                  f"seed means over the comparison set with {v.conf:.0f}% bootstrap intervals; the grey dash "
                  "on each axis is the reference the q-scores are measured against. "
                  + flat_note(v.inputs.table("encoders"), v.inputs.settings))
    enc = v.inputs.table("encoders")
    weakest = "; ".join(f"{r['encoder']}: {AXIS_SYMBOL[min(AXES, key=lambda a: r[a])]}"
                        for r in enc.iter_rows(named=True)) if set(AXES) <= set(enc.columns) else ""
    _try(sec, "profiles", lambda: fg.profiles(enc, v.inputs.table("per_dataset"), v.inputs.settings),
         "Compare each point with the grey reference dash on the same axis: a point above its dash is better than "
         "the reference there; where the bar crosses the dash, the difference is not established. The axes are "
         "separate scales, so nothing joins them.",
         "Small multiples, one per encoder: four separate points with interval bars for D, C, L and R on a 0 to 1 "
         f"scale, and a grey dash for the reference on each. Lowest axis per encoder: {weakest}.")
    return sec


def _rank_change(v: _View) -> Section:
    rc = v.inputs.rank_comparison
    sec = Section("rank-change", "AUROC rank versus CRS rank",
                  "Left: rank by mean clean AUROC; right: rank by CRS. Encoders in a pair whose order the two "
                  "rankings reverse are drawn bold and coloured.")
    pairs = "; ".join(f"{a} above {b} by AUROC, below by CRS" for a, b in rc.get("reversed_pairs", [])) or "none"
    _try(sec, "rank_change", lambda: fg.rank_slope(v.inputs.table("encoders"), rc, v.reference),
         "Bold crossing lines are the pairs that a choice by AUROC alone would order the other way round.",
         f"Slope chart from AUROC rank to CRS rank for {len(v.order)} encoders. Reversed pairs: {pairs}.")
    return sec


def _pareto(v: _View) -> Section:
    sec = Section("pareto", "Pareto view",
                  "q discrimination against q calibration with their intervals; the colour and the printed value "
                  "give q robustness. Stars mark encoders no other encoder dominates on all four q-axes (so a "
                  "star may sit below another point on this two-axis view).")
    enc = v.inputs.table("encoders")
    front = enc.filter(pl.col("pareto"))["encoder"].to_list() if "pareto" in enc.columns else []
    _try(sec, "pareto", lambda: fg.pareto(enc, v.reference),
         "Up and right is better than the reference (the dashed lines at 0). Stars are not dominated on the four "
         f"axes; {_ref_words(v)}. The colour scale spans only the observed q robustness, so read the printed "
         "value, not the shade, for its size.",
         f"Scatter of q discrimination (x) against q calibration (y) with interval bars for {len(v.order)} "
         f"encoders; star markers for the non-dominated encoders ({', '.join(front) or 'none'}).")
    return sec


def _reliability(v: _View) -> Section:
    sec = Section("reliability", "Reliability diagrams",
                  "Observed accuracy against confidence in 15 equal-width bins of the top-label confidence "
                  "(multi-label: each label's max(p, 1 - p)), clean test split, probes trained on all labels; "
                  "solid before, dashed after temperature scaling fitted on the validation split; a marker's area "
                  "grows with its bin's share of the images. The histogram under each diagram counts the images "
                  "in each bin; the box gives the ECE (seed mean) before and after scaling.")
    bins = v.inputs.table("reliability")
    pm = v.inputs.table("probe_metrics")
    if not bins.height:
        sec.absent.append("no reliability bins in the results: they need the probe's stored probabilities. "
                          "Run `crs score --store STORE`, or pass --store STORE to `crs report`.")
    for d in v.datasets if bins.height else []:
        ece = fg.ece_before_after(pm, d)
        said = "; ".join(f"{e} ECE {b:.3f} before, {a:.3f} after" for e, (b, a) in ece.items()) or \
            "ECE not in the results"
        _try(sec, f"reliability_{_stem(d)}", lambda d=d: fg.reliability_diagrams(bins, d, v.order, pm, v.reference),
             f"{d}: points below the diagonal are over-confident. Judge a point by the bar under it: bins with few "
             "images are noise. The ECE box says how much temperature scaling repairs.",
             f"Reliability diagrams for {d}, one per encoder, each with a histogram of images per confidence bin. "
             f"{said}.")
    return sec


def _label_efficiency(v: _View) -> Section:
    sec = Section("label-efficiency", "Label efficiency",
                  f"Clean test AUROC against the share of training labels the probe saw; bands are {v.conf:.0f}% "
                  "seed-bootstrap intervals (the same seed draws as the CRS intervals).")
    _try(sec, "label_efficiency", lambda: fg.label_efficiency(v.inputs.table("label_efficiency"), v.order,
                                                              v.unit, v.reference),
         "The left end is the few-label regime a new clinical task starts in: a line that stays high there needs "
         "fewer labelled images. Overlapping bands are not a difference.",
         f"Line charts per dataset of AUROC against labelled share (log scale) for {len(v.order)} encoders, with "
         "interval bands.")
    return sec


def _robustness(v: _View) -> Section:
    sec = Section("robustness", "Robustness",
                  "Retention (the share of the clean, full-label above-chance AUROC that survives) against "
                  "severity: per dataset, the mean over the perturbation families (left) and each family at the "
                  "highest severity, families grouped (right); bands and bars are seed-bootstrap intervals. Then "
                  "the shift gap, clean AUROC against AUROC on the dataset's shift target. Every family's own "
                  "curve is in the appendix.")
    detail = v.inputs.table("robustness")
    by_sev = v.inputs.table("retention_by_severity")
    banded = "retention_low" in detail.columns
    for d in v.datasets:
        _try(sec, f"robustness_{_stem(d)}", lambda d=d: fg.robustness(detail, d, v.order, v.reference, by_sev),
             f"{d}: a flatter line keeps more of its AUROC as images degrade; on the right, the families where an "
             "encoder drops towards 0 are the acquisitions it cannot be trusted on."
             + ("" if banded else " (No intervals: the results folder has no run records.)")
             + (" At 100% labels the seed bootstrap has no spread, so the bands have zero width."
                if "R" in flat_intervals(v.inputs.table("encoders")) else ""),
             f"Two panels for {d}: retention against severity 1 to 5 per encoder with interval bands, and a dot "
             "plot of retention per perturbation family at the highest severity, grouped into noise, blur, "
             "intensity, compression and artefact.")
    _try(sec, "shift_gap", lambda: fg.shift_gap(v.inputs.table("per_dataset"), detail, v.order, v.reference),
         "A long bar is an encoder that loses AUROC when the images come from another site.",
         "Dumbbell chart per shifted dataset: clean AUROC (filled) and shift-target AUROC (hollow) per encoder, "
         "with the gap printed.")
    return sec


def _uncertainty(v: _View) -> Section:
    s = v.inputs.settings
    sec = Section("uncertainty", "Rank uncertainty and weight sensitivity",
                  f"How often each encoder took each CRS rank across the bootstrap replicates ({unit_words(v.unit)}); "
                  "then, for "
                  "every weighting of the three components on a grid over the simplex, which encoder has the "
                  "top CRS.")
    enc = v.inputs.table("encoders")
    p1 = "; ".join(f"{r['encoder']} first in {percent(r['p_rank1'])}" for r in enc.iter_rows(named=True)
                   if r.get("p_rank1") is not None and r["p_rank1"] == r["p_rank1"])  # not NaN
    _try(sec, "rank_distribution", lambda: fg.rank_distribution(v.inputs.table("rank_distribution"), v.order,
                                                                s.get("bootstrap", {}).get("n"), v.reference),
         "A row spread over several ranks is a rank the data do not pin down.",
         f"Heat map of the share of bootstrap replicates per encoder (rows) and CRS rank (columns). {p1}.")
    wl = v.inputs.table("weight_leaders")
    lead = "; ".join(f"{r['encoder']} leads at {100 * r['share']:.0f}% of weightings"
                     for r in wl.iter_rows(named=True)) if {"encoder", "share"} <= set(wl.columns) else ""
    _try(sec, "weight_sensitivity",
         lambda: fg.weight_map(v.inputs.table("weight_sensitivity"), v.order, s.get("weights"), v.reference),
         "The star is this run's weighting: if it sits near a colour boundary, a small change of weights changes "
         "the leader.",
         f"Map of the weight simplex coloured by the encoder with the top CRS. {lead}.")
    return sec


def _appendix(v: _View) -> Section:
    sec = Section("appendix", "Appendix: robustness per perturbation family",
                  "Every family's retention against severity, per dataset, with seed-bootstrap bands where the "
                  "run records give them.")
    detail = v.inputs.table("robustness")
    for d in v.datasets:
        _try(sec, f"robustness_grid_{_stem(d)}", lambda d=d: fg.robustness_grid(detail, d, v.order, v.reference),
             f"{d}: one small panel per family, grouped; the legend below names the encoders.",
             f"Grid of line charts for {d}: retention against severity, one panel per perturbation family.")
    return sec


SECTIONS = (_cost, _profiles, _rank_change, _pareto, _reliability, _label_efficiency, _robustness, _uncertainty,
            _appendix)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    return buf.getvalue()


def _stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
