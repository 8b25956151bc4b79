"""The terminal's tables and summaries: the extraction plan, the leaderboard and what follows it, a dataset
check, the end of a run. Each prints to ``crs.commands.console``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from crs.commands.console import err, out, show

if TYPE_CHECKING:
    import polars as pl


def print_plan(p: dict, *, as_json: bool, quiet: bool) -> None:
    """`crs extract --plan`: the pairs and their cost, then what is missing; exit 2 when anything is."""
    def size(b):
        return "?" if b is None else f"{b / 1e9:.2f} GB" if b >= 1e8 else f"{b / 1e6:.1f} MB"

    def hours(sec):
        if sec is None:
            return "?"
        if sec >= 360:
            return f"{sec / 3600:.2f} h"
        return f"{sec:.1f} s" if sec >= 1 else f"{sec:.2f} s" if sec >= 0.01 else "< 0.01 s"

    def n(v):
        return "?" if v is None else f"{v:,}"

    if as_json:
        print(json.dumps(p))
    elif not quiet:
        t = Table(title=f"crs extract --plan: {p['totals']['pairs']} (encoder, dataset) pairs into {p['store']}",
                  title_justify="left")
        for col in ("encoder", "dataset", "images", "test images", "conditions", "forward passes",
                    f"store ({p['dtype']})", "GFLOPs/image", f"GPU time ({p['device']})"):
            t.add_column(col, justify="left" if col in ("encoder", "dataset") else "right")
        for r in p["pairs"]:
            t.add_row(r["encoder"], r["dataset"], n(r["images"]), n(r["test_images"]), n(r["conditions"]),
                      n(r["forward_passes"]), size(r["store_bytes"]),
                      "?" if r["gflops_per_image"] is None else f"{r['gflops_per_image']:.3g}", hours(r["gpu_seconds"]))
        show(t)
        tot = p["totals"]
        out.print(f"total: {n(tot['forward_passes'])} forward passes, store {size(tot['store_bytes'])} "
                  f"({p['store_size_note']}), GPU time {hours(tot['gpu_seconds'])} (forward passes only; decoding "
                  f"and perturbing add to it). GPU rates: {p['gpu_time_source']}", highlight=False, soft_wrap=True)
        unknown = [e["encoder"] for e in p["encoders"] if e["in_cache"] is None]
        if unknown:
            out.print(f"weights of {', '.join(unknown)}: whether they are in the local cache is not known "
                      "(this installation cannot look without downloading)", highlight=False, soft_wrap=True)
        if p["no_gpu_time_for"]:
            out.print(f"no FLOP figure for {', '.join(p['no_gpu_time_for'])}: their GPU time is not estimated",
                      highlight=False, soft_wrap=True)
    for m in p["missing"]:
        err.print(f"[red]missing[/]: {escape(m)}", highlight=False, soft_wrap=True)
    if not p["complete"]:
        if not quiet and not as_json:
            err.print(f"the plan is not complete: {len(p['missing'])} missing (above); fix them before the run",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(2)


def warn_not_converged(summaries) -> None:
    bad = [(s.encoder, s.dataset, s.not_converged) for s in summaries if s.not_converged]
    linear = [b for b in bad if "+mlp" not in b[0]]
    mlp = [b for b in bad if "+mlp" in b[0]]
    if linear:
        where = ", ".join(f"{e} × {d}: {n}" for e, d, n in linear)
        err.print(f"[yellow]warning[/]: chosen probes that stopped above the gradient tolerance ({where}); "
                  "their rows have converged = false in the run records", soft_wrap=True)
    if mlp:
        where = ", ".join(f"{e} × {d}: {n}" for e, d, n in mlp)
        err.print(f"[yellow]warning[/]: chosen MLP probes that used every step without their largest gradient "
                  f"component reaching the tolerance ({where}); their rows have converged = false in the run records",
                  soft_wrap=True)


def _number(x) -> bool:
    return x is not None and x == x  # NaN or null: no number (a test split too small for the image bootstrap)


def interval_text(lo, hi, signed: bool = False) -> str:
    if not (_number(lo) and _number(hi)):
        return "n/a"
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"[{f.format(lo)}, {f.format(hi)}]"


def leaderboard_rows(board: pl.DataFrame, reference: str | None) -> list[dict]:
    """The leaderboard's cells (strings) for each row of ``board`` (``crs.scoring.leaderboard.board``), in its
    order; ``reference``: the settings' reference (``crs.scoring.leaderboard.reference``).

    The reference is the zero point of every q (its CRS is 50 only where it dominates as much as it
    is dominated): "42.8 (reference)", no interval. Rank: the tie group where the scoring gives one
    ("tied 1st-2nd"), else the rank. Against the leader: the paired CRS difference and its 95 % interval,
    where the scoring gives them. An axis value resting on tied AUROCs carries the mark of
    ``crs.scoring.diagnostics``."""
    from crs.stages import scoreview as view  # polars (scoring): keeps crs --help fast

    rows = []
    reference = view.reference(board, reference)
    for r in board.iter_rows(named=True):
        ref = r["encoder"] == reference
        diff = r.get("crs_diff")
        if not _number(diff):
            versus = ""
        elif diff == 0 and all(not _number(r.get(k)) or r[k] == 0 for k in ("crs_diff_low", "crs_diff_high")):
            versus = "leader"
        else:
            versus = f"{diff:+.1f} {interval_text(r.get('crs_diff_low'), r.get('crs_diff_high'), signed=True)}"
        rows.append({
            "rank": r.get("tie_group") or f"{r['crs_rank']:g}",
            "encoder": r["encoder"],
            "CRS [95% interval]": (f"{r['crs']:.1f} (reference)" if ref else
                                   f"{r['crs']:.1f} {interval_text(r.get('crs_low'), r.get('crs_high'))}"),
            "tier": "no set" if r.get("tier") is None else "★" if r["tier"] else "",
            "vs leader": versus,
            "AUROC": f"{r['auroc']:.3f}{view.mark(r, 'D')}", "AUROC\nrank": f"{r['auroc_rank']:g}",
            "C": f"{r['calibration']:.3f}{view.mark(r, 'C')}", "L": f"{r['label_efficiency']:.3f}{view.mark(r, 'L')}",
            "R": f"{r['robustness']:.3f}{view.mark(r, 'R')}",
        })
    return rows


def diagnostics_rows(health: list[dict]) -> list[dict]:
    """The probe diagnostics table's cells, per (encoder, dataset) (``crs.scoring.diagnostics.probe_health``)."""
    def num(v, spec):
        return "" if v is None else format(v, spec)

    return [{"encoder": h["encoder"], "dataset": h["dataset"],
             "features\nleft out": num(h.get("features_left_out"), "d"),
             "largest |z|\nclean": num(h.get("max_scaled_clean"), ".1f"),
             "largest |z|\nany condition": (f"{num(h.get('max_scaled'), '.1f')} ({h['max_scaled_condition']})"
                                            if h.get("max_scaled") is not None else ""),
             "tied test scores > 5%": h.get("tied") or ""} for h in health]


