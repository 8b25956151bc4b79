"""``report``: the score tables -> one self-contained HTML page, its figures as PNG, its tables as CSV and Parquet.

Reads what ``crs score`` wrote (RESULTS/scores/*.parquet and scores.json); recomputes
nothing the score has, except reliability bins from the store when the score was run
without one and ``store`` is given here, and, from the run records beside the scores, the
test-set sizes and seed-bootstrap intervals of the robustness retentions (the score's own
seed draw, so they pair with the CRS intervals). The page opens with the verdict, embeds
every figure as a base64 PNG with a caption and alt text, and carries one small inline
script that sorts tables on a header click; without it the page reads the same, offline,
as one file. A figure whose input is absent becomes a sentence in its section saying
what is missing and how to get it.

Pure parts: ``load`` (files -> Inputs), ``leaderboard`` / ``per_dataset_board`` / ``tables``
(Inputs -> DataFrames), ``test_sets`` / ``retention_intervals`` (run records -> DataFrames),
``verdict_sentences``, ``sections`` (Inputs -> figures), ``html`` (-> text);
``write_report`` is the thin edge that writes them.
"""

from __future__ import annotations

import base64
import html as _html
import io
import sys
import time
from dataclasses import dataclass, field
from typing import NamedTuple
from pathlib import Path

import numpy as np
import polars as pl

from crs.files import atomic_write
from crs.names import VALIDATION
from crs.scoring.axes import AXES, REGISTRY
from crs.scoring.scoreset import (
    GENERATION_KEY, MissingScores, MixedScores, read_scores_json, read_tables, scores_folder, writer_lock,
)
from crs.scoring import diagnostics, verdict
from crs.scoring.ranks import rank_desc

SPECS = {"1": "docs/crs-v1.md", "2": "docs/crs-v2.md"}  # each CRS version's specification, in the repository

HTML_NAME = "report.html"
GENERATION_META = "crs-scores-generation"  # <meta name=...> holding the scores set the page is made from
FIGURES_DIR = "figures"
TABLES_DIR = "tables"
SYMBOLS = [a.symbol for a in REGISTRY.values()]  # column heads, in AXES order
AXIS_SYMBOL = {a.name: a.symbol for a in REGISTRY.values()}
SCORE_TABLES = (
    "encoders", "per_dataset", "pareto", "weight_sensitivity", "weight_leaders", "reliability", "robustness",
    "label_efficiency", "calibration_under_shift", "rank_distribution", "probe_metrics", "diagnostics",
)  # fmt: skip
COST_COLUMNS = ("parameters", "gflops", "width", "images_per_s", "device")
MODEL_COLUMNS = ("revision", "licence", "gated")


@dataclass
class Inputs:
    settings: dict
    rank_comparison: dict
    tables: dict[str, pl.DataFrame]
    notes: list[str] = field(default_factory=list)  # what the report itself found missing or did
    generation: str | None = None  # the scores set the report is made from (scores.json's generation)
    verdict: dict | None = None  # scores.json's "verdict" (crs.scoring.verdict.build), None in older scores
    provenance: dict | None = None  # scores.json's "provenance" (crs.provenance.collect)

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())

    @property
    def order(self) -> list[str]:
        """Encoders in leaderboard order (best CRS first)."""
        return self.table("encoders")["encoder"].to_list()

    @property
    def reference(self) -> str | None:
        """The reference encoder (the zero point of every q), or None for the per-axis median."""
        enc = self.table("encoders")
        if "reference" in enc.columns and enc["reference"].fill_null(False).any():
            return enc.filter(pl.col("reference").fill_null(False))["encoder"][0]
        ref = self.settings.get("reference")
        return ref if ref in self.order else None


def load(results: Path) -> Inputs:
    """The score's outputs under RESULTS/scores, checked to be one set (``crs.scoring.scoreset``).

    MissingScores (exit 2) naming the command when absent; MixedScores (exit 2) naming
    the files when they come from different ``crs score`` runs. The set's generation is
    kept in ``Inputs.generation``; the page's meta tag and the report's own tables
    (OUT/tables/*.parquet metadata) carry it."""
    for attempt in (1, 2):
        folder = scores_folder(Path(results))
        doc = read_scores_json(folder, results)
        try:
            tables = read_tables(folder, doc, list(SCORE_TABLES), results)
            break
        except MixedScores:
            # a score that swapped its new set in while this read: read the new set once more
            now = read_scores_json(scores_folder(Path(results)), results).get("generation")
            if attempt == 2 or now == doc.get("generation"):
                raise
    if "encoders" not in tables or not tables["encoders"].height:
        raise MissingScores(f"{folder / 'encoders.parquet'} is missing or empty; re-run `crs score --results {results}`")
    return Inputs(settings=doc.get("settings", {}), rank_comparison=doc.get("rank_comparison", {}), tables=tables,
                  generation=doc["generation"], verdict=doc.get("verdict") or None,
                  provenance=doc.get("provenance") or None)


def add_reliability_from_store(inputs: Inputs, results: Path, store: str) -> None:
    """Reliability bins from the stored probabilities, when the score was run without the store."""
    if inputs.table("reliability").height:
        return
    from crs import records
    from crs.scoring.predictions import MissingPredictions, probe_metrics
    from crs.store import Store, StoreError

    try:
        opened = Store(str(store), mode="r")
        recs = records.read(results)
        enc = inputs.order
        datasets = inputs.settings.get("datasets") or sorted(inputs.table("per_dataset")["dataset"].unique())
        recs = recs.filter(pl.col("encoder").is_in(enc) & pl.col("dataset").is_in(datasets)
                           & (pl.col("condition") != VALIDATION))
        found = probe_metrics(opened, recs, enc, datasets)
    except (MissingPredictions, StoreError, records.MissingRunRecords) as exc:
        inputs.notes.append(f"reliability bins could not be read from the store {store!r}: {exc}")
        return
    if found.metrics.height and not inputs.table("probe_metrics").height:
        inputs.tables["probe_metrics"] = found.metrics
    if found.reliability.height:
        inputs.tables["reliability"] = found.reliability
        inputs.notes.append(f"reliability bins computed by the report from the store {store!r} (the score had none)")


