"""``report``: the score tables -> one self-contained HTML page, its figures as PNG, its tables as CSV and Parquet.

Reads what ``crs score`` wrote (RESULTS/scores/*.parquet and scores.json); recomputes
nothing the score has, except reliability bins from the store when the score was run
without one and ``store`` is given here. The page embeds every figure as a base64 PNG
and has no script, so it opens from disk, offline, as one file. A figure whose input is
absent becomes a sentence in its section saying what is missing and how to get it.

Pure parts: ``load`` (files -> Inputs), ``leaderboard`` / ``per_dataset_board`` / ``tables``
(Inputs -> DataFrames), ``sections`` (Inputs -> figures), ``html`` (-> text);
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
    GENERATION_KEY, MissingScores, MixedScores, read_scores_json, read_tables, scores_folder,
)
from crs.scoring.ranks import rank_desc

SPEC = "docs/crs-v1.md"  # the CRS v1 specification, in the repository
HTML_NAME = "report.html"
GENERATION_META = "crs-scores-generation"  # <meta name=...> holding the scores set the page is made from
FIGURES_DIR = "figures"
TABLES_DIR = "tables"
SYMBOLS = [a.symbol for a in REGISTRY.values()]  # column heads, in AXES order
SCORE_TABLES = (
    "encoders", "per_dataset", "pareto", "weight_sensitivity", "weight_leaders", "reliability", "robustness",
    "label_efficiency", "calibration_under_shift", "rank_distribution",
)  # fmt: skip


@dataclass
class Inputs:
    settings: dict
    rank_comparison: dict
    tables: dict[str, pl.DataFrame]
    notes: list[str] = field(default_factory=list)  # what the report itself found missing or did
    generation: str | None = None  # the scores set the report is made from (scores.json's generation)

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())

    @property
    def order(self) -> list[str]:
        """Encoders in leaderboard order (best CRS first)."""
        return self.table("encoders")["encoder"].to_list()


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
                  generation=doc["generation"])


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
    if found.reliability.height:
        inputs.tables["reliability"] = found.reliability
        inputs.notes.append(f"reliability bins computed by the report from the store {store!r} (the score had none)")


# ------------------------------------------------------------------ tables
BOARD = ["encoder", "crs_rank", "crs", "crs_low", "crs_high", "tier", "rank_low", "rank_high", "p_rank1", "auroc",
         "auroc_rank", *AXES, *[f"q_{a}" for a in AXES], "dominance", "balance", "worst_axis", "pareto"]


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
    for name in ("rank_distribution", "weight_leaders", "label_efficiency", "robustness", "calibration_under_shift"):
        if inputs.table(name).height:
            out[name] = inputs.table(name)
    if inputs.table("reliability").height:
        out["reliability_pooled"] = figures.reliability_bins(inputs.table("reliability"))
    return out


# ----------------------------------------------------------------- figures
@dataclass
class Section:
    key: str
    title: str
    text: str  # what the figure shows, HTML-escaped when rendered
    figures: list[tuple[str, object]] = field(default_factory=list)  # (file stem, matplotlib Figure)
    absent: list[str] = field(default_factory=list)  # why a figure is not there


def _try(section: Section, stem: str, build) -> None:
    from crs.scoring.figures import Absent

    try:
        section.figures.append((stem, build()))
    except Absent as exc:
        section.absent.append(str(exc))


class _View(NamedTuple):
    """What every section reads from the inputs."""

    inputs: Inputs
    order: list[str]  # encoders, best CRS first
    datasets: list[str]
    conf: float  # interval confidence, percent
    unit: str  # bootstrap unit


def sections(inputs: Inputs) -> list[Section]:
    """The page's figure sections in reading order, each holding its Figures or why they are absent."""
    s = inputs.settings
    datasets = list(s.get("datasets") or sorted(inputs.table("per_dataset")["dataset"].unique().to_list()))
    view = _View(inputs, inputs.order, datasets, 100 * s.get("bootstrap", {}).get("confidence", 0.95),
                 s.get("bootstrap", {}).get("unit", "seed"))
    return [build(view) for build in SECTIONS]


