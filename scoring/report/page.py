"""The page: the verdict, the leaderboard section, the figure sections and the methods, filled into
templates/report.html with its style (report.css) and sorting script (report.js)."""

from __future__ import annotations

import base64
import functools
import re
import string
from importlib import resources
from pathlib import Path

import polars as pl

from crs.scoring import verdict, versions
from crs.scoring.report.boards import (
    board_html,
    diagnostics_html,
    no_tier_note,
    per_dataset_html,
    q_html,
    scale_note,
    test_sets_html,
)
from crs.scoring.report.inputs import Inputs
from crs.scoring.report.markup import esc, num
from crs.scoring.report.sections import Drawn, Section, flat_intervals, flat_note
from crs.scoring.report.sites import ANCHOR as SITES_ANCHOR
from crs.scoring.report.sites import TITLE as SITES_TITLE
from crs.scoring.report.sites import sites_html

HTML_NAME = "report.html"
GENERATION_META = "crs-scores-generation"  # <meta name=...> holding the scores set the page is made from

def verdict_sentences(inputs: Inputs) -> list[str]:
    """The score's own verdict (scores.json's "verdict", which ``load`` requires) in sentences; none where the
    scores hold no encoders."""
    if not inputs.table("encoders").height:
        return []
    return [str(x) for x in verdict.sentences(inputs.verdict)]


def _version(settings: dict) -> str:
    """The CRS version the scores record (``load`` requires it)."""
    return versions.check(settings["crs_version"])


def _spec_link(version: str) -> str:
    """The version's page, named by its path in the repository and never linked: the report is shared on its own,
    and a link to this machine's checkout would break there (the Methods section says what the page needs)."""
    return f"<code>{esc(versions.get(version).docs_path)}</code>"


def _words(settings: dict):
    """The words the page uses for the scores' CRS version, and the constants it recorded (``settings.crs_constants``,
    which ``load`` requires of a version with constants; {} for v1)."""
    return versions.get(_version(settings)).words, settings.get("crs_constants") or {}


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
        f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows) + "</dl>"


def verdict_html(sentences: list[str]) -> str:
    if not sentences:
        return "<section id='verdict'><p class='absent'>No verdict: the scores hold no encoders.</p></section>"
    return ("<section id='verdict' class='verdict'><h2>Verdict</h2><ul>"
            + "".join(f"<li>{esc(x)}</li>" for x in sentences) + "</ul></section>")


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
    words, recorded = _words(s)
    paras = [
        f"<p>Each encoder's frozen embeddings were probed with logistic regression on {len(s.get('datasets', []))} "
        f"dataset(s) ({esc(', '.join(s.get('datasets', [])))}) with {len(s.get('seeds', []))} seed(s). Four axes "
        "are computed per encoder, dataset and seed, higher-better: <b>D</b>, the macro "
        "one-vs-rest AUROC (mean per-label AUROC for multi-label tasks) on the clean test split with all "
        "training labels; <b>C</b> = " + words.calibration(recorded) + "; <b>L</b>, the "
        "mean retained above-chance AUROC over the label fractions below 100% ("
        + esc(", ".join(f"{100 * f:g}%" for f in fr) or "none") + "); <b>R</b>, the mean retention over the "
        "perturbation families and severities, averaged with the retention on the shift target where the "
        "dataset has one. Retention is clip((a − 0.5) / (D − 0.5), 0, 1).</p>",
        f"<p>Each axis is scored against {esc(ref_text)}: "
        + words.q(recorded) + " the overall q is the "
        "mean over the datasets of the comparison set (the encoders and datasets where every encoder has "
        "every dataset). From the q-profile come dominance (the Pareto dominance balance over the other "
        "encoders, mapped to [0, 1]), profile balance (" + words.balance(recorded)
        + ") and the worst axis ("
        + words.worst(recorded) + f"). CRS v{esc(s.get('crs_version'))} = 100 × ("
        + esc(" + ".join(f"{v:.3g} · {k}" for k, v in w.items())) + ").</p>",
        f"<p>Uncertainty: a paired bootstrap with {esc(b.get('n'))} replicates (seed {esc(b.get('seed'))}) "
        f"{esc(unit_text)}, and recomputes q, every component and the ranks in each replicate. Intervals are "
        f"{100 * b.get('confidence', 0.95):.0f}% percentile intervals. The tier (★) is a simultaneous "
        f"{100 * b.get('confidence', 0.95):.0f}% confidence set for the best encoder, one statement over every "
        "comparison that allows for the leader being chosen from the same data (a max-type bootstrap test "
        "inverted, after Mogstad, Romano, Shaikh and Wilhelm's confidence set for the best); each encoder's paired "
        "CRS difference to the leader keeps its own interval. AUROC and CRS rankings "
        f"are compared by the pairs they reverse ({esc(rc.get('discordant_pairs'))} of {esc(rc.get('pairs'))} "
        f"here) and Kendall's tau-b ({esc(num(rc.get('kendall_tau_b'), '.2f'))}).</p>",
        f"<p>Definitions: the CRS v{esc(_version(s))} specification, {_spec_link(_version(s))} in the CRS-Bench "
        "repository. Every "
        "number on this page is read from the files <code>crs score</code> wrote; <code>tables/</code> beside "
        "this page holds them in full precision as CSV and Parquet, <code>figures/</code> the figures as PNG.</p>",
    ]
    return "".join(paras)