def add_from_records(inputs: Inputs, results: Path) -> None:
    """Test-set sizes and retention intervals from RESULTS' run records; a note when there are none."""
    from crs import records

    try:
        recs = records.read(results)
    except records.MissingRunRecords as exc:
        inputs.notes.append(f"no test-set sizes or robustness intervals: {exc}")
        return
    recs = recs.filter(pl.col("encoder").is_in(inputs.order))
    inputs.tables["test_sets"] = test_sets(recs)
    b = inputs.settings.get("bootstrap", {})
    seeds = inputs.settings.get("seeds") or sorted(recs["seed"].unique().to_list())
    # the score's own intervals win when it has them
    if b.get("n") and seeds and "retention_low" not in inputs.table("robustness").columns:
        by_condition, by_severity = retention_intervals(recs, seeds, int(b["n"]), int(b.get("seed", 0)),
                                                        float(b.get("confidence", 0.95)))
        rob = inputs.table("robustness")
        if rob.height and by_condition.height:
            inputs.tables["robustness"] = rob.join(by_condition, on=["encoder", "dataset", "condition"], how="left")
        inputs.tables["retention_by_severity"] = by_severity


# ------------------------------------------------------------------ tables
BOARD = ["encoder", "reference", "crs_rank", "crs", "crs_low", "crs_high", "tier", "tie_group", "crs_diff",
         "crs_diff_low", "crs_diff_high", "rank_low", "rank_high", "p_rank1", "auroc", "auroc_rank",
         *[c for a in AXES for c in (a, f"{a}_low", f"{a}_high")], *[f"q_{a}" for a in AXES], "dominance",
         "balance", "worst_axis", "pareto", "ties_marked", *COST_COLUMNS, *MODEL_COLUMNS, "revision_expected"]


def leaderboard(encoders: pl.DataFrame) -> pl.DataFrame:
    """The overall leaderboard's columns, in the score's order (best CRS first)."""
    return encoders.select([c for c in BOARD if c in encoders.columns])


def per_dataset_board(per_dataset: pl.DataFrame) -> pl.DataFrame:
    """Per-dataset rows with AUROC (= D) and the CRS and AUROC ranks within each dataset, best CRS first."""
    if not per_dataset.height:
        return per_dataset
    frames = []
    for (dataset,), g in per_dataset.group_by("dataset", maintain_order=True):
        g = g.with_columns(
            crs_rank=pl.Series(rank_desc(g["crs"].to_numpy())),
            auroc=pl.col("discrimination"),
            auroc_rank=pl.Series(rank_desc(g["discrimination"].to_numpy())),
        )
        frames.append(g.sort(["crs", "encoder"], descending=[True, False]))
    cols = ["dataset", "encoder", "crs_rank", "crs", "auroc", "auroc_rank", *AXES, *[f"q_{a}" for a in AXES],
            "dominance", "balance", "worst_axis", "n_seeds"]
    out = pl.concat(frames)
    return out.select([c for c in cols if c in out.columns]).sort("dataset", maintain_order=True)


def _full(recs: pl.DataFrame) -> pl.DataFrame:
    return recs.filter(((pl.col("fraction") - 1.0).abs() < 1e-9) & (pl.col("condition") != VALIDATION))


def test_sets(recs: pl.DataFrame) -> pl.DataFrame:
    """Images per dataset as the run records give them: test (clean), train at 100% labels, shift target test.

    One row per (dataset, split) with ``images`` the largest count over encoders and seeds and
    ``varies`` true when they disagree (a sign of a partial or mixed run)."""
    full = _full(recs)
    if not full.height or "n_eval" not in full.columns:
        return pl.DataFrame(schema={"dataset": pl.String, "split": pl.String, "images": pl.Int64,
                                    "varies": pl.Boolean})
    kind = (pl.when(pl.col("condition") == "clean").then(pl.lit("test"))
            .when(pl.col("condition").str.starts_with("shift:"))
            .then(pl.lit("shift target ") + pl.col("condition").str.strip_prefix("shift:") + pl.lit(" (test)"))
            .otherwise(None))
    evals = full.with_columns(split=kind, images=pl.col("n_eval")).filter(pl.col("split").is_not_null())
    parts = [evals.select("dataset", "split", "images")]
    if "n_train" in full.columns:
        parts.append(full.filter(pl.col("condition") == "clean")
                     .select("dataset", split=pl.lit("train (100% labels)"), images=pl.col("n_train")))
    both = pl.concat([p.with_columns(pl.col("images").cast(pl.Int64)) for p in parts])
    order = {"test": 0, "train (100% labels)": 1}
    return (both.group_by("dataset", "split")
            .agg(pl.col("images").max(), varies=pl.col("images").n_unique() > 1)
            .with_columns(_o=pl.col("split").replace_strict(order, default=2, return_dtype=pl.Int64))
            .sort("dataset", "_o", "split").drop("_o"))


