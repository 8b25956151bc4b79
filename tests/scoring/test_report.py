"""``crs report`` without a browser: figures, tables, the page's text, the command line.

Built once per module from a tiny synthetic store scored with ``crs.scoring.run.score``
(one multi-class dataset with a shift target, three encoders, three seeds).
"""

from __future__ import annotations

import html
import io
import json
import re
import shutil
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from crs.cli import app
from crs.foundations.records import records_dir
from crs.scoring import figures as fg
from crs.scoring import report
from crs.scoring.axes import AXES
from crs.scoring.options import ScoreOptions
from crs.scoring.run import METRIC_TABLE, score
from crs.scoring.scoreset import new_generation
from crs.scoring.verdict import settle_words

QUALITY = {"a": 1.0, "b": 0.7, "c": 0.4}
EXPECTED_FIGURES = {"profiles", "rank_change", "pareto", "reliability_d1", "label_efficiency", "robustness_d1",
                    "shift_gap", "rank_distribution", "weight_sensitivity", "robustness_grid_d1"}
NO_COST = {"cost"}  # the synthetic store records no cost: the cost section says so instead of a figure


@pytest.fixture(scope="module")
def scored(tmp_path_factory, build_store_fn, save_records_fn):
    """(results folder, store path, Scores) of the synthetic benchmark."""
    root = tmp_path_factory.mktemp("report")
    store, records = build_store_fn(root / "s.zarr", QUALITY)
    results = root / "results"
    save_records_fn(results, records)
    scores = score(records, ScoreOptions(reference="median", bootstrap=40), store=store)
    scores.write(results / "scores", metric_table=results / METRIC_TABLE)
    return results, root / "s.zarr", scores


@pytest.fixture(scope="module")
def written(scored, tmp_path_factory):
    results, _, _ = scored
    out = tmp_path_factory.mktemp("out")
    return out, report.write_report(results, out, quiet=True)


def test_summary_names_the_page_every_figure_and_table(written):
    out, summary = written
    assert {"html", "figures", "tables", "seconds"} <= set(summary)
    assert summary["html"] == str(out / "report.html") and (out / "report.html").is_file()
    stems = {p.split("/")[-1].removesuffix(".png") for p in summary["figures"]}
    assert stems == EXPECTED_FIGURES
    assert set(summary["absent"]) == NO_COST and "no cost data" in summary["absent"]["cost"][0]
    for path in summary["tables"]:
        assert path.endswith((".csv", ".parquet"))
    names = {p.split("/")[-1] for p in summary["tables"]}
    for t in ("leaderboard", "leaderboard_per_dataset", "rank_distribution", "reliability_pooled"):
        assert {f"{t}.csv", f"{t}.parquet"} <= names


def test_every_png_decodes(written):
    _, summary = written
    for path in summary["figures"]:
        with Image.open(path) as im:
            im.load()
            assert im.format == "PNG" and im.width > 200 and im.height > 100
            # not a blank canvas: a figure has ink in more than one colour
            assert len(im.convert("RGB").getcolors(maxcolors=1 << 24)) > 10


def test_every_axes_has_both_labels(scored):
    results, _, _ = scored
    secs = report.sections(report.load(results))
    figs = [(d.stem, d.figure) for sec in secs for d in sec.figures]
    assert {stem for stem, _ in figs} == EXPECTED_FIGURES
    for stem, fig in figs:
        assert fig.axes, stem
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                assert ax.get_ylabel() or ax.get_xlabel(), f"{stem}: colour bar without a label"
            else:
                assert ax.get_xlabel() and ax.get_ylabel(), f"{stem}: axes {ax.get_title()!r} lacks a label"