def _figure_html(sec: Section, d: Drawn, data: bytes) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    # on a narrow screen the figure fits the width; a tap shows it at full size in a box that scrolls sideways
    return (f"<figure id='fig-{esc(d.stem)}'><div class='zoom' tabindex='0' role='button' aria-label='show the "
            f"figure at full size'><img src='data:image/png;base64,{b64}' alt='{esc(d.alt)}'></div>"
            f"<figcaption><b>{esc(sec.title)}.</b> {esc(d.caption)} <span class='file'>(figures/{esc(d.stem)}.png"
            "; tap or click the figure for full size)</span></figcaption></figure>")


@functools.cache
def template(name: str) -> str:
    """A file of templates/ beside this module (report.html, report.css, report.js), as shipped in the wheel."""
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def html(inputs: Inputs, board: pl.DataFrame, per_board: pl.DataFrame, secs: list[Section],
         images: dict[str, bytes], sizes: pl.DataFrame | None = None) -> str:
    """The page: templates/report.html filled with its style, script and body."""
    s, rc = inputs.settings, inputs.rank_comparison
    main_secs = [x for x in secs if x.key != "appendix"]
    appendix = [x for x in secs if x.key == "appendix"]
    nav = "".join(f"<a href='#{k}'>{esc(t)}</a>" for k, t in
                  [("verdict", "Verdict"), *([(SITES_ANCHOR, SITES_TITLE)] if inputs.sites else []),
                   ("leaderboard-section", "Leaderboard"),
                   *[(x.key, x.title) for x in main_secs], ("methods", "Methods"),
                   *[(x.key, "Appendix") for x in appendix]])
    parts = [
        f"<p>Clinical Reliability Score (CRS v{esc(s.get('crs_version'))}) of {len(inputs.order)} encoders on "
        f"{esc(', '.join(s.get('datasets', [])))}.</p>",
        f"<nav>{nav}</nav>",
        verdict_html(verdict_sentences(inputs)),
        sites_html(inputs.sites),
        leaderboard_section(inputs, board, per_board, sizes),
        *[_section_html(sec, images) for sec in main_secs],
        "<h2 id='methods'>Methods</h2>" + methods(s, rc),
        *[_section_html(sec, images) for sec in appendix],
    ]
    warnings = [*s.get("warnings", []), *s.get("notes", []), *inputs.notes]
    if warnings:
        parts.append("<h3>Warnings and notes from scoring and reporting</h3><ul class='notes'>"
                     + "".join(f"<li>{esc(w)}</li>" for w in warnings) + "</ul>")
    return string.Template(template("report.html")).substitute(
        generation_meta=GENERATION_META, generation=esc(inputs.generation or ""), encoders=len(inputs.order),
        css=template("report.css"), script=template("report.js"), body="".join(parts))


def leaderboard_section(inputs: Inputs, board: pl.DataFrame, per_board: pl.DataFrame,
                        sizes: pl.DataFrame | None) -> str:
    """The leaderboard, the q-scores, the diagnostics, the test-set sizes, per dataset, the settings."""
    s, rc = inputs.settings, inputs.rank_comparison
    return "".join([
        "<h2 id='leaderboard-section'>Leaderboard</h2>",
        scale_note(board, s, inputs.reference),
        "<h3>Overall (comparison set)</h3>", board_html(board, inputs.reference), no_tier_note(board),
        "<h3>q-scores and components</h3>" + q_html(board) + diagnostics_html(inputs.table("diagnostics"), board),
        (f"<p class='absent' id='flat-intervals'>{esc(flat_note(board, s))}</p>" if flat_intervals(board) else ""),
        f"<p>AUROC vs CRS: {esc(rc.get('discordant_pairs'))} of {esc(rc.get('pairs'))} pairs reversed"
        + (" (" + esc("; ".join(f"{a} above {b} by AUROC, below by CRS" for a, b in rc.get("reversed_pairs", [])))
           + ")" if rc.get("reversed_pairs") else "")
        + f"; mean |rank shift| {esc(num(rc.get('mean_abs_rank_shift'), '.2f'))}; Kendall tau-b "
          f"{esc(num(rc.get('kendall_tau_b'), '.2f'))}. Click a column head to sort.</p>",
        "<h3>Test-set sizes</h3><p>Images each probe was evaluated on (and trained on at 100% labels), per "
        "dataset; a small test split gives wide intervals.</p>",
        test_sets_html(sizes if sizes is not None else pl.DataFrame()),
        "<h3>Per dataset</h3><p>Each dataset alone as the comparison set; ranks are within the dataset. The "
        "bootstrap intervals and the tier are computed for the overall comparison set only.</p>",
        per_dataset_html(per_board),
        "<h3>Settings</h3>", settings_block(s, inputs.provenance),
        f"<p class='generation'>Made from the scores set {esc(inputs.generation)} (<code>crs score</code>'s "
        "scores.json, which names the set).</p>",
    ])


def _section_html(sec: Section, images: dict[str, bytes]) -> str:
    """A figure section: its heading and text, its figures, and why any figure is not drawn."""
    return "".join([f"<h2 id='{esc(sec.key)}'>{esc(sec.title)}</h2><p>{esc(sec.text)}</p>",
                    *[_figure_html(sec, d, images[d.stem]) for d in sec.figures],
                    *[f"<p class='absent'>Not drawn: {esc(why)}</p>" for why in sec.absent]])


def page_generation(page: Path) -> str | None:
    """The scores generation a written report.html was made from (its meta tag), or None (absent, or older)."""
    try:
        head = Path(page).read_text(encoding="utf-8")[:4096]
    except (OSError, UnicodeDecodeError):
        return None
    m = re.search(rf"<meta name='{GENERATION_META}' content='([^']*)'>", head)
    return (m.group(1) or None) if m else None