COST = (("parameters", "parameters", lambda v: f"{v / 1e6:.1f} M"), ("gflops", "GFLOPs/image", "{:.3g}".format),
        ("width", "width", str), ("images_per_s", "images/s", "{:.0f}".format), ("device", "device", str),
        ("revision", "revision", lambda v: str(v)[:12]))


def cost_rows(encoders: list[dict]) -> list[dict]:
    """Per encoder what it costs to run and which weights were scored, where the store recorded it; [] where it
    recorded none."""
    if not any(_present(r.get(k)) for r in encoders for k in ("parameters", "gflops", "images_per_s")):
        return []
    cols = [(k, name, fmt) for k, name, fmt in COST if any(_present(r.get(k)) for r in encoders)]
    return [{"encoder": r["encoder"], **{name: fmt(r[k]) if _present(r.get(k)) else "" for k, name, fmt in cols}}
            for r in encoders]


def _present(x) -> bool:
    return _number(x) and x != ""


def _table(title: str, rows: list[dict], left=("encoder", "device", "revision"), center=("tier",)) -> Table:
    # a light box: the leaderboard fits the 120 columns a log or a pipe gets
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in rows[0] if rows else ():
        t.add_column(col, justify="left" if col in left else "center" if col in center else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r.values())
    return t


def leaderboard_table(board: pl.DataFrame, reference: str | None) -> Table:
    rows = leaderboard_rows(board, reference)
    if rows and not any(r["vs leader"] for r in rows):  # scores without the paired differences
        rows = [{k: v for k, v in r.items() if k != "vs leader"} for r in rows]
    return _table("CRS leaderboard (overall, comparison set)", rows)