def test_tables_equal_the_score_files(scored, written):
    results, _, scores = scored
    out, _ = written
    enc = pl.read_parquet(results / "scores" / "encoders.parquet")
    board = pl.read_parquet(out / "tables" / "leaderboard.parquet")
    assert_frame_equal(board, enc.select(board.columns))
    assert {"crs", "crs_low", "crs_high", "tier", "rank_low", "rank_high", "auroc", "auroc_rank", *AXES,
            *[f"q_{a}" for a in AXES]} <= set(board.columns)
    assert_frame_equal(pl.read_csv(out / "tables" / "leaderboard.csv"), board, check_dtypes=False)
    per = pl.read_parquet(out / "tables" / "leaderboard_per_dataset.parquet")
    src = pl.read_parquet(results / "scores" / "per_dataset.parquet")
    joined = per.join(src, on=["encoder", "dataset"], suffix="_src")
    assert joined.height == src.height
    for c in ("crs", *AXES, *[f"q_{a}" for a in AXES]):
        np.testing.assert_array_equal(joined[c].to_numpy(), joined[f"{c}_src"].to_numpy())
    np.testing.assert_array_equal(per["auroc"].to_numpy(), per["discrimination"].to_numpy())
    assert_frame_equal(pl.read_parquet(out / "tables" / "rank_distribution.parquet"), scores.rank_distribution)


def test_rank_distribution_agrees_with_the_rank_intervals(scored):
    _, _, scores = scored
    dist, enc = scores.rank_distribution, scores.encoders
    totals = dist.group_by("encoder").agg(pl.col("share").sum(), pl.col("replicates").sum())
    assert np.allclose(totals["share"].to_numpy(), 1.0) and set(totals["replicates"]) == {40}
    for row in enc.iter_rows(named=True):
        mine = dist.filter(pl.col("encoder") == row["encoder"])
        assert row["rank_low"] in mine["rank"].to_list() and row["rank_high"] in mine["rank"].to_list()
        if (mine["rank"] % 1 == 0).all():  # no ties: P(rank 1) is the share of first places
            first = mine.filter(pl.col("rank") == 1.0)["share"].sum()
            assert first == pytest.approx(row["p_rank1"])


def test_page_is_self_contained_and_shows_the_leaderboard(scored, written):
    _, _, scores = scored
    out, summary = written
    text = (out / "report.html").read_text(encoding="utf-8")
    # one inline script (table sorting), nothing fetched: the tables are in the HTML without it
    assert text.lower().count("<script") == 1 and "<script>" in text and "<script src" not in text.lower()
    assert not re.search(r"""(src|href)=['"](https?:)?//""", text)
    imgs = re.findall(r"<img src='([^']*)' alt='([^']*)'>", text)
    assert len(imgs) == len(summary["figures"]) and all(s.startswith("data:image/png;base64,") for s, _ in imgs)
    assert all(len(alt) > 40 for _, alt in imgs)
    caps = re.findall(r"<figcaption>(.*?)</figcaption>", text)
    assert len(caps) == len(imgs) and not any(c.startswith(tuple(EXPECTED_FIGURES)) for c in caps)
    rows = re.findall(r"<tr class='row[^']*' data-encoder='([^']*)'>.*?"
                      r"<td class='crs' data-sort='([^']*)'>([^<]*)</td>", text)
    assert rows == [(r["encoder"], str(r["crs"]), f"{r['crs']:.1f}") for r in scores.encoders.iter_rows(named=True)]
    leader = scores.encoders["encoder"][0]
    verdict = re.search(r"<section id='verdict'.*?</section>", text).group(0)
    assert f"{leader} ranks first in" in verdict and "has the highest CRS" in verdict
    # the page shows the set for the best and, for each other member, the plan that would settle it
    assert "95 % confidence" in verdict and "a simultaneous set" in verdict
    assert scores.verdict["settle"]  # the fixture has a tie to settle
    for p in scores.verdict["settle"]:
        assert html.escape(settle_words(p, leader, len(scores.settings["seeds"])), quote=False) in verdict
    assert text.index("id='verdict'") < text.index("id='leaderboard'") < text.index("id='fig-")
    assert "id='scale'" in text and "CRS 50" in text and "id='test-sets'" in text
    s = scores.settings
    for needle in (f"{s['bootstrap']['n']} replicates, unit {s['bootstrap']['unit']}", "per-axis median",
                   "Methods", f"CRS v{s['crs_version']}", f"docs/crs-v{s['crs_version']}.md"):  # its definition
        assert needle in text, needle
    if s["crs_version"] == "2":  # the q sentence gives the constants the scores recorded
        from crs.scoring.crs import constants

        assert s["crs_constants"] == constants("2")
        assert f"max(1 − x_ref, {s['crs_constants']['q_floor']:.3g})" in text
        assert f"<b>C</b> = 1 − {s['crs_constants']['calibration_scale']:.3g} S, S the debiased squared" in text
        assert f"(q + 1) / 2 + {s['crs_constants']['balance_offset']:.3g}, less" in text


