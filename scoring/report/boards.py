"""The page's tables: the leaderboard, the q-scores, the probe diagnostics, per dataset, the test-set sizes."""

from __future__ import annotations

import polars as pl

from crs.scoring import diagnostics, leaderboard, verdict
from crs.scoring.axes import AXES, REGISTRY
from crs.scoring.report.markup import esc, interval, nobreak, num, td, th

SYMBOLS = [a.symbol for a in REGISTRY.values()]  # column heads, in AXES order


def _has(board: pl.DataFrame, col: str) -> bool:
    return col in board.columns and board[col].is_not_null().any()


def _tier_text(r: dict) -> str:
    if r["tier"] is None:
        return "no set (no interval)"
    return (("★ " if r["tier"] else "") + str(r.get("tie_group") or "")).strip()


def _crs_text(r: dict, reference: str | None) -> str:
    return f"{num(r['crs'], '.1f')} (reference)" if r["encoder"] == reference else num(r["crs"], ".1f")


# Cost and identity columns of the leaderboard, shown when the scores carry them (the store records them).
_BOARD_META = [
    ("parameters", "parameters (M)", lambda r: (num(r["parameters"] / 1e6 if r["parameters"] is not None
                                                     else None, ".1f"), r["parameters"])),
    ("gflops", "GFLOPs / image", lambda r: (num(r["gflops"], ".3g"), r["gflops"])),
    ("width", "embedding width", lambda r: (num(r["width"], "d"), r["width"])),
    ("images_per_s", "images/s (extract)", lambda r: (num(r["images_per_s"], ".1f"), r["images_per_s"])),
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
        ("rank", "crs rank (1 = best)", lambda r: (num(r["crs_rank"], "g"), r["crs_rank"])),
        ("encoder", "", lambda r: (r["encoder"], r["encoder"])),
        ("crs", "CRS (50 = reference level)", lambda r: (_crs_text(r, ref), r["crs"])),
        ("ci", "95% interval (none for the reference: it is the zero point)",
         lambda r: ("reference" if r["encoder"] == ref and r.get("crs_low") is None
                    else interval(r.get("crs_low"), r.get("crs_high")), r.get("crs_low"))),
    ]
    if _has(board, "crs_diff"):
        cols.append(("crs-diff", "CRS minus the leader's, paired 95% interval",
                     lambda r: (f"{num(r['crs_diff'], '+.1f')} "
                                f"{nobreak(interval(r.get('crs_diff_low'), r.get('crs_diff_high'), '+.1f'))}",
                                r["crs_diff"])))
    cols += [
        ("tier", "★: in the 95% confidence set for the best encoder; then the places the rank interval covers",
         lambda r: (_tier_text(r), _tier_text(r))),
        ("rank-ci", "rank interval", lambda r: (f"{num(r['rank_low'], 'g')}–{num(r['rank_high'], 'g')}",
                                                r["rank_low"])),
        ("p1", "P(rank 1)", lambda r: (num(r["p_rank1"], ".2f"), r["p_rank1"])),
        ("auroc", "AUROC", lambda r: (num(r["auroc"], ".3f") + diagnostics.mark(r, "D"), r["auroc"])),
        ("auroc-rank", "AUROC rank", lambda r: (num(r["auroc_rank"], "g"), r["auroc_rank"])),
    ]
    for a, sym in zip(AXES, SYMBOLS, strict=True):
        cols.append((a, f"{sym}: {a.replace('_', ' ')}, with its interval",
                     lambda r, a=a, sym=sym: (num(r[a], ".3f") + diagnostics.mark(r, sym)
                                              + (f" {nobreak(interval(r.get(f'{a}_low'), r.get(f'{a}_high'), '.2f'))}"
                                                 if r.get(f"{a}_low") is not None else ""), r[a])))
    cols.append(("pareto", "Pareto", lambda r: ("yes" if r.get("pareto") else "", int(bool(r.get("pareto"))))))
    return cols + [(c, head, f) for c, head, f in _BOARD_META if _has(board, c)]


def _q_columns(board: pl.DataFrame) -> list[tuple[str, str, object]]:
    """The q-scores and CRS components, a table of their own below the leaderboard (so that the leaderboard
    fits a laptop's width without scrolling sideways)."""
    cols = [("encoder", "", lambda r: (r["encoder"], r["encoder"]))]
    cols += [(f"q-{a}", f"q {sym}: {a.replace('_', ' ')} relative to the reference (0)",
              lambda r, a=a: (num(r[f"q_{a}"], "+.3f"), r[f"q_{a}"])) for a, sym in zip(AXES, SYMBOLS, strict=True)]
    cols += [(c, c.replace("_", " "), lambda r, c=c: (num(r[c], ".3f"), r[c]))
             for c in ("dominance", "balance", "worst_axis") if c in board.columns]
    return cols


