"""The report's figures and the numbers it adds, checked as a reader would look at them.

A tiny synthetic store scored against a named reference ("beta"), with cost columns added
to the encoder table as the store records them: every text fits inside its figure, the
reference is marked the same way everywhere, profiles join no axes, reliability panels
count their bins, the colour scale spans the data, retention intervals are the score's
seed draw (checked against a slow loop), and the verdict never says more than the best set.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from crs.scoring import figures as fg
from crs.scoring import report, verdict
from crs.scoring.options import ScoreOptions
from crs.scoring.run import METRIC_TABLE, score

QUALITY = {"alpha": 1.0, "beta": 0.7, "gamma": 0.4}
REF = "beta"
COST = {"parameters": [86_000_000, 22_000_000, 5_000_000], "gflops": [17.6, 4.6, 1.3],
        "width": [768, 384, 192], "images_per_s": [90.0, 310.0, 650.0], "device": ["cpu"] * 3}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, build_store_fn, save_records_fn):
    """report.Inputs of the synthetic run (reference beta), cost columns added, run-record extras read."""
    root = tmp_path_factory.mktemp("figures")
    store, records = build_store_fn(root / "s.zarr", QUALITY)
    results = root / "results"
    save_records_fn(results, records)
    scores = score(records, ScoreOptions(reference=REF, bootstrap=30), store=store)
    scores.write(results / "scores", metric_table=results / METRIC_TABLE)
    got = report.load(results)
    order = got.order
    got.tables["encoders"] = got.table("encoders").with_columns(
        **{k: pl.Series([v[list(QUALITY).index(e)] for e in order]) for k, v in COST.items()})
    report.add_from_records(got, results)
    return got, records, scores


@pytest.fixture(scope="module")
def drawn(inputs):
    got, _, _ = inputs
    secs = report.sections(got)
    assert not [s.absent for s in secs if s.absent]
    return {d.stem: d.figure for s in secs for d in s.figures}


def _texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_text_fits_inside_its_figure(drawn):
    for stem, fig in drawn.items():
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        w, h = fig.get_size_inches()
        tight = fig.get_tightbbox(canvas.get_renderer())  # everything drawn, in inches
        assert tight.x0 >= -0.02 and tight.y0 >= -0.02 and tight.x1 <= w + 0.02 and tight.y1 <= h + 0.02, \
            f"{stem}: something drawn reaches outside the figure ({tight} in a {w} x {h} in figure)"


def test_no_two_texts_overlap_in_any_figure(drawn):
    for stem, fig in drawn.items():
        assert fg.overlapping_texts(fig) == [], f"{stem}: texts printed over each other"


def _close_pair(enc: pl.DataFrame) -> pl.DataFrame:
    """The first two encoders of ``enc`` at (almost) the same cost, CRS, q D and q C: labels that would collide."""
    a, b = enc["encoder"][0], enc["encoder"][1]
    near = {c: enc.filter(pl.col("encoder") == a)[c][0] for c in
            ("gflops", "images_per_s", "crs", "q_discrimination", "q_calibration")}
    return enc.with_columns(**{c: pl.when(pl.col("encoder") == b).then(pl.lit(v * 1.01)).otherwise(pl.col(c))
                               for c, v in near.items()})


def test_labels_of_encoders_at_the_same_place_are_kept_apart(inputs):
    got, _, _ = inputs
    enc = _close_pair(got.table("encoders"))
    for fig in (fg.cost_quality(enc, REF), fg.pareto(enc, REF)):
        assert fg.overlapping_texts(fig) == []
    # the check itself sees a collision: two labels at one point
    fig = fg.pareto(enc, REF)
    ax = fig.axes[0]
    ax.annotate("one", (0, 0), xytext=(5, 5), textcoords="offset points")
    ax.annotate("one", (0, 0), xytext=(5, 5), textcoords="offset points")
    assert ("one", "one") in fg.overlapping_texts(fig)


def test_the_cost_figure_names_only_what_it_draws(inputs):
    got, _, _ = inputs
    enc = got.table("encoders")
    best = enc.sort("crs", descending=True)["encoder"][0]
    # the best encoder made the cheapest too: a front of one point, no line, so no legend and no dashed front named
    alone = enc.with_columns(gflops=pl.when(pl.col("encoder") == best).then(0.001).otherwise(pl.col("gflops")),
                             images_per_s=pl.when(pl.col("encoder") == best).then(1e5)
                             .otherwise(pl.col("images_per_s")))
    fig = fg.cost_quality(alone, REF)
    texts = [t.get_text() for t in fig.findobj(Text)]
    assert not any("dashed" in t or "front (dashed)" in t for t in texts), texts
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert sum(f"front: {best} alone" in t for t in texts) == 2  # said in each panel instead
    fig = fg.cost_quality(enc, REF)  # a front of two or more: the line is drawn and its legend names it
    for ax in (a for a in fig.axes if a.get_xlabel()):
        named = [t.get_text() for t in ax.get_legend().get_texts()]
        drawn_lines = [ln.get_label() for ln in ax.get_lines() if len(ln.get_xdata()) >= 2]
        assert named and set(named) <= set(drawn_lines), (named, drawn_lines)
    assert "dashed front" in fig.get_suptitle()


def test_the_reference_is_marked_the_same_way_in_every_figure(drawn):
    for stem, fig in drawn.items():
        named = [t.get_text() for t in _texts(fig) if REF in t.get_text()]
        assert all(f"{REF}{fg.REFERENCE_TAG}" in x for x in named), (stem, named)
        if stem != "weight_sensitivity":  # names only the encoders that lead somewhere
            assert named, f"{stem} does not show the reference"


def test_profiles_join_no_axes_and_draw_every_interval(drawn, inputs):
    got, _, _ = inputs
    fig = drawn["profiles"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == len(QUALITY)
    for ax in panels:
        for line in ax.get_lines():
            assert line.get_linestyle() in ("None", "none", ""), f"{ax.get_title()}: a line joins the axes"
    enc = got.table("encoders")
    wide = [a for a in ("discrimination", "calibration", "label_efficiency", "robustness")
            if (enc[f"{a}_high"] - enc[f"{a}_low"]).max() > 1e-6]
    bars = sum(len(c.get_segments()) for ax in panels for c in ax.collections)
    assert bars >= len(wide)  # every axis with an interval draws its bar


def test_reliability_panels_count_their_bins_and_give_the_ece(drawn, inputs):
    got, _, _ = inputs
    fig = drawn["reliability_d1"]
    pooled = fg.reliability_bins(got.table("reliability")).filter(pl.col("dataset") == "d1")
    ece = fg.ece_before_after(got.table("probe_metrics"), "d1")
    tops = [ax for ax in fig.axes if ax.get_title()]
    hists = [ax for ax in fig.axes if ax.get_ylabel() == "images"]
    assert len(tops) == len(hists) == len(QUALITY)
    for top, hist in zip(tops, hists, strict=True):
        e = top.get_title().removesuffix(fg.REFERENCE_TAG)
        before = pooled.filter((pl.col("encoder") == e) & ~pl.col("scaled"))["count"].sum()
        after = pooled.filter((pl.col("encoder") == e) & pl.col("scaled"))["count"].sum()
        heights = [p.get_height() for p in hist.patches]
        assert sum(heights) == before + after
        m = got.table("probe_metrics").filter((pl.col("encoder") == e) & (pl.col("condition") == "clean")
                                              & (pl.col("fraction") == 1.0))
        assert ece[e] == pytest.approx((m["ece"].mean(), m["ece_ts"].mean()))
        box = " ".join(t.get_text() for t in top.texts)
        assert f"ECE {ece[e][0]:.3f} before" in box and f"ECE {ece[e][1]:.3f} after" in box


def test_pareto_colours_span_the_observed_robustness(drawn, inputs):
    got, _, _ = inputs
    bar = [ax for ax in drawn["pareto"].axes if ax.get_label() == "<colorbar>"][0]
    q = got.table("encoders")["q_robustness"]
    lo, hi = bar.get_ylim()
    assert lo == pytest.approx(q.min()) and hi == pytest.approx(q.max())


def test_cost_front_and_figure(inputs):
    # hand-worked: cheaper-and-better dominates; equal cost keeps the better one only
    cost, crs = np.array([1.0, 2.0, 3.0, 2.0]), np.array([40.0, 50.0, 45.0, 49.0])
    assert fg.cost_front(cost, crs, higher_is_cheaper=False).tolist() == [True, True, False, False]
    assert fg.cost_front(cost, crs, higher_is_cheaper=True).tolist() == [False, True, True, False]
    got, _, _ = inputs
    fig = fg.cost_quality(got.table("encoders"), REF)
    axes = [ax for ax in fig.axes if ax.get_xlabel()]
    assert [ax.get_xscale() for ax in axes] == ["log", "log"]
    assert all(any(line.get_label() == "cost-quality front (dashed)" for line in ax.get_lines()) for ax in axes)
    for gflops in ([17.6, 4.6, 1.3], [0.0004, 1.8, 12.0]):  # within two decades and across five
        wide = fg.cost_quality(got.table("encoders").with_columns(gflops=pl.Series(gflops)), REF)
        canvas = FigureCanvasAgg(wide)
        canvas.draw()
        ax = [a for a in wide.axes if a.get_xlabel().startswith("GFLOPs")][0]
        lo, hi = ax.get_xlim()
        boxes = sorted((t.get_window_extent(canvas.get_renderer()) for t in ax.get_xticklabels()
                        if t.get_text() and lo <= t.get_position()[0] <= hi), key=lambda b: b.x0)
        assert len(boxes) >= 2 and all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), gflops  # no overlap
    with pytest.raises(fg.Absent, match="no cost data.*re-run `crs extract`"):
        fg.cost_quality(got.table("encoders").drop("gflops", "images_per_s"), REF)
    none = got.table("encoders").with_columns(gflops=pl.lit(None, pl.Float64), images_per_s=pl.lit(None, pl.Float64))
    with pytest.raises(fg.Absent, match="no cost data"):
        fg.cost_quality(none, REF)


def test_retention_intervals_are_the_scores_seed_draw(inputs):
    from crs.scoring.axes import retain_array
    from crs.scoring.bootstrap import draw_seeds, seed_scale

    got, records, scores = inputs
    s = got.settings["bootstrap"]
    seeds = got.settings["seeds"]
    by_cond, by_sev = report.retention_intervals(records, seeds, s["n"], s["seed"], s["confidence"])
    rob = scores.robustness.join(by_cond, on=["encoder", "dataset", "condition"])
    assert rob.height == scores.robustness.height
    draw = draw_seeds(len(seeds), s["n"], s["seed"])
    tail = 100 * (1 - s["confidence"]) / 2
    full = records.filter(pl.col("fraction") == 1.0)
    for r in rob.iter_rows(named=True):  # a slow loop over replicates, one seed sample at a time
        mine = full.filter((pl.col("encoder") == r["encoder"]) & (pl.col("dataset") == "d1")).sort("seed")
        d = mine.filter(pl.col("condition") == "clean")["auroc"].to_numpy()
        a = mine.filter(pl.col("condition") == r["condition"])["auroc"].to_numpy()
        per_seed = retain_array(a, d)
        assert per_seed.mean() == pytest.approx(r["retention"])
        wide = seed_scale(len(seeds))  # each seed's deviation widened (docs/crs-v1.md section 5)
        reps = [min(max(per_seed.mean() + wide * (per_seed[row].mean() - per_seed.mean()), 0), 1) for row in draw]
        assert r["retention_low"] == pytest.approx(np.percentile(reps, tail))
        assert r["retention_high"] == pytest.approx(np.percentile(reps, 100 - tail))
        assert r["retention_low"] <= r["retention"] <= r["retention_high"]
    assert (rob["retention_high"] - rob["retention_low"]).max() > 0  # seeds differ here: real intervals
    sev = by_sev.filter(pl.col("severity") == 1)
    assert sev.height == len(QUALITY)  # one perturbed family: its mean over families is itself
    one = rob.filter(pl.col("condition") == "gaussian_noise@1").sort("encoder")
    assert sev.sort("encoder")["retention_low"].to_list() == pytest.approx(one["retention_low"].to_list())


def test_test_set_sizes_come_from_the_run_records(inputs, make_table):
    got, records, _ = inputs
    sizes = got.table("test_sets")
    test = sizes.filter(pl.col("split") == "test")
    assert test["images"].to_list() == [records.filter(pl.col("condition") == "clean")["n_eval"].max()]
    assert sizes.filter(pl.col("split").str.starts_with("shift target d1_site2")).height == 1
    assert not sizes["varies"].any()
    mixed = make_table([{"encoder": e, "dataset": "d", "seed": 0, "fraction": 1.0, "condition": "clean",
                         "auroc": 0.8, "n_eval": n} for e, n in (("a", 50), ("b", 40))])
    out = report.test_sets(mixed).filter(pl.col("split") == "test")
    assert out["images"].to_list() == [50] and out["varies"].to_list() == [True]
    assert "differs between runs" in report.test_sets_html(report.test_sets(mixed))
    assert "id='no-test-sets'" in report.test_sets_html(pl.DataFrame())


def test_the_verdict_says_no_more_than_the_best_set(inputs):
    got, _, _ = inputs
    leader, others = got.order[0], got.order[1:]
    assert report.verdict_sentences(got) == verdict.sentences(got.verdict)
    # the verdict's rules on an encoder table without paired differences, only the tier column
    no_diffs = got.table("encoders").drop("crs_diff", "crs_diff_low", "crs_diff_high", strict=False)

    def with_tier(tier) -> str:
        return " ".join(verdict.sentences(verdict.build(no_diffs.with_columns(tier=tier), got.table("weight_leaders"),
                                                        got.table("weight_grid"), got.settings)))

    tied = with_tier(pl.lit(True))
    assert all(f"{e} against {leader}:" in tied for e in others)
    assert f"confidence {leader} is the best encoder" not in tied
    alone = with_tier(pl.col("encoder") == leader)
    assert "against" not in alone and f"With 95 % confidence {leader} is the best encoder" in alone


def test_zero_width_intervals_are_said_not_hidden(inputs):
    got, _, _ = inputs
    enc = got.table("encoders").with_columns(discrimination_low=pl.col("discrimination"),
                                             discrimination_high=pl.col("discrimination") + 1e-8)
    assert report.flat_intervals(enc)[:1] == ["D"]
    assert "--bootstrap-unit image" in report.flat_note(enc, {"bootstrap": {"unit": "seed"}})
    assert report.flat_note(got.table("encoders").with_columns(discrimination_high=pl.col("discrimination") + 0.1,
                                                               calibration_high=pl.col("calibration") + 0.1,
                                                               robustness_high=pl.col("robustness") + 0.1,
                                                               label_efficiency_high=pl.col("label_efficiency")
                                                               + 0.1), {}) == ""


def test_the_leaderboard_shows_cost_reference_and_sort_keys(inputs):
    got, _, _ = inputs
    board = report.leaderboard(got.table("encoders"))
    text = report.board_html(board, REF)
    assert "class='board sortable'" in text and "GFLOPs / image" in text and "images/s (extract)" in text
    row = text[text.index(f"data-encoder='{REF}'"):]
    crs = board.filter(pl.col("encoder") == REF)["crs"][0]
    assert f"data-sort='{crs}'>{crs:.1f} (reference)</td>" in row[:row.index("</tr>")]
    assert "id='no-metadata'" in text and "licence" in text  # no revision/licence/gated in these scores
    assert {"gflops", "images_per_s", "parameters"} <= set(board.columns)
    older = report.board_html(report.leaderboard(got.table("encoders").drop(*COST, "reference")), None)
    assert "GFLOPs" not in older and "(reference)" not in older


def test_the_missing_revision_is_named_only_where_an_encoder_should_have_one(inputs):
    got, _, _ = inputs
    enc = got.table("encoders").with_columns(licence=pl.lit("mit"), gated=pl.lit(False),
                                             revision=pl.lit(None, pl.String))
    none_expected = report.board_html(report.leaderboard(enc.with_columns(revision_expected=pl.lit(False))), REF)
    assert "id='no-metadata'" not in none_expected  # random-weight and built-in encoders have no hub revision
    one_expected = enc.with_columns(revision_expected=pl.col("encoder") == REF)
    text = report.board_html(report.leaderboard(one_expected), REF)
    assert "id='no-metadata'" in text and "Not in these scores: revision" in text
    older = report.board_html(report.leaderboard(enc), REF)  # scores that do not say whether a revision is expected
    assert "Not in these scores: revision" in older


def test_q_scores_sit_in_their_own_table_and_diagnostics_beside_the_leaderboard(inputs):
    got, _, _ = inputs
    board = report.leaderboard(got.table("encoders"))
    text = report.board_html(board, REF)
    assert "q D" not in text and "q R" not in text  # the leaderboard fits a laptop's width
    q = report.q_html(board)
    assert "id='qscores'" in q and all(f">q {s}<" in q for s in "DCLR") and "worst axis" in q
    health = pl.DataFrame({"encoder": [REF], "dataset": ["d1"], "features_left_out": [3], "max_scaled_clean": [4.0],
                           "max_scaled": [37.5], "max_scaled_condition": ["shift:d1_site2"],
                           "tied": ["shift:d1_site2 45%"], "marked": ["R"]})
    marked = board.with_columns(ties_marked=pl.when(pl.col("encoder") == REF).then(pl.lit("R")).otherwise(pl.lit("")))
    diag = report.diagnostics_html(health, marked)
    assert "id='diagnostics-table'" in diag and "37.5 (shift:d1_site2)" in diag and "shift:d1_site2 45%" in diag
    assert "† in the leaderboard" in diag
    row = report.board_html(marked, REF)
    row = row[row.index(f"data-encoder='{REF}'"):]
    assert " †" in row[:row.index("</tr>")]
    assert report.diagnostics_html(health.clear(), board) == ""


def test_the_profiles_reference_is_the_versions_median():
    """The grey dash of the profiles figure is the reference q is relative to: v2's smoothed median of each
    dataset (docs/crs-v2.md section 2), v1's plain median, then the mean over datasets."""
    from crs.scoring.axes import AXES
    from crs.scoring.figures import reference_profile
    from crs.scoring.versions import v2

    rng = np.random.default_rng(2)
    x = rng.uniform(0.5, 1.0, (4, 2, 4))  # [encoder, dataset, axis]
    rows = [{"encoder": f"e{e}", "dataset": f"d{d}", **dict(zip(AXES, x[e, d], strict=True))}
            for e in range(4) for d in range(2)]
    per_dataset = pl.DataFrame(rows).sample(fraction=1.0, shuffle=True, seed=0)
    encoders = pl.DataFrame({"encoder": [f"e{e}" for e in range(4)]})
    got = reference_profile(encoders, per_dataset, "median", "2")
    np.testing.assert_allclose(got, v2.smoothed_median(x).mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(reference_profile(encoders, per_dataset, "median", "1"),
                               np.median(x, axis=0).mean(axis=0), atol=1e-12)