def _profiles(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("profiles", "Profiles on the four axes",
                  "Each encoder's discrimination (D), calibration (C), label efficiency (L) and robustness (R), "
                  f"seed means over the comparison set with {v.conf:.0f}% bootstrap intervals; the dashed line is "
                  "the reference the q-scores are measured against.")
    _try(sec, "profiles", lambda: fg.profiles(v.inputs.table("encoders"), v.inputs.table("per_dataset"),
                                              v.inputs.settings))
    return sec


def _rank_change(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("rank-change", "AUROC rank versus CRS rank",
                  "Left: rank by mean clean AUROC; right: rank by CRS. Encoders in a pair whose order the two "
                  "rankings reverse are drawn bold and coloured.")
    _try(sec, "rank_change", lambda: fg.rank_slope(v.inputs.table("encoders"), v.inputs.rank_comparison))
    return sec


def _pareto(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("pareto", "Pareto view",
                  "q discrimination against q calibration, coloured by q robustness. Stars mark encoders no other "
                  "encoder dominates on all four q-axes (so a star may sit below another point on this "
                  "two-axis view).")
    _try(sec, "pareto", lambda: fg.pareto(v.inputs.table("encoders")))
    return sec


def _reliability(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("reliability", "Reliability diagrams",
                  "Observed accuracy against confidence in 15 equal-width bins of the top-label confidence "
                  "(multi-label: each label's max(p, 1 - p)), clean test split, probes trained on all labels; "
                  "solid before, dashed after temperature scaling fitted on the validation split.")
    bins = v.inputs.table("reliability")
    if not bins.height:
        sec.absent.append("no reliability bins in the results: they need the probe's stored probabilities. "
                          "Run `crs score --store STORE`, or pass --store STORE to `crs report`.")
    for d in v.datasets if bins.height else []:
        _try(sec, f"reliability_{_stem(d)}", lambda d=d: fg.reliability_diagrams(bins, d, v.order))
    return sec


def _label_efficiency(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("label-efficiency", "Label efficiency",
                  f"Clean test AUROC against the share of training labels the probe saw; bands are {v.conf:.0f}% "
                  "seed-bootstrap intervals (the same seed draws as the CRS intervals).")
    _try(sec, "label_efficiency", lambda: fg.label_efficiency(v.inputs.table("label_efficiency"), v.order))
    return sec


def _robustness(v: _View) -> Section:
    from crs.scoring import figures as fg

    sec = Section("robustness", "Robustness",
                  "Retention (the share of the clean, full-label above-chance AUROC that survives) against "
                  "severity, one panel per perturbation family; then the shift gap, clean AUROC against AUROC "
                  "on the dataset's shift target.")
    detail = v.inputs.table("robustness")
    for d in v.datasets:
        _try(sec, f"robustness_{_stem(d)}", lambda d=d: fg.robustness(detail, d, v.order))
    _try(sec, "shift_gap", lambda: fg.shift_gap(v.inputs.table("per_dataset"), detail, v.order))
    return sec


def _uncertainty(v: _View) -> Section:
    from crs.scoring import figures as fg

    s = v.inputs.settings
    sec = Section("uncertainty", "Rank uncertainty and weight sensitivity",
                  f"How often each encoder took each CRS rank across the {v.unit} bootstrap replicates; then, for "
                  "every weighting of the three components on a grid over the simplex, which encoder has the "
                  "top CRS.")
    _try(sec, "rank_distribution", lambda: fg.rank_distribution(v.inputs.table("rank_distribution"), v.order,
                                                                s.get("bootstrap", {}).get("n")))
    _try(sec, "weight_sensitivity",
         lambda: fg.weight_map(v.inputs.table("weight_sensitivity"), v.order, s.get("weights")))
    return sec


SECTIONS = (_profiles, _rank_change, _pareto, _reliability, _label_efficiency, _robustness, _uncertainty)


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
    return format(value, spec)


def settings_block(s: dict) -> str:
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
    return "<dl class='settings' id='settings'>" + "".join(
        f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def board_html(board: pl.DataFrame) -> str:
    head = ["rank", "encoder", "CRS", "95% interval", "tier", "rank interval", "P(rank 1)", "AUROC", "AUROC rank",
            *SYMBOLS, *[f"q {x}" for x in SYMBOLS], "Pareto"]
    out = ["<div class='scroll'><table id='leaderboard' class='board'><thead><tr>",
           *[f"<th>{_e(h)}</th>" for h in head], "</tr></thead><tbody>"]
    for r in board.iter_rows(named=True):
        cells = [
            ("rank", _num(r["crs_rank"], "g")), ("encoder", r["encoder"]), ("crs", _num(r["crs"], ".1f")),
            ("ci", f"[{_num(r['crs_low'], '.1f')}, {_num(r['crs_high'], '.1f')}]"),
            ("tier", "★ leading" if r["tier"] else "no tier (no interval)" if r["tier"] is None else ""),
            ("rank-ci", f"{_num(r['rank_low'], 'g')}–{_num(r['rank_high'], 'g')}"),
            ("p1", _num(r["p_rank1"], ".2f")), ("auroc", _num(r["auroc"], ".3f")),
            ("auroc-rank", _num(r["auroc_rank"], "g")),
            *[(a, _num(r[a], ".3f")) for a in AXES], *[(f"q-{a}", _num(r[f"q_{a}"], "+.3f")) for a in AXES],
            ("pareto", "yes" if r.get("pareto") else ""),
        ]
        out.append(f"<tr class='row' data-encoder='{_e(r['encoder'])}'>"
                   + "".join(f"<td class='{c}'>{_e(v)}</td>" for c, v in cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


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
        parts.append(f"<h4>{_e(dataset)}</h4><table class='board per-dataset' data-dataset='{_e(dataset)}'>"
                     "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>")
        for r in g.iter_rows(named=True):
            cells = [_num(r["crs_rank"], "g"), r["encoder"], _num(r["crs"], ".1f"), _num(r["auroc"], ".3f"),
                     _num(r["auroc_rank"], "g"), *[_num(r[a], ".3f") for a in AXES],
                     *[_num(r[f"q_{a}"], "+.3f") for a in AXES], _num(r.get("n_seeds"), "d")]
            parts.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
        parts.append("</tbody></table>")
    return "".join(parts)


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
        f"<p>Each axis is scored against {_e(ref_text)}: q = (x − x_ref) / (1 − x_ref) above the reference and "
        "(x − x_ref) / x_ref below it, so q lies in [−1, 1] and the reference scores 0; the overall q is the "
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
        f"<p>Definitions: the CRS v1 specification, <code>{SPEC}</code> in the CRS-Bench repository. Every "
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
table.board td:nth-child(2),table.board th:nth-child(2){text-align:left;font-weight:600}
table.board thead th{background:#eef4fa} td.tier{color:#0072B2;font-weight:700}
dl.settings{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;background:#f6f6f6;
padding:.8em 1em;border-radius:6px} dl.settings dt{font-weight:600} dl.settings dd{margin:0}
figure{margin:1em 0} figure img{max-width:100%;height:auto;border:1px solid #e3e3e3}
figcaption{font-size:.9em;color:#444} p.absent{background:#fff4e0;border-left:4px solid #E69F00;padding:.5em .8em}
.notes li{color:#7a4b00} nav a{margin-right:1em}
"""


def html(inputs: Inputs, board: pl.DataFrame, per_board: pl.DataFrame, secs: list[Section],
         images: dict[str, bytes]) -> str:
    s, rc = inputs.settings, inputs.rank_comparison
    nav = "".join(f"<a href='#{k}'>{_e(t)}</a>" for k, t in
                  [("leaderboard-section", "Leaderboard"), *[(x.key, x.title) for x in secs], ("methods", "Methods")])
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
        "<h2 id='leaderboard-section'>Leaderboard</h2>",
        "<h3>Settings</h3>", settings_block(s),
        f"<p class='generation'>Made from the scores set {_e(inputs.generation)} (<code>crs score</code>'s "
        "scores.json, which names the set).</p>",
        "<h3>Overall (comparison set)</h3>", board_html(board), _no_tier_note(board),
        f"<p>AUROC vs CRS: {_e(rc.get('discordant_pairs'))} of {_e(rc.get('pairs'))} pairs reversed"
        + (" (" + _e("; ".join(f"{a} above {b} by AUROC, below by CRS" for a, b in rc.get("reversed_pairs", [])))
           + ")" if rc.get("reversed_pairs") else "")
        + f"; mean |rank shift| {_e(_num(rc.get('mean_abs_rank_shift'), '.2f'))}; Kendall tau-b "
          f"{_e(_num(rc.get('kendall_tau_b'), '.2f'))}.</p>",
        "<h3>Per dataset</h3><p>Each dataset alone as the comparison set; ranks are within the dataset. The "
        "bootstrap intervals and the tier are computed for the overall comparison set only.</p>",
        per_dataset_html(per_board),
    ]
    for sec in secs:
        parts.append(f"<h2 id='{_e(sec.key)}'>{_e(sec.title)}</h2><p>{_e(sec.text)}</p>")
        for stem, _ in sec.figures:
            data = base64.b64encode(images[stem]).decode("ascii")
            parts.append(f"<figure><img src='data:image/png;base64,{data}' alt='{_e(sec.title)}: {_e(stem)}'>"
                         f"<figcaption>{_e(stem)}.png</figcaption></figure>")
        for why in sec.absent:
            parts.append(f"<p class='absent'>Not drawn: {_e(why)}</p>")
    parts.append("<h2 id='methods'>Methods</h2>" + methods(s, rc))
    warnings = [*s.get("warnings", []), *inputs.notes]
    if warnings:
        parts.append("<h3>Warnings from scoring and reporting</h3><ul class='notes'>"
                     + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")
    parts.append("</body></html>\n")
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
    tabs = tables(inputs)
    secs = sections(inputs)
    (out / FIGURES_DIR).mkdir(parents=True, exist_ok=True)
    (out / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    images, figure_paths, table_paths = {}, [], []
    for sec in secs:
        for stem, fig in sec.figures:
            images[stem] = png(fig)
            path = out / FIGURES_DIR / f"{stem}.png"
            atomic_write(path, lambda p, b=images[stem]: p.write_bytes(b))
            figure_paths.append(str(path))
            if not quiet:
                print(f"figure {path}", file=sys.stderr)
    for name, table in tabs.items():
        mark = {GENERATION_KEY: inputs.generation or ""}
        for ext, writer in (("parquet", lambda p, t=table: t.write_parquet(p, metadata=mark)),
                            ("csv", table.write_csv)):
            path = out / TABLES_DIR / f"{name}.{ext}"
            atomic_write(path, writer)
            table_paths.append(str(path))
    text = html(inputs, tabs["leaderboard"], tabs["leaderboard_per_dataset"], secs, images)
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