def _urls_and_ids(text: str) -> tuple[list[tuple[str, str, str]], set[str]]:
    """(tag, attribute, value) of every href and src of a page, and the ids it holds."""
    from html.parser import HTMLParser

    urls, ids = [], set()

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            for name, value in attrs:
                if name in ("href", "src"):
                    urls.append((tag, name, value or ""))
                elif name == "id":
                    ids.add(value)

    Parser().feed(text)
    return urls, ids


def test_the_page_links_only_to_itself_and_what_ships_beside_it(written):
    """Shared on its own or with its folder, no link of the page breaks: an in-page anchor that exists, an
    embedded data URL, or a file written beside the page (never file:// into a checkout, never the web)."""
    out, _ = written
    text = (out / "report.html").read_text(encoding="utf-8")
    urls, ids = _urls_and_ids(text)
    assert any(a == "href" for _, a, _ in urls) and any(a == "src" for _, a, _ in urls)
    for tag, attr, url in urls:
        if url.startswith("#"):
            assert url[1:] in ids, f"<{tag} {attr}={url!r}>: no such id in the page"
        elif not url.startswith("data:"):
            assert ":" not in url and not url.startswith("/") and (out / url).is_file(), \
                f"<{tag} {attr}={url!r}> leaves the page"
    assert "url(" not in text.split("<style>")[1].split("</style>")[0]  # the style fetches nothing either
    # the check sees a link that leaves: the spec link a checkout used to give
    bad, _ = _urls_and_ids("<a href='file:///home/x/docs/crs-v2.md'>spec</a>")
    assert not bad[0][2].startswith(("#", "data:"))


def test_every_table_scrolls_in_its_own_box_and_every_figure_can_open_full_size(written):
    """On a phone (390 px) a wide table scrolls sideways inside its box, not the page; a figure fits the width and
    a tap shows it at full size (report.js toggles the figure's class 'full')."""
    out, _ = written
    text = (out / "report.html").read_text(encoding="utf-8")
    assert text.count("<table") == text.count("<div class='scroll'><table") > 3
    assert "div.scroll{overflow-x:auto}" in text
    figures = re.findall(r"<figure id='[^']*'>(.*?)</figure>", text)
    assert figures and all(f.startswith("<div class='zoom' tabindex='0' role='button'") for f in figures)
    assert "figure.full img{max-width:none}" in text and "classList.toggle('full')" in text


def test_the_methods_describe_v2_scores_with_the_constants_they_were_made_with():
    from crs.scoring import crs as core
    from crs.scoring import versions

    now = versions.get("2").words.q(versions.constants("2"))
    assert f"max(1 − x_ref, {core.Q_FLOOR:.3g})" in now and f"{1 / core.Q_FLOOR:.3g} times" in now


