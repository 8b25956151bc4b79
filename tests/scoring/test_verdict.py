"""The verdict: leader, tier, what decides a gap, how far the weights can move; words that match the numbers."""

import itertools

import numpy as np
import polars as pl
import pytest

from crs.scoring import crs as core
from crs.scoring import verdict
from crs.scoring.axes import AXES

W = (1 / 3, 1 / 3, 1 / 3)
SETTINGS = {"reference": "a", "weights": dict(zip(verdict.COMPONENTS, W)), "bootstrap": {"confidence": 0.95},
            "crs_version": "1"}


def table(q: np.ndarray, names, diffs=None, p_rank1=None) -> pl.DataFrame:
    """An encoder table as scoring writes it, from overall q [encoder, axis] and paired-difference intervals."""
    comp = core.components(q, W)
    cols = {"encoder": list(names), "crs": comp.crs, "dominance": comp.dominance, "balance": comp.balance,
            "worst_axis": comp.worst_axis, **{f"q_{a}": q[:, k] for k, a in enumerate(AXES)}}
    t = pl.DataFrame(cols).sort("crs", descending=True)
    if diffs is not None:  # {name: (low, high)}
        lead = t["crs"][0]
        t = t.with_columns(
            crs_diff=pl.col("crs") - lead,
            crs_diff_low=pl.col("encoder").replace_strict({n: lo for n, (lo, hi) in diffs.items()}, default=None),
            crs_diff_high=pl.col("encoder").replace_strict({n: hi for n, (lo, hi) in diffs.items()}, default=None),
        )
    if p_rank1 is not None:
        t = t.with_columns(p_rank1=pl.col("encoder").replace_strict(p_rank1, default=0.0))
    return t


def test_tier_is_the_encoders_whose_difference_interval_holds_zero():
    q = np.array([[0.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [-0.3, -0.2, 0.0, -0.1]])
    t = table(q, ["a", "b", "c"], diffs={"b": (0.0, 0.0), "a": (-2.0, 0.5), "c": (-9.0, -1.0)},
              p_rank1={"b": 0.7, "a": 0.3})
    v = verdict.build(t, settings=SETTINGS)
    assert v["leader"] == "b" and v["tier"] == ["b", "a"] and v["p_rank1"] == 0.7
    assert [m["encoder"] for m in v["members"]] == ["a"] and v["members"][0]["separable"] is False
    assert [b["encoder"] for b in v["behind"]] == ["c"] and v["behind"][0]["separable"] is True
    words = " ".join(verdict.sentences(v))
    assert "a cannot be separated from b at 95 %" in words
    assert "difference" in words and "[-2.0, +0.5]" in words
    assert "c (difference" in words  # behind the tier, with its interval


def test_the_axis_that_makes_the_whole_gap_decides_it():
    # b equals a except on calibration, where it is behind: giving b a's calibration closes the whole gap
    q = np.array([[0.2, 0.3, 0.1, 0.2], [0.2, -0.1, 0.1, 0.2], [-0.5, -0.5, -0.5, -0.5]])
    t = table(q, ["a", "b", "c"], diffs={"b": (-5.0, 1.0), "c": (-30.0, -10.0)})
    v = verdict.build(t, settings=SETTINGS)
    (m,) = v["members"]
    assert [d["axis"] for d in m["deciding_axes"]] == ["calibration"]
    effects = verdict.axis_effects(q, 0, 1, W)
    gap = core.components(q, W).crs[0] - core.components(q, W).crs[1]
    assert effects[AXES.index("calibration")] == pytest.approx(gap)
    assert "calibration (q -0.10 vs +0.30)" in " ".join(verdict.sentences(v))


def test_an_axis_where_the_member_is_ahead_is_named_as_such():
    q = np.array([[0.4, 0.4, 0.0, 0.4], [0.0, 0.0, 0.3, 0.0]])
    t = table(q, ["a", "b"], diffs={"b": (-40.0, 3.0)})
    v = verdict.build(t, settings=SETTINGS)
    where = {d["axis"]: d["where"] for d in v["members"][0]["deciding_axes"]}
    assert where["label_efficiency"] == "ahead"
    assert "behind" in where.values()
    assert "it is ahead on label efficiency" in " ".join(verdict.sentences(v))


def _brute_force_margin(d: np.ndarray, w: np.ndarray, step: float) -> float:
    n = round(1 / step)
    best = np.inf
    for i, j in itertools.product(range(n + 1), repeat=2):
        if i + j > n:
            continue
        p = np.array([i, j, n - i - j]) / n
        if p @ d <= 1e-12:
            best = min(best, np.clip(p - w, 0, None).sum())  # weight moved = half the L1 distance
    return best


@pytest.mark.parametrize("seed", range(12))
def test_weight_move_is_the_least_move_a_fine_grid_finds(seed):
    rng = np.random.default_rng(seed)
    d = rng.normal(size=3)
    w = rng.dirichlet(np.ones(3))
    move = verdict.weight_move(d, w)
    brute = _brute_force_margin(d, w, 0.01)
    if move is None:  # no weighting changes the order: the grid finds none either
        assert np.isinf(brute)
        return
    new = np.asarray(move["weights"])
    assert new.sum() == pytest.approx(1) and (new >= -1e-12).all()
    assert new @ d == pytest.approx(0, abs=1e-9) or move["moved"] == 0
    assert np.clip(new - w, 0, None).sum() == pytest.approx(move["moved"])
    assert move["moved"] <= brute + 1e-9  # exact: never more than any grid point needs
    assert brute <= move["moved"] + 0.02  # and the grid gets within its resolution of it


def test_weight_margin_names_the_challenger_that_needs_the_least_move():
    q = np.array([[0.3, 0.3, -0.2, 0.3], [0.05, 0.05, 0.05, 0.05], [-0.5, -0.5, -0.5, -0.5]])
    t = table(q, ["a", "b", "c"], diffs={"a": (-9.0, -1.0), "b": (-9.0, -1.0), "c": (-30.0, -10.0)})
    v = verdict.build(t, settings=SETTINGS)
    m = v["weight_margin"]
    names = t["encoder"].to_list()  # best CRS first
    comp = t.select(verdict.COMPONENTS).to_numpy()
    moves = {n: verdict.weight_move(comp[0] - comp[i], np.asarray(W)) for i, n in enumerate(names) if i}
    best = min((mv["moved"], n) for n, mv in moves.items() if mv is not None)
    assert m is not None and (m["moved"], m["encoder"]) == pytest.approx(best) and m["encoder"] != v["leader"]
    i = names.index(m["encoder"])
    assert np.asarray(m["weights"]) @ (comp[0] - comp[i]) == pytest.approx(0, abs=1e-9)


def test_no_intervals_means_no_claim_of_separation():
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    t = table(q, ["a", "b"]).with_columns(tier=pl.lit(None, dtype=pl.Boolean))
    v = verdict.build(t, settings=SETTINGS)
    assert v["intervals"] is False and v["tier"] == [] and v["members"] == []
    words = " ".join(verdict.sentences(v))
    assert "cannot say whether any other encoder" in words
    assert "ahead of every other" not in words and "cannot be separated" not in words


def test_the_tier_column_alone_gives_the_tier_when_difference_intervals_are_absent():
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.05, 0.0], [-0.4, -0.4, -0.4, -0.4]])
    t = table(q, ["a", "b", "c"]).with_columns(tier=pl.col("encoder").is_in(["a", "b"]))
    v = verdict.build(t, settings=SETTINGS)
    assert v["tier"] == ["a", "b"] and [b["encoder"] for b in v["behind"]] == ["c"]