def q_html(board: pl.DataFrame) -> str:
    """The q-scores and components of the overall comparison set, sortable like the leaderboard."""
    if not board.height or not all(f"q_{a}" in board.columns for a in AXES):
        return ""
    cols = _q_columns(board)
    out = ["<p>Each axis relative to the reference (q = 0 at its level, +1 at the top of the axis) and the "
           "three CRS components.</p><div class='scroll'><table id='qscores' class='board sortable'><thead><tr>",
           *[th(_BOARD_HEADS.get(c, c.replace("_", " ")), title) for c, title, _ in cols], "</tr></thead><tbody>"]
    for r in board.iter_rows(named=True):
        out.append(f"<tr class='row'>{''.join(td(c, *f(r)) for c, _, f in cols)}</tr>")
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
           *[th(h) for h in ("encoder", "dataset", "features left out", "largest |z| clean",
                              "largest |z| (condition)", "tied test scores > 5 %")], "</tr></thead><tbody>"]
    for r in health.iter_rows(named=True):
        worst = (f"{num(r.get('max_scaled'), '.1f')} ({r.get('max_scaled_condition')})"
                 if r.get("max_scaled") is not None else "n/a")
        out.append("<tr>" + "".join(td(c, t) for c, t in (
            ("encoder", r["encoder"]), ("dataset", r["dataset"]), ("num", num(r.get("features_left_out"), "d")),
            ("num", num(r.get("max_scaled_clean"), ".1f")), ("num", worst), ("text", r.get("tied") or "none")))
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
    ref = leaderboard.reference(board, reference)
    cols = _board_columns(board, ref)
    out = ["<div class='scroll'><table id='leaderboard' class='board sortable'><thead><tr>",
           *[th(_BOARD_HEADS[c], title) for c, title, _ in cols], "</tr></thead><tbody>"]
    for r in board.iter_rows(named=True):
        cells = "".join(td(c, *f(r)) for c, _, f in cols)
        out.append(f"<tr class='row{' reference' if r['encoder'] == ref else ''}' data-encoder='{esc(r['encoder'])}'>"
                   f"{cells}</tr>")
    out.append("</tbody></table></div>")
    missing = [c for c, *_ in _BOARD_META if not _has(board, c) and (c != "revision" or _revision_expected(board))]
    if missing:
        out.append(f"<p class='absent' id='no-metadata'>Not in these scores: {esc(', '.join(missing))}. The store "
                   "records cost (parameters, FLOPs, width, throughput, device) and the model's revision, licence "
                   "and gated status when it is extracted by a crs that measures them; re-run `crs extract` and "
                   "`crs score` to show them here (random-weight and built-in encoders have no hub revision: "
                   "theirs stays empty).</p>")
    return "".join(out)


def scale_note(board: pl.DataFrame, settings: dict, reference: str | None) -> str:
    """What a CRS of 50 means, with this run's reference and its own score (docs/crs-v1.md section 3)."""
    ref_row = board.filter(pl.col("encoder") == reference) if reference else pl.DataFrame()
    who = (f"the reference encoder {reference}" if reference else "the per-axis median over the encoders")
    own = float(ref_row["crs"][0]) if ref_row.height and ref_row["crs"][0] is not None else None
    return ("<p id='scale'><b>Reading the scale.</b> Every q-score is measured against " + esc(who)
            + " (q = 0). " + esc(verdict.scale_sentence(reference or settings.get("reference"), own))
            + " Above 50 is better than the reference on balance, below 50 worse; CRS is a relative score of this "
            "comparison set, not a probability or an accuracy.</p>")


def no_tier_note(board: pl.DataFrame) -> str:
    """A sentence under the board when the bootstrap left no interval, so no best set was given."""
    if "tier" not in board.columns or not board["tier"].is_null().any():
        return ""
    return ("<p class='absent' id='no-tier'>No best set: some bootstrap replicates have no CRS (a test split "
            "too small for the bootstrap unit), so the intervals are empty and no set for the best is given; see "
            "the warnings at the end of the page.</p>")


def per_dataset_html(board: pl.DataFrame) -> str:
    if not board.height:
        return "<p class='absent'>No per-dataset scores in the results.</p>"
    parts = []
    head = ["rank", "encoder", "CRS", "AUROC", "AUROC rank", *SYMBOLS, *[f"q {x}" for x in SYMBOLS], "seeds"]
    for (dataset,), g in board.group_by("dataset", maintain_order=True):
        parts.append(f"<h4>{esc(dataset)}</h4><div class='scroll'><table class='board per-dataset sortable' "
                     f"data-dataset='{esc(dataset)}'><thead><tr>" + "".join(th(h) for h in head)
                     + "</tr></thead><tbody>")
        for r in g.iter_rows(named=True):
            cells = [(num(r["crs_rank"], "g"), r["crs_rank"]), (r["encoder"], r["encoder"], "encoder"),
                     (num(r["crs"], ".1f"), r["crs"]), (num(r["auroc"], ".3f"), r["auroc"]),
                     (num(r["auroc_rank"], "g"), r["auroc_rank"]), *[(num(r[a], ".3f"), r[a]) for a in AXES],
                     *[(num(r[f"q_{a}"], "+.3f"), r[f"q_{a}"]) for a in AXES],
                     (num(r.get("n_seeds"), "d"), r.get("n_seeds"))]
            parts.append("<tr>" + "".join(td(c[2] if len(c) > 2 else "c", c[0], c[1]) for c in cells) + "</tr>")
        parts.append("</tbody></table></div>")
    return "".join(parts)


def test_sets_html(sizes: pl.DataFrame) -> str:
    """Images per dataset and split, from the run records."""
    if not sizes.height:
        return ("<p class='absent' id='no-test-sets'>Test-set sizes are not known: the results folder has no "
                "run records (they are written by `crs probe`).</p>")
    out = ["<div class='scroll'><table id='test-sets' class='board sortable'><thead><tr>", th("dataset"), th("split"),
           th("images"), "</tr></thead><tbody>"]
    for r in sizes.iter_rows(named=True):
        flag = " (differs between runs)" if r["varies"] else ""
        out.append("<tr>" + td("dataset", r["dataset"], r["dataset"]) + td("split", r["split"], r["split"])
                   + td("images", f"{num(r['images'], 'd')}{flag}", r["images"]) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)