def _rescored(results, scores, tmp_path, **empty):
    """A copy of ``results`` whose score set lacks the tables named in ``empty`` (as a score that had none)."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    replace(scores, **{k: pl.DataFrame() for k in empty}, generation=new_generation()).write(copy / "scores")
    return copy


@pytest.mark.parametrize("lacks", ["verdict", "crs_version", "crs_constants"])
def test_scores_without_their_verdict_version_or_constants_are_refused_not_guessed(scored, tmp_path, lacks):
    """The report rebuilt a missing verdict from the tables, read a missing CRS version as v1 and described v2
    scores without recorded constants with older ones: each is refused now, naming the file and `crs score`."""
    import json
    import shutil

    from crs.scoring import scoreset

    results = tmp_path / "results"
    shutil.copytree(scored[0], results)
    meta = results / "scores" / "scores.json"
    doc = {k: v for k, v in json.loads(meta.read_text()).items() if k != scoreset.DOC_DIGEST}
    assert doc["settings"]["crs_version"] == "2"
    if lacks == "verdict":
        del doc["verdict"]
    else:
        del doc["settings"][lacks]
    meta.write_text(json.dumps({**doc, scoreset.DOC_DIGEST: scoreset.doc_digest(doc)}))
    with pytest.raises(scoreset.MissingScores, match=rf"scores.json lacks [a-z_.]*{lacks}.*`crs score --results "):
        report.load(results)
    r = CliRunner().invoke(app, ["report", "--results", str(results), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and lacks in r.output and not (tmp_path / "out" / "report.html").exists(), r.output


def test_absent_reliability_is_said_and_the_store_fills_it(scored, tmp_path):
    results, store, scores = scored
    copy = _rescored(results, scores, tmp_path, reliability=True)
    summary = report.write_report(copy, tmp_path / "no_store", quiet=True)
    assert "reliability" in summary["absent"] and len(summary["figures"]) == len(EXPECTED_FIGURES) - 1
    text = (tmp_path / "no_store" / "report.html").read_text(encoding="utf-8")
    assert "Not drawn: no reliability bins in the results" in text and "--store" in text
    summary = report.write_report(copy, tmp_path / "with_store", store=str(store), quiet=True)
    assert "reliability" not in summary["absent"]
    assert any("reliability_d1.png" in p for p in summary["figures"])
    assert any("computed by the report from the store" in n for n in summary["notes"])


def test_figure_functions_say_what_is_absent():
    with pytest.raises(fg.Absent, match="rank distribution.*re-run `crs score`"):
        fg.rank_distribution(pl.DataFrame(), ["a"])
    with pytest.raises(fg.Absent, match="reliability bins.*--store"):
        fg.reliability_bins(pl.DataFrame())
    with pytest.raises(fg.Absent, match="no shift condition"):
        fg.shift_gap(pl.DataFrame(), pl.DataFrame({"encoder": ["a"], "dataset": ["d"], "kind": ["perturbed"],
                                                   "auroc": [0.7], "condition": ["jpeg@1"]}), ["a"])


def test_reliability_bins_pool_by_count():
    rel = pl.DataFrame({"encoder": ["a", "a"], "dataset": ["d", "d"], "condition": ["clean", "clean"],
                        "scaled": [False, False], "seed": [0, 1], "bin": [3, 3], "count": [1, 3],
                        "confidence": [0.2, 0.24], "accuracy": [0.0, 1.0]})
    out = fg.reliability_bins(rel)
    assert out.height == 1 and out["count"][0] == 4
    assert out["confidence"][0] == pytest.approx((0.2 + 3 * 0.24) / 4)
    assert out["accuracy"][0] == pytest.approx(0.75)


def test_palette_styles_are_distinct_for_many_encoders():
    names = [f"e{i}" for i in range(16)]
    st = fg.styles(names)
    assert len({(v["color"], v["marker"]) for v in st.values()}) == 16


def test_cli_report(scored, tmp_path):
    results, _, _ = scored
    runner = CliRunner()
    r = runner.invoke(app, ["report", "--results", str(results), "--out", str(tmp_path / "r"), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert (tmp_path / "r" / "report.html").is_file() and len(summary["figures"]) == len(EXPECTED_FIGURES)
    with Image.open(io.BytesIO((tmp_path / "r" / "figures" / "pareto.png").read_bytes())) as im:
        assert im.width > 0
    r = runner.invoke(app, ["report", "--results", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "run `crs score --results" in r.output


def test_cli_says_what_was_not_drawn_even_when_quiet(scored, tmp_path):
    results, _, scores = scored
    copy = _rescored(results, scores, tmp_path, rank_distribution=True)
    r = CliRunner().invoke(app, ["report", "--results", str(copy), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "not drawn (uncertainty): no bootstrap rank distribution" in " ".join(r.output.split())
    assert (copy / "report" / "report.html").is_file()  # the default --out


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_rank_distribution_counts_every_replicate_once(b, n, seed):
    from crs.scoring.analysis import rank_distribution
    from crs.scoring.ranks import rank_desc

    crs = np.random.default_rng(seed).integers(0, 4, size=(b, n)).astype(float)  # ties on purpose
    rank = rank_desc(crs)
    names = [f"e{i}" for i in range(n)]
    dist = rank_distribution(names, rank)
    for i, e in enumerate(names):
        mine = dist.filter(pl.col("encoder") == e)
        assert mine["replicates"].sum() == b and mine["share"].sum() == pytest.approx(1.0)
        for r in mine.iter_rows(named=True):
            assert r["replicates"] == int((rank[:, i] == r["rank"]).sum())


def test_missing_scores_and_run_records_are_user_errors(tmp_path):
    from crs.foundations import records
    from crs.foundations.errors import UserError

    with pytest.raises(UserError, match="no scores under"):
        report.write_report(tmp_path, tmp_path / "out", quiet=True)
    with pytest.raises(UserError, match="no run records under"):
        records.read(tmp_path)


def test_the_leaderboard_says_when_no_tier_was_assigned(scored):
    _, _, scores = scored
    board = report.leaderboard(scores.encoders)
    assert "id='no-tier'" not in report.no_tier_note(board) and "no set" not in report.board_html(board)
    none = board.with_columns(tier=pl.lit(None, pl.Boolean), crs_low=float("nan"), tie_group=pl.lit(None, pl.String))
    assert report.board_html(none).count(">no set (no interval)</td>") == board.height
    assert "No best set" in report.no_tier_note(none)


def test_results_without_run_records_still_report_and_say_what_is_missing(scored, tmp_path):
    results, _, _ = scored
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    shutil.rmtree(records_dir(copy))
    summary = report.write_report(copy, tmp_path / "out", quiet=True)
    assert {p.split("/")[-1].removesuffix(".png") for p in summary["figures"]} == EXPECTED_FIGURES
    assert any("no test-set sizes or robustness intervals" in n for n in summary["notes"])
    text = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "id='no-test-sets'" in text and "No intervals: the results folder has no run records" in text


def test_a_rerun_removes_the_temporaries_a_killed_report_left(scored, tmp_path):
    results, _, _ = scored
    out = tmp_path / "out"
    report.write_report(results, out, quiet=True)
    # what kill -9 leaves in the middle of crs.foundations.files.atomic_write: a temporary beside the final name
    stale = [out / "figures" / ".profiles.png.k1ll3d.tmp", out / "tables" / ".leaderboard.csv.x.tmp",
             out / ".report.html.y.tmp"]
    for f in stale:
        f.write_bytes(b"half a file")
    keep = out / "figures" / "notes.txt"  # not ours: left alone
    keep.write_text("mine")
    report.write_report(results, out, quiet=True)
    assert not any(f.exists() for f in stale) and keep.read_text() == "mine"
    assert not list(out.rglob("*.tmp"))


def test_the_scores_notes_are_on_the_page_beside_the_warnings(scored, tmp_path):
    results, _, scores = scored
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    note = "the calibration intervals are off-centre: a note the command line shows only with --verbose"
    settings = {**scores.settings, "notes": [note]}
    replace(scores, settings=settings, generation=new_generation()).write(copy / "scores")
    report.write_report(copy, tmp_path / "r", quiet=True)
    text = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "Warnings and notes from scoring and reporting" in text and note in text