def test_one_encoder_empty_and_nan_tables():
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    one = table(q, ["a", "b"]).head(1)
    v = verdict.build(one, settings=SETTINGS)
    assert v["leader"] == "a" and v["weight_margin"] is None and v["members"] == []
    assert verdict.sentences(v)[0].startswith("a has the highest CRS")
    empty = verdict.build(pl.DataFrame(), settings=SETTINGS)
    assert empty["leader"] is None and verdict.sentences(empty)[0].startswith("No verdict")
    nan = table(q, ["a", "b"]).with_columns(crs=pl.Series([float("nan"), 40.0]))
    assert verdict.build(nan, settings=SETTINGS)["leader"] == "b"


def test_the_reference_sentence_says_what_50_means():
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    words = verdict.sentences(verdict.build(table(q, ["a", "b"]), settings={**SETTINGS, "reference": "b"}))
    assert any(s.startswith("CRS is relative to b: 50 is the level") for s in words)
    words = verdict.sentences(verdict.build(table(q, ["a", "b"]), settings={**SETTINGS, "reference": "median"}))
    assert any("median encoder" in s for s in words)


def test_every_member_sentence_matches_its_interval():
    rng = np.random.default_rng(3)
    q = rng.uniform(-0.3, 0.3, size=(6, 4))
    names = list("abcdef")
    lows = rng.uniform(-6, 1, size=6)
    diffs = {n: (float(lo), float(lo + rng.uniform(0.5, 6))) for n, lo in zip(names, lows)}
    t = table(q, names, diffs=diffs)
    lead = t["encoder"][0]
    diffs[lead] = (0.0, 0.0)
    t = table(q, names, diffs=diffs)
    v = verdict.build(t, settings=SETTINGS)
    for m in v["members"]:
        assert m["crs_diff_low"] <= 0 <= m["crs_diff_high"]
    for b in v["behind"]:
        assert not (b["crs_diff_low"] <= 0 <= b["crs_diff_high"])
    text = " ".join(verdict.sentences(v))
    for m in v["members"]:
        assert f"{m['encoder']} cannot be separated from {lead}" in text