def scale_note(board: pl.DataFrame, reference: str | None, crs_version: str) -> str:
    """What CRS 50 means (``crs.scoring.verdict.scale_sentence``, with the reference's own CRS from ``board``); the
    page named is the definition the scores were made with."""
    from crs.stages import scoreview as view  # polars (scoring): keeps crs --help fast

    ref = view.reference(board, reference)
    own = [r["crs"] for r in board.select("encoder", "crs").iter_rows(named=True) if ref and r["encoder"] == ref]
    sentence = view.scale_sentence(ref or reference, own[0] if own else None)
    return f"{sentence.removesuffix('.')} ({view.definition(crs_version).docs_path})."


def verdict_lines(scores_json: dict) -> list[str]:
    """The verdict in sentences (``crs.scoring.verdict.sentences``)."""
    from crs.stages import scoreview as view  # polars (scoring): keeps crs --help fast

    return list(view.sentences(scores_json["verdict"]))


def print_scores(scores, results):
    from crs.stages import scoreview as view  # polars (scoring): keeps crs --help fast

    s = scores.settings
    rc = scores.rank_comparison
    board = view.board(scores.encoders)
    show(leaderboard_table(board, s.get("reference")))
    out.print(scale_note(board, s.get("reference"), s["crs_version"]), highlight=False, soft_wrap=True)
    marked = "ties_marked" in board.columns and any(board["ties_marked"].fill_null(""))
    if marked:
        out.print(f"{view.TIE_MARK} computed from AUROCs with more than 20% tied test scores: read with care "
                  "(Verdict notes)")
    health = scores.diagnostics
    if health.height:
        show(_table("Probe diagnostics (features left out, largest standardised value, ties)",
                    diagnostics_rows(health.to_dicts()), left=("encoder", "dataset", "tied test scores > 5%")))
    cost = cost_rows(board.to_dicts())
    if cost:
        show(_table("Cost to run (recorded by crs extract)", cost))
    w = ", ".join(f"{k} {v:.3g}" for k, v in s["weights"].items())
    out.print(f"AUROC = D (discrimination); C calibration, L label efficiency, R robustness (seed means over "
              f"{', '.join(s['datasets'])}).\n★ = in the 95% confidence set for the best encoder (bootstrap "
              f"{view.unit_words(s['bootstrap']['unit'])}, B={s['bootstrap']['n']}); "
              + ("vs leader: paired CRS difference to the leader [95% interval]; "
                 if "crs_diff" in board.columns else "")
              + f"reference: {s['reference']}; weights: {w}; CRS v{s['crs_version']}")
    doc = scores.to_json()
    targets = doc.get("shift_targets") or {}
    if targets:
        out.print("Shift targets (each its dataset's shift condition, not a dataset of the CRS): "
                  + "; ".join(f"{d} -> {', '.join(t)}" for d, t in targets.items()), highlight=False)
    out.print(f"AUROC vs CRS: {rc['discordant_pairs']} of {rc['pairs']} pairs reversed, mean |rank shift| "
              f"{rc['mean_abs_rank_shift']:.2f}, Kendall tau-b {rc['kendall_tau_b']:.2f}")
    lines = verdict_lines(doc)
    if lines:
        out.print("Verdict: " + " ".join(lines), markup=False, highlight=False, soft_wrap=True)
    out.print(f"scores written to {Path(results) / 'scores'} (Parquet, CSV, JSON)")