def retention_intervals(recs: pl.DataFrame, seeds: list[int], n_bootstrap: int, seed: int,
                        confidence: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seed-bootstrap percentile intervals of retention at 100% labels (docs/crs-v1.md retain, each seed's own D).

    Returns (per condition: encoder, dataset, condition, retention_low, retention_high;
    per severity, the mean over perturbation families: encoder, dataset, severity, retention,
    retention_low, retention_high). The draw is ``bootstrap.draw_seeds(len(seeds), n, seed)``,
    the score's own, so these intervals pair with the CRS intervals; a cell missing a seed
    gets null ends."""
    from crs.conditions import parse
    from crs.scoring.axes import retain
    from crs.scoring.bootstrap import draw_seeds, interval, resample_seeds, seed_weights

    full = _full(recs).filter(pl.col("seed").is_in(seeds))
    d = full.filter(pl.col("condition") == "clean").select("encoder", "dataset", "seed", d=pl.col("auroc"))
    rows = full.filter(pl.col("condition") != "clean").join(d, on=["encoder", "dataset", "seed"])
    empty = (pl.DataFrame(schema={"encoder": pl.String, "dataset": pl.String, "condition": pl.String,
                                  "retention_low": pl.Float64, "retention_high": pl.Float64}),
             pl.DataFrame(schema={"encoder": pl.String, "dataset": pl.String, "severity": pl.Int64,
                                  "retention": pl.Float64, "retention_low": pl.Float64,
                                  "retention_high": pl.Float64}))
    if not rows.height:
        return empty
    conds = rows["condition"].unique().to_list()
    sev = {c: parse(c).severity for c in conds}
    rows = rows.with_columns(retention=retain(pl.col("auroc"), pl.col("d")),
                             severity=pl.col("condition").replace_strict(sev, return_dtype=pl.Int64))
    w = seed_weights(draw_seeds(len(seeds), n_bootstrap, seed), len(seeds))  # [replicate, seed]

    def cells(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
        keyed = frame.select(*keys).unique().sort(keys)
        grid = keyed.join(pl.DataFrame({"seed": seeds}, schema={"seed": frame.schema["seed"]}), how="cross")
        a = grid.join(frame, on=[*keys, "seed"], how="left", maintain_order="left")["retention"]
        a = a.to_numpy().astype(float).reshape(keyed.height, len(seeds))  # [cell, seed]
        low, high = interval(resample_seeds(w, np.nan_to_num(a)), confidence)  # [cell]
        bad = np.isnan(a).any(axis=1)
        return keyed.with_columns(retention=pl.Series(np.nanmean(np.where(bad[:, None], np.nan, a), axis=1)
                                                      if a.size else []),
                                  retention_low=pl.Series(np.where(bad, np.nan, low)),
                                  retention_high=pl.Series(np.where(bad, np.nan, high))).fill_nan(None)

    by_condition = cells(rows.select("encoder", "dataset", "condition", "seed", "retention"),
                         ["encoder", "dataset", "condition"]).drop("retention")
    perturbed = rows.filter(pl.col("severity").is_not_null())
    by_severity = (cells(perturbed.group_by("encoder", "dataset", "severity", "seed").agg(pl.col("retention").mean()),
                         ["encoder", "dataset", "severity"]) if perturbed.height else empty[1])
    return by_condition, by_severity


def tables(inputs: Inputs) -> dict[str, pl.DataFrame]:
    """Every table the page shows or a figure draws, by file name."""
    from crs.scoring import figures

    out = {
        "leaderboard": leaderboard(inputs.table("encoders")),
        "leaderboard_per_dataset": per_dataset_board(inputs.table("per_dataset")),
        "reversed_pairs": pl.DataFrame(
            {"auroc_above": [p[0] for p in inputs.rank_comparison.get("reversed_pairs", [])],
             "crs_above": [p[1] for p in inputs.rank_comparison.get("reversed_pairs", [])]},
            schema={"auroc_above": pl.String, "crs_above": pl.String},
        ),
    }
    for name in ("diagnostics", "test_sets", "rank_distribution", "weight_leaders", "label_efficiency", "robustness",
                 "retention_by_severity", "calibration_under_shift"):
        if inputs.table(name).height:
            out[name] = inputs.table(name)
    if inputs.table("reliability").height:
        out["reliability_pooled"] = figures.reliability_bins(inputs.table("reliability"))
    return out


# ----------------------------------------------------------------- verdict
def _iv(lo, hi, spec: str = ".1f") -> str:
    return f"[{_num(lo, spec)}, {_num(hi, spec)}]"


def fallback_sentences(inputs: Inputs) -> list[str]:
    """The verdict rebuilt from the stored tables, for scores written before scores.json had a "verdict".

    The same ``crs.scoring.verdict`` rules as ``crs score`` uses, so it says only what the
    paired intervals (or, in the oldest scores, the tier column) allow."""
    board = inputs.table("encoders")
    if not board.height:
        return []
    built = verdict.build(board, inputs.table("weight_leaders"), inputs.table("weight_grid"), inputs.settings)
    return verdict.sentences(built)


def verdict_sentences(inputs: Inputs) -> tuple[list[str], bool]:
    """(sentences, from_score): the score's own verdict when the scores hold one, else ``fallback_sentences``."""
    if inputs.verdict:
        try:
            said = [str(x) for x in verdict.sentences(inputs.verdict)]
            if said:
                return said, True
        except (KeyError, TypeError, ValueError) as exc:
            inputs.notes.append(f"the score's verdict could not be read ({type(exc).__name__}: {exc}); the "
                                "verdict above is built from the leaderboard")
    return fallback_sentences(inputs), False


# ----------------------------------------------------------------- figures
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
    from crs.scoring.figures import Absent

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
    from crs.scoring import figures as fg

    enc = v.inputs.table("encoders")
    sec = Section("cost", "Cost beside quality",
                  "CRS against what each encoder costs to run: floating-point operations per image at its input "
                  "size (counted with torch.utils.flop_counter) and the extraction throughput measured during "
                  "`crs extract` on the device named in the leaderboard.")
    listed = ", ".join(f"{r['encoder']} {_num(r.get('gflops'), '.3g')} GFLOPs" for r in enc.iter_rows(named=True)
                       if r.get("gflops") is not None)
    _try(sec, "cost_quality", lambda: fg.cost_quality(enc, v.reference),
         "Look for encoders on the dashed front: nothing else is both cheaper and better. An encoder below the "
         "front pays more for less; overlapping CRS bars mean the quality gap is not established.",
         f"Scatter plot of CRS (with {v.conf:.0f}% interval bars) against cost per encoder, log cost axis, with "
         f"the cost-quality Pareto front as a dashed step line. {listed}.")
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
    return (f"The {unit}-bootstrap intervals of {', '.join(flat)} have zero width: "
            + ("at 100% labels every seed trains the probe on the same images, so resampling seeds cannot move "
               "them. " if unit == "seed" else "")
            + "This does not make them exact; `crs score --bootstrap-unit image --store STORE` resamples the test "
              "images and gives them intervals.")


def _profiles(v: _View) -> Section:
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

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
    from crs.scoring import figures as fg

    s = v.inputs.settings
    sec = Section("uncertainty", "Rank uncertainty and weight sensitivity",
                  f"How often each encoder took each CRS rank across the {v.unit} bootstrap replicates; then, for "
                  "every weighting of the three components on a grid over the simplex, which encoder has the "
                  "top CRS.")
    enc = v.inputs.table("encoders")
    p1 = "; ".join(f"{r['encoder']} first in {100 * r['p_rank1']:.0f}%" for r in enc.iter_rows(named=True)
                   if r.get("p_rank1") is not None)
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
    from crs.scoring import figures as fg

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


# -------------------------------------------------------------------- HTML
def _e(value) -> str:
    return _html.escape(str(value), quote=True)


def _num(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    if spec.endswith("d"):  # a count read back as a float (a column with nulls) still prints as one
        value = int(round(float(value)))
    return format(value, spec)


def _version(settings: dict) -> str:
    """The CRS version the scores record; scores written before versions existed are v1."""
    v = str(settings.get("crs_version") or "1")
    return v if v in SPECS else "1"


def _spec_link(version: str) -> str:
    """The version's page as a link where this installation runs from a checkout that holds it, else its path."""
    import crs

    page = Path(crs.__file__).resolve().parents[1] / SPECS[version]
    code = f"<code>{_e(SPECS[version])}</code>"
    return f'<a href="{_e(page.as_uri())}">{code}</a>' if page.is_file() else code


def _q_words(version: str) -> str:
    if version == "1":
        return ("q = (x − x_ref) / (1 − x_ref) above the reference and (x − x_ref) / x_ref below it, so q lies in "
                "[−1, 1] and the reference scores 0;")
    return ("q = (x − x_ref) / max(1 − x_ref, 0.25) above the reference and (x − x_ref) / max(x_ref, 0.25) below "
            "it, so q lies in [−1, 1], the reference scores 0 and no axis moves q by more than 4 times its change; "
            "C is 1 − the debiased calibration error (Kumar et al. 2019); dominance is a degree that grows with "
            "the margins, so CRS moves continuously;")


def settings_block(s: dict, provenance: dict | None = None) -> str:
    b = s.get("bootstrap", {})
    w = s.get("weights", {})
    rows = [
        ("CRS version", s.get("crs_version")),
        ("reference", s.get("reference")),
        ("weights", ", ".join(f"{k} {v:.3g}" for k, v in w.items())),
        ("bootstrap", f"{b.get('n')} replicates, unit {b.get('unit')}, seed {b.get('seed')}, "
                      f"{100 * b.get('confidence', 0.95):.0f}% percentile intervals"
                      + (f" (requested unit {b['requested_unit']})" if "requested_unit" in b else "")),
        ("seeds", ", ".join(str(x) for x in s.get("seeds", []))),
        ("label fractions", ", ".join(f"{100 * f:g}%" for f in s.get("fractions", []))),
        ("datasets", ", ".join(s.get("datasets", []))),
    ]
    ex = s.get("excluded", {})
    if ex.get("encoders") or ex.get("datasets"):
        rows.append(("left out (not a full grid)", f"encoders: {', '.join(ex.get('encoders', [])) or 'none'}; "
                                                  f"datasets: {', '.join(ex.get('datasets', [])) or 'none'}"))
    if provenance:
        rows.append(("scored by", f"crs-bench {provenance.get('crs_bench', '?')}, git "
                                  f"{str(provenance.get('git_commit') or 'unknown')[:12]}, "
                                  f"{provenance.get('created', '')}, Python {provenance.get('python', '?')}"))
    return "<dl class='settings' id='settings'>" + "".join(
        f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def _td(cls: str, text, sort=None) -> str:
    key = "" if sort is None or (isinstance(sort, float) and not np.isfinite(sort)) else sort
    return f"<td class='{cls}' data-sort='{_e(key)}'>{_e(text)}</td>"


def _th(head: str, title: str = "") -> str:
    return f"<th scope='col'{f' title={chr(39)}{_e(title)}{chr(39)}' if title else ''}>{_e(head)}</th>"


def _has(board: pl.DataFrame, col: str) -> bool:
    return col in board.columns and board[col].is_not_null().any()


def _tier_text(r: dict) -> str:
    if r.get("tie_group"):
        return str(r["tie_group"])
    return "★ leading" if r["tier"] else "no tier (no interval)" if r["tier"] is None else ""


def _crs_text(r: dict, reference: str | None) -> str:
    return f"{_num(r['crs'], '.1f')} (reference)" if r["encoder"] == reference else _num(r["crs"], ".1f")


# Cost and identity columns of the leaderboard, shown when the scores carry them (the store records them).
_BOARD_META = [
    ("parameters", "parameters (M)", lambda r: (_num(r["parameters"] / 1e6 if r["parameters"] is not None
                                                     else None, ".1f"), r["parameters"])),
    ("gflops", "GFLOPs / image", lambda r: (_num(r["gflops"], ".3g"), r["gflops"])),
    ("width", "embedding width", lambda r: (_num(r["width"], "d"), r["width"])),
    ("images_per_s", "images/s (extract)", lambda r: (_num(r["images_per_s"], ".1f"), r["images_per_s"])),
    ("device", "device", lambda r: (r["device"] or "", r["device"] or "")),
    ("revision", "revision", lambda r: (str(r["revision"] or "")[:12], r["revision"] or "")),
    ("licence", "licence", lambda r: (r["licence"] or "", r["licence"] or "")),
    ("gated", "gated", lambda r: ("n/a" if r["gated"] is None else "yes" if r["gated"] else "no", str(r["gated"]))),
]
_BOARD_HEADS = {"rank": "rank", "encoder": "encoder", "crs": "CRS", "ci": "95% interval", "crs-diff": "CRS − leader",
                "tier": "tier", "rank-ci": "rank interval", "p1": "P(rank 1)", "auroc": "AUROC",
                "auroc-rank": "AUROC rank", "pareto": "Pareto",
                **{a: sym for a, sym in zip(AXES, SYMBOLS, strict=True)},
                **{f"q-{a}": f"q {sym}" for a, sym in zip(AXES, SYMBOLS, strict=True)},
                **{c: head for c, head, _ in _BOARD_META}}


def _board_columns(board: pl.DataFrame, ref: str | None) -> list[tuple[str, str, object]]:
    """(key, header tooltip, row -> (text, sort value)) for each leaderboard column these scores can fill."""
    cols: list[tuple[str, str, object]] = [
        ("rank", "crs rank (1 = best)", lambda r: (_num(r["crs_rank"], "g"), r["crs_rank"])),
        ("encoder", "", lambda r: (r["encoder"], r["encoder"])),
        ("crs", "CRS (50 = reference level)", lambda r: (_crs_text(r, ref), r["crs"])),
        ("ci", "95% interval (none for the reference: it is the zero point)",
         lambda r: ("reference" if r["encoder"] == ref and r.get("crs_low") is None
                    else _iv(r.get("crs_low"), r.get("crs_high")), r.get("crs_low"))),
    ]
    if _has(board, "crs_diff"):
        cols.append(("crs-diff", "CRS minus the leader's, paired 95% interval",
                     lambda r: (f"{_num(r['crs_diff'], '+.1f')} "
                                f"{_nb(_iv(r.get('crs_diff_low'), r.get('crs_diff_high'), '+.1f'))}", r["crs_diff"])))
    cols += [
        ("tier", "leading tier: cannot be separated from the top CRS", lambda r: (_tier_text(r), _tier_text(r))),
        ("rank-ci", "rank interval", lambda r: (f"{_num(r['rank_low'], 'g')}–{_num(r['rank_high'], 'g')}",
                                                r["rank_low"])),
        ("p1", "P(rank 1)", lambda r: (_num(r["p_rank1"], ".2f"), r["p_rank1"])),
        ("auroc", "AUROC", lambda r: (_num(r["auroc"], ".3f") + diagnostics.mark(r, "D"), r["auroc"])),
        ("auroc-rank", "AUROC rank", lambda r: (_num(r["auroc_rank"], "g"), r["auroc_rank"])),
    ]
    for a, sym in zip(AXES, SYMBOLS, strict=True):
        cols.append((a, f"{sym}: {a.replace('_', ' ')}, with its interval",
                     lambda r, a=a, sym=sym: (_num(r[a], ".3f") + diagnostics.mark(r, sym)
                                              + (f" {_nb(_iv(r.get(f'{a}_low'), r.get(f'{a}_high'), '.2f'))}"
                                                 if r.get(f"{a}_low") is not None else ""), r[a])))
    cols.append(("pareto", "Pareto", lambda r: ("yes" if r.get("pareto") else "", int(bool(r.get("pareto"))))))
    return cols + [(c, head, f) for c, head, f in _BOARD_META if _has(board, c)]


def _nb(text: str) -> str:
    """``text`` that a narrow cell breaks before or after, never inside (an interval keeps its line)."""
    return text.replace(" ", "\u00a0")


def _q_columns(board: pl.DataFrame) -> list[tuple[str, str, object]]:
    """The q-scores and CRS components, a table of their own below the leaderboard (so that the leaderboard
    fits a laptop's width without scrolling sideways)."""
    cols = [("encoder", "", lambda r: (r["encoder"], r["encoder"]))]
    cols += [(f"q-{a}", f"q {sym}: {a.replace('_', ' ')} relative to the reference (0)",
              lambda r, a=a: (_num(r[f"q_{a}"], "+.3f"), r[f"q_{a}"])) for a, sym in zip(AXES, SYMBOLS, strict=True)]
    cols += [(c, c.replace("_", " "), lambda r, c=c: (_num(r[c], ".3f"), r[c]))
             for c in ("dominance", "balance", "worst_axis") if c in board.columns]
    return cols


def q_html(board: pl.DataFrame) -> str:
    """The q-scores and components of the overall comparison set, sortable like the leaderboard."""
    if not board.height or not all(f"q_{a}" in board.columns for a in AXES):
        return ""
    cols = _q_columns(board)
    out = ["<p>Each axis relative to the reference (q = 0 at its level, +1 at the top of the axis) and the "
           "three CRS components.</p><div class='scroll'><table id='qscores' class='board sortable'><thead><tr>",
           *[_th(_BOARD_HEADS.get(c, c.replace("_", " ")), title) for c, title, _ in cols], "</tr></thead><tbody>"]
    for r in board.iter_rows(named=True):
        out.append(f"<tr class='row'>{''.join(_td(c, *f(r)) for c, _, f in cols)}</tr>")
    return "".join(out) + "</tbody></table></div>"


def diagnostics_html(health: pl.DataFrame, board: pl.DataFrame) -> str:
    """The probe diagnostics beside the leaderboard (``crs.scoring.diagnostics.probe_health``): features left
    out, the largest standardised value and the tied conditions, per (encoder, dataset)."""
    if not health.height:
        return ""
    marked = "ties_marked" in board.columns and any(board["ties_marked"].fill_null(""))
    out = ["<h3 id='diagnostics'>Probe diagnostics</h3><p>What can make an axis untrustworthy, per encoder and "
           "dataset: features the probe left out (constant on the training split), the largest standardised "
           "feature value of any image (clean test, and over every condition), and every condition whose share "
           "of tied test scores exceeds 5 %."
           + (f" {diagnostics.TIE_MARK} in the leaderboard marks an axis value computed from AUROCs with more "
              "than 20 % tied scores; the verdict's notes name them." if marked else "") + "</p>",
           "<div class='scroll'><table id='diagnostics-table' class='board'><thead><tr>",
           *[_th(h) for h in ("encoder", "dataset", "features left out", "largest |z| clean",
                              "largest |z| (condition)", "tied test scores > 5 %")], "</tr></thead><tbody>"]
    for r in health.iter_rows(named=True):
        worst = (f"{_num(r.get('max_scaled'), '.1f')} ({r.get('max_scaled_condition')})"
                 if r.get("max_scaled") is not None else "n/a")
        out.append("<tr>" + "".join(_td(c, t) for c, t in (
            ("encoder", r["encoder"]), ("dataset", r["dataset"]), ("num", _num(r.get("features_left_out"), "d")),
            ("num", _num(r.get("max_scaled_clean"), ".1f")), ("num", worst), ("text", r.get("tied") or "none")))
            + "</tr>")
    return "".join(out) + "</tbody></table></div>"


def _revision_expected(board: pl.DataFrame) -> bool:
    """Whether some encoder of the board lacks a revision it should have: pretrained hub weights (scores
    that do not say count as expecting one); random-weight and built-in encoders have none to record."""
    if "revision_expected" not in board.columns:
        return True
    lacking = board["revision"].is_null() if "revision" in board.columns else pl.Series([True] * board.height)
    return bool((lacking & board["revision_expected"].fill_null(True)).any())


def board_html(board: pl.DataFrame, reference: str | None = None) -> str:
    """The overall leaderboard as a sortable table: quality, then cost, then the model's identity."""
    ref = reference
    if "reference" in board.columns and board["reference"].fill_null(False).any():
        ref = board.filter(pl.col("reference").fill_null(False))["encoder"][0]
    cols = _board_columns(board, ref)
    out = ["<div class='scroll'><table id='leaderboard' class='board sortable'><thead><tr>",
           *[_th(_BOARD_HEADS[c], title) for c, title, _ in cols], "</tr></thead><tbody>"]
    for r in board.iter_rows(named=True):
        cells = "".join(_td(c, *f(r)) for c, _, f in cols)
        out.append(f"<tr class='row{' reference' if r['encoder'] == ref else ''}' data-encoder='{_e(r['encoder'])}'>"
                   f"{cells}</tr>")
    out.append("</tbody></table></div>")
    missing = [c for c, *_ in _BOARD_META if not _has(board, c) and (c != "revision" or _revision_expected(board))]
    if missing:
        out.append(f"<p class='absent' id='no-metadata'>Not in these scores: {_e(', '.join(missing))}. The store "
                   "records cost (parameters, FLOPs, width, throughput, device) and the model's revision, licence "
                   "and gated status when it is extracted by a crs that measures them; re-run `crs extract` and "
                   "`crs score` to show them here (random-weight and built-in encoders have no hub revision: "
                   "theirs stays empty).</p>")
    return "".join(out)


def scale_note(board: pl.DataFrame, settings: dict, reference: str | None) -> str:
    """What a CRS of 50 means, with this run's reference and its own score (docs/crs-v1.md section 3)."""
    ref_row = board.filter(pl.col("encoder") == reference) if reference else pl.DataFrame()
    who = (f"the reference encoder {reference}" if reference else "the per-axis median over the encoders")
    own = (f" Here {reference} itself scores {_num(ref_row['crs'][0], '.1f')}." if ref_row.height else "")
    return ("<p id='scale'><b>Reading the scale.</b> Every q-score is measured against " + _e(who)
            + ": q = 0 is the reference, so the reference is the zero point of the scale. An encoder equal to "
            "the reference on every axis (q = 0), dominating as many encoders as dominate it, scores CRS 50; "
            "above 50 is better than the reference on balance, below 50 worse. CRS is a relative score of this "
            "comparison set, not a probability or an accuracy." + _e(own) + "</p>")


def _no_tier_note(board: pl.DataFrame) -> str:
    """A sentence under the board when the bootstrap left no interval, so no tier was assigned."""
    if "tier" not in board.columns or not board["tier"].is_null().any():
        return ""
    return ("<p class='absent' id='no-tier'>No leading tier: some bootstrap replicates have no CRS (a test split "
            "too small for the bootstrap unit), so the intervals are empty and no tier is assigned; see the "
            "warnings at the end of the page.</p>")


def per_dataset_html(board: pl.DataFrame) -> str:
    if not board.height:
        return "<p class='absent'>No per-dataset scores in the results.</p>"
    parts = []
    head = ["rank", "encoder", "CRS", "AUROC", "AUROC rank", *SYMBOLS, *[f"q {x}" for x in SYMBOLS], "seeds"]
    for (dataset,), g in board.group_by("dataset", maintain_order=True):
        parts.append(f"<h4>{_e(dataset)}</h4><table class='board per-dataset sortable' data-dataset='{_e(dataset)}'>"
                     "<thead><tr>" + "".join(_th(h) for h in head) + "</tr></thead><tbody>")
        for r in g.iter_rows(named=True):
            cells = [(_num(r["crs_rank"], "g"), r["crs_rank"]), (r["encoder"], r["encoder"], "encoder"),
                     (_num(r["crs"], ".1f"), r["crs"]), (_num(r["auroc"], ".3f"), r["auroc"]),
                     (_num(r["auroc_rank"], "g"), r["auroc_rank"]), *[(_num(r[a], ".3f"), r[a]) for a in AXES],
                     *[(_num(r[f"q_{a}"], "+.3f"), r[f"q_{a}"]) for a in AXES],
                     (_num(r.get("n_seeds"), "d"), r.get("n_seeds"))]
            parts.append("<tr>" + "".join(_td(c[2] if len(c) > 2 else "c", c[0], c[1]) for c in cells) + "</tr>")
        parts.append("</tbody></table>")
    return "".join(parts)


def test_sets_html(sizes: pl.DataFrame) -> str:
    """Images per dataset and split, from the run records."""
    if not sizes.height:
        return ("<p class='absent' id='no-test-sets'>Test-set sizes are not known: the results folder has no "
                "run records (they are written by `crs probe`).</p>")
    out = ["<table id='test-sets' class='board sortable'><thead><tr>", _th("dataset"), _th("split"),
           _th("images"), "</tr></thead><tbody>"]
    for r in sizes.iter_rows(named=True):
        flag = " (differs between runs)" if r["varies"] else ""
        out.append("<tr>" + _td("dataset", r["dataset"], r["dataset"]) + _td("split", r["split"], r["split"])
                   + _td("images", f"{_num(r['images'], 'd')}{flag}", r["images"]) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def verdict_html(sentences: list[str], from_score: bool) -> str:
    if not sentences:
        return "<section id='verdict'><p class='absent'>No verdict: the scores hold no encoders.</p></section>"
    src = ("" if from_score else "<p class='source'>Built from the leaderboard's tier, P(rank 1) and the weight "
           "grid (these scores carry no verdict of their own; re-run <code>crs score</code> for it).</p>")
    return ("<section id='verdict' class='verdict'><h2>Verdict</h2><ul>"
            + "".join(f"<li>{_e(x)}</li>" for x in sentences) + "</ul>" + src + "</section>")


def methods(s: dict, rc: dict) -> str:
    """The methods section, generated from the settings."""
    b = s.get("bootstrap", {})
    w = s.get("weights", {})
    ref = s.get("reference", "median")
    ref_text = ("the per-axis median over the encoders of each dataset" if ref == "median"
                else f"the encoder {ref}")
    unit = b.get("unit", "seed")
    unit_text = {
        "seed": "resamples the probe seeds (each seed is one draw of the label subsets), the same draw for every "
                "encoder and dataset",
        "image": "resamples the test images of every dataset, the same indices for every encoder, from the "
                 "stored probabilities",
        "both": "resamples the probe seeds and the test images together, each draw shared by every encoder",
    }.get(unit, unit)
    fr = [f for f in s.get("fractions", []) if f < 1]
    paras = [
        f"<p>Each encoder's frozen embeddings were probed with logistic regression on {len(s.get('datasets', []))} "
        f"dataset(s) ({_e(', '.join(s.get('datasets', [])))}) with {len(s.get('seeds', []))} seed(s). Four axes "
        "are computed per encoder, dataset and seed, all in [0, 1] and higher-better: <b>D</b>, the macro "
        "one-vs-rest AUROC (mean per-label AUROC for multi-label tasks) on the clean test split with all "
        "training labels; <b>C</b> = 1 − ECE (15 equal-width bins on the top-label confidence); <b>L</b>, the "
        "mean retained above-chance AUROC over the label fractions below 100% ("
        + _e(", ".join(f"{100 * f:g}%" for f in fr) or "none") + "); <b>R</b>, the mean retention over the "
        "perturbation families and severities, averaged with the retention on the shift target where the "
        "dataset has one. Retention is clip((a − 0.5) / (D − 0.5), 0, 1).</p>",
        f"<p>Each axis is scored against {_e(ref_text)}: " + _q_words(_version(s)) + " the overall q is the "
        "mean over the datasets of the comparison set (the encoders and datasets where every encoder has "
        "every dataset). From the q-profile come dominance (the Pareto dominance balance over the other "
        "encoders, mapped to [0, 1]), profile balance (the geometric mean of (q + 1) / 2) and the worst axis "
        f"((min q + 1) / 2). CRS v{_e(s.get('crs_version'))} = 100 × ("
        + _e(" + ".join(f"{v:.3g} · {k}" for k, v in w.items())) + ").</p>",
        f"<p>Uncertainty: a paired bootstrap with {_e(b.get('n'))} replicates (seed {_e(b.get('seed'))}) "
        f"{_e(unit_text)}, and recomputes q, every component and the ranks in each replicate. Intervals are "
        f"{100 * b.get('confidence', 0.95):.0f}% percentile intervals. The leading tier (★) is the top CRS and "
        "every encoder whose paired CRS difference to it has an interval containing 0. AUROC and CRS rankings "
        f"are compared by the pairs they reverse ({_e(rc.get('discordant_pairs'))} of {_e(rc.get('pairs'))} "
        f"here) and Kendall's tau-b ({_e(_num(rc.get('kendall_tau_b'), '.2f'))}).</p>",
        f"<p>Definitions: the CRS v{_e(_version(s))} specification, {_spec_link(_version(s))} in the CRS-Bench "
        "repository. Every "
        "number on this page is read from the files <code>crs score</code> wrote; <code>tables/</code> beside "
        "this page holds them in full precision as CSV and Parquet, <code>figures/</code> the figures as PNG.</p>",
    ]
    return "".join(paras)


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1320px;
padding:1.2em 2em;color:#1a1a1a;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{margin-top:1.8em;border-bottom:2px solid #0072B2;padding-bottom:.2em}
div.scroll{overflow-x:auto} table.board{border-collapse:collapse;font-size:.84em;margin:.6em 0 1em}
table.board th,table.board td{padding:.3em .42em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
table.board td.encoder{text-align:left;font-weight:600} table.board th:nth-child(2){text-align:left}
#leaderboard td.discrimination,#leaderboard td.calibration,#leaderboard td.label_efficiency,
#leaderboard td.robustness,#leaderboard td.crs-diff{white-space:normal}
table.board td.split,table.board td.dataset{text-align:left}
table.board thead th{background:#eef4fa} td.tier{color:#0072B2;font-weight:700}
table.sortable thead th{cursor:pointer} table.sortable th[aria-sort=ascending]::after{content:' ▲'}
table.sortable th[aria-sort=descending]::after{content:' ▼'} tr.reference td{background:#f4f4f4}
section.verdict{background:#eef6ee;border-left:5px solid #009E73;padding:.2em 1.2em .6em;margin:1em 0}
section.verdict h2{border:0;margin-top:.4em} section.verdict li{margin:.25em 0;font-size:1.04em}
p.source{font-size:.85em;color:#555}
dl.settings{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;background:#f6f6f6;
padding:.8em 1em;border-radius:6px} dl.settings dt{font-weight:600} dl.settings dd{margin:0}
figure{margin:1em 0} figure img{max-width:100%;height:auto;border:1px solid #e3e3e3}
figcaption{font-size:.92em;color:#333;margin-top:.3em} p.absent{background:#fff4e0;border-left:4px solid #E69F00;
padding:.5em .8em} .notes li{color:#7a4b00} nav a{margin-right:1em}
"""

# Sorts a table.sortable on a header click (numbers by data-sort, text otherwise; click again to reverse).
# The page reads the same without it: every table is in the HTML in the score's order.
SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('thead th').forEach(function(th,i){
  th.tabIndex=0;th.title=(th.title?th.title+' ':'')+'(click to sort)';
  var go=function(){
   var dir=th.getAttribute('aria-sort')==='ascending'?'descending':'ascending';
   t.querySelectorAll('thead th').forEach(function(h){h.removeAttribute('aria-sort');});
   th.setAttribute('aria-sort',dir);
   var key=function(r){var c=r.cells[i];if(!c)return '';var s=c.hasAttribute('data-sort')?c.getAttribute('data-sort'):
    c.textContent.trim();var n=Number(s);return s!==''&&!isNaN(n)?n:s.toLowerCase();};
   var rows=Array.prototype.slice.call(t.tBodies[0].rows);
   rows.sort(function(a,b){var x=key(a),y=key(b),nx=typeof x==='number',ny=typeof y==='number';
    var c=nx&&ny?x-y:nx?-1:ny?1:x<y?-1:x>y?1:0;if(x===''&&y!=='')return 1;if(y===''&&x!=='')return -1;
    return dir==='ascending'?c:-c;});
   rows.forEach(function(r){t.tBodies[0].appendChild(r);});};
  th.addEventListener('click',go);
  th.addEventListener('keydown',function(ev){if(ev.key==='Enter'||ev.key===' '){ev.preventDefault();go();}});
 });
});
"""


def _figure_html(sec: Section, d: Drawn, data: bytes) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return (f"<figure id='fig-{_e(d.stem)}'><img src='data:image/png;base64,{b64}' alt='{_e(d.alt)}'>"
            f"<figcaption><b>{_e(sec.title)}.</b> {_e(d.caption)} <span class='file'>(figures/{_e(d.stem)}.png)"
            "</span></figcaption></figure>")


def html(inputs: Inputs, board: pl.DataFrame, per_board: pl.DataFrame, secs: list[Section],
         images: dict[str, bytes], sizes: pl.DataFrame | None = None) -> str:
    s, rc = inputs.settings, inputs.rank_comparison
    said, from_score = verdict_sentences(inputs)
    main_secs = [x for x in secs if x.key != "appendix"]
    appendix = [x for x in secs if x.key == "appendix"]
    nav = "".join(f"<a href='#{k}'>{_e(t)}</a>" for k, t in
                  [("verdict", "Verdict"), ("leaderboard-section", "Leaderboard"),
                   *[(x.key, x.title) for x in main_secs], ("methods", "Methods"),
                   *[(x.key, "Appendix") for x in appendix]])
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<link rel='icon' href='data:,'>",
        f"<meta name='{GENERATION_META}' content='{_e(inputs.generation or '')}'>",
        f"<title>CRS-Bench report: {len(inputs.order)} encoders</title><style>{CSS}</style></head><body>",
        "<h1>CRS-Bench report</h1>",
        f"<p>Clinical Reliability Score (CRS v{_e(s.get('crs_version'))}) of {len(inputs.order)} encoders on "
        f"{_e(', '.join(s.get('datasets', [])))}.</p>",
        f"<nav>{nav}</nav>",
        verdict_html(said, from_score),
        "<h2 id='leaderboard-section'>Leaderboard</h2>",
        scale_note(board, s, inputs.reference),
        "<h3>Overall (comparison set)</h3>", board_html(board, inputs.reference), _no_tier_note(board),
        "<h3>q-scores and components</h3>" + q_html(board) + diagnostics_html(inputs.table("diagnostics"), board),
        (f"<p class='absent' id='flat-intervals'>{_e(flat_note(board, s))}</p>" if flat_intervals(board) else ""),
        f"<p>AUROC vs CRS: {_e(rc.get('discordant_pairs'))} of {_e(rc.get('pairs'))} pairs reversed"
        + (" (" + _e("; ".join(f"{a} above {b} by AUROC, below by CRS" for a, b in rc.get("reversed_pairs", [])))
           + ")" if rc.get("reversed_pairs") else "")
        + f"; mean |rank shift| {_e(_num(rc.get('mean_abs_rank_shift'), '.2f'))}; Kendall tau-b "
          f"{_e(_num(rc.get('kendall_tau_b'), '.2f'))}. Click a column head to sort.</p>",
        "<h3>Test-set sizes</h3><p>Images each probe was evaluated on (and trained on at 100% labels), per "
        "dataset; a small test split gives wide intervals.</p>",
        test_sets_html(sizes if sizes is not None else pl.DataFrame()),
        "<h3>Per dataset</h3><p>Each dataset alone as the comparison set; ranks are within the dataset. The "
        "bootstrap intervals and the tier are computed for the overall comparison set only.</p>",
        per_dataset_html(per_board),
        "<h3>Settings</h3>", settings_block(s, inputs.provenance),
        f"<p class='generation'>Made from the scores set {_e(inputs.generation)} (<code>crs score</code>'s "
        "scores.json, which names the set).</p>",
    ]

    def render(sec: Section) -> None:
        parts.append(f"<h2 id='{_e(sec.key)}'>{_e(sec.title)}</h2><p>{_e(sec.text)}</p>")
        for d in sec.figures:
            parts.append(_figure_html(sec, d, images[d.stem]))
        for why in sec.absent:
            parts.append(f"<p class='absent'>Not drawn: {_e(why)}</p>")

    for sec in main_secs:
        render(sec)
    parts.append("<h2 id='methods'>Methods</h2>" + methods(s, rc))
    for sec in appendix:
        render(sec)
    warnings = [*s.get("warnings", []), *inputs.notes]
    if warnings:
        parts.append("<h3>Warnings from scoring and reporting</h3><ul class='notes'>"
                     + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")
    parts.append(f"<script>{SORT_SCRIPT}</script></body></html>\n")
    return "".join(parts)


def page_generation(page: Path) -> str | None:
    """The scores generation a written report.html was made from (its meta tag), or None (absent, or older)."""
    import re

    try:
        head = Path(page).read_text(encoding="utf-8")[:4096]
    except (OSError, UnicodeDecodeError):
        return None
    m = re.search(rf"<meta name='{GENERATION_META}' content='([^']*)'>", head)
    return (m.group(1) or None) if m else None


# -------------------------------------------------------------------- edge
def remove_stale_temporaries(out: Path) -> list[Path]:
    """Delete the temporary files (``crs.files.atomic_write``'s ``.NAME.*.tmp``) a killed report left in
    OUT, OUT/figures and OUT/tables; called under the report's writer lock, so none is another run's."""
    gone = []
    for folder in (out, out / FIGURES_DIR, out / TABLES_DIR):
        for f in folder.glob(".*.tmp") if folder.is_dir() else ():
            f.unlink(missing_ok=True)
            gone.append(f)
    return gone


def _write_figures(out: Path, secs: list, quiet: bool) -> tuple[dict, list[str]]:
    """Render and write each figure as it comes, each file whole: (PNG bytes by stem, paths)."""
    (out / FIGURES_DIR).mkdir(parents=True, exist_ok=True)
    images, paths = {}, []
    for sec in secs:
        for stem, fig, *_ in sec.figures:
            images[stem] = png(fig)
            path = out / FIGURES_DIR / f"{stem}.png"
            atomic_write(path, lambda p, b=images[stem]: p.write_bytes(b))
            paths.append(str(path))
            if not quiet:
                print(f"figure {path}", file=sys.stderr)
    return images, paths


def _write_tables(out: Path, tabs: dict, generation: str | None) -> list[str]:
    """Every table as Parquet (marked with the scores' generation) and CSV, each file whole."""
    (out / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in tabs.items():
        mark = {GENERATION_KEY: generation or ""}
        for ext, writer in (("parquet", lambda p, t=table: t.write_parquet(p, metadata=mark)),
                            ("csv", table.write_csv)):
            path = out / TABLES_DIR / f"{name}.{ext}"
            atomic_write(path, writer)
            paths.append(str(path))
    return paths


def write_report(results: Path, out: Path, *, store: str | None = None, quiet: bool = False) -> dict:
    """Write OUT/report.html (self-contained), OUT/figures/*.png and OUT/tables/*.{csv,parquet}.

    Returns {"html", "figures" (PNG paths), "tables" (paths), "absent" (sections' reasons),
    "seconds"}. Raises MissingScores (a UserError: exit 2 at the CLI) when RESULTS holds no scores.
    """
    t0 = time.perf_counter()
    results, out = Path(results), Path(out)
    inputs = load(results)
    if store is not None:
        add_reliability_from_store(inputs, results, store)
    add_from_records(inputs, results)
    tabs = tables(inputs)
    secs = sections(inputs)
    out.mkdir(parents=True, exist_ok=True)
    with writer_lock(out):  # two reports into one folder write one after the other
        remove_stale_temporaries(out)
        images, figure_paths = _write_figures(out, secs, quiet)
        table_paths = _write_tables(out, tabs, inputs.generation)
        text = html(inputs, tabs["leaderboard"], tabs["leaderboard_per_dataset"], secs, images,
                    inputs.table("test_sets"))
        page = out / HTML_NAME
        atomic_write(page, lambda p: p.write_text(text, encoding="utf-8"))
    return {
        "html": str(page),
        "figures": figure_paths,
        "tables": table_paths,
        "absent": {sec.key: sec.absent for sec in secs if sec.absent},
        "notes": inputs.notes,
        "scores_generation": inputs.generation,
        "seconds": round(time.perf_counter() - t0, 2),
    }