def print_comparisons(scores):
    """Pareto front, weight-sensitivity leaders and the warnings, after the leaderboard."""
    front = scores.to_json()["pareto"]
    if front:
        out.print("Pareto front on the four q-axes: overall " + ", ".join(front.get("overall", [])) + "; "
                  + "; ".join(f"{k} {', '.join(v)}" for k, v in front.items() if k != "overall"))
    leaders = scores.weight_leaders
    if leaders.height:
        out.print(f"CRS leader over the weight simplex (step {scores.settings.get('simplex_step')}): "
                  + ", ".join(f"{r['encoder']} {100 * r['share']:.0f}%" for r in leaders.iter_rows(named=True)))
    print_warnings(scores)


def print_warnings(scores):
    """The scores' warnings (ties, encoders left out, no interval, ...), on stderr."""
    for w in scores.settings.get("warnings", []):
        err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


def print_notes(scores, report: str | None = None):
    """The scores' notes (how to read an interval; nothing to do), one short line each on stderr: what the note
    is about, and where it is in full."""
    where = f"the report's notes ({report}) and scores.json" if report else "scores.json's settings.notes"
    for n in scores.settings.get("notes", []):
        err.print(f"note: {note_topic(n)}; in full in {where}", markup=False, highlight=False, soft_wrap=True)


def note_topic(note: str) -> str:
    """A note's first clause (up to its first colon), what it is about: 'the calibration intervals are off-centre'."""
    return note.split(": ", 1)[0]


def print_check(report, ds) -> None:
    fatal = [p for p in report.problems if p.fatal]
    warnings = [p for p in report.problems if not p.fatal]
    for p in fatal:
        err.print(f"[red]error[/]: {escape(str(p))}", highlight=False, soft_wrap=True)
    for p in warnings:
        err.print(f"[yellow]warning[/]: {p}", highlight=False, soft_wrap=True)
    for n in report.notes:
        out.print(f"note: {n}", highlight=False, soft_wrap=True)
    if report.counts is not None:
        c = report.counts
        multilabel = "positive" in c.columns
        t = Table(title=f"{report.dataset}: {report.rows} images" + (" (positive / negative / unknown)" if
                  multilabel else ""), title_justify="left")
        t.add_column("class")
        for split in ("train", "val", "test"):
            t.add_column(split, justify="right")
        for cls in ds.classes:  # registry order, not alphabetical
            cells = []
            for split in ("train", "val", "test"):
                r = c.filter((c["class"] == cls) & (c["split"] == split))
                if r.height == 0:
                    cells.append("0")
                elif multilabel:
                    cells.append(f"{r['positive'][0]} / {r['negative'][0]} / {r['unknown'][0]}")
                else:
                    cells.append(str(r["images"][0]))
            t.add_row(cls, *cells)
        show(t)
    verdict = "usable" if report.usable else f"NOT usable ({len(fatal)} problems above)"
    out.print(f"{report.dataset} at {report.root}: {verdict}; {report.images_checked} images decoded",
              highlight=False)


def print_run(result, source: str, *, as_json: bool, quiet: bool, verbose: bool) -> None:
    """The end-of-run summary: the leaderboard, then per stage what was done or already complete, where, how long."""
    if as_json:
        print(json.dumps(result.as_json(source)))
        return
    warn_not_converged(result.probe_summaries)
    if quiet:
        return
    print_scores(result.scores, result.results)
    if verbose:
        print_comparisons(result.scores)
        print_notes(result.scores, result.report_html)
    else:  # what could mislead a reader of the leaderboard is said also without --verbose
        print_warnings(result.scores)
    t = Table(title=f"crs run {source}: {result.seconds:.1f} s", title_justify="left")
    for col, just in (("stage", "left"), ("done", "right"), ("already complete", "right"), ("time", "right"),
                      ("output", "left")):
        t.add_column(col, justify=just)
    for name, st in result.stages.items():
        if not st.enabled:
            t.add_row(name, "-", "-", "-", "disabled in the config")
            continue
        t.add_row(name, str(len(st.done)), str(len(st.skipped)), f"{st.seconds:.1f} s", st.out)
        if verbose:
            for item in st.done:
                t.add_row("", "", "", "", f"  done: {item}")
    show(t)
    if result.report_html:
        out.print(f"report: {result.report_html}", highlight=False)
    failed = result.stages["extract"].detail.get("failures")
    if failed:
        err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures table, "
                  "left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))
