"""The verdict: leader, best set, what decides a gap, what would settle it, how far the weights can move; words that
match the numbers."""

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


def table(q: np.ndarray, names, diffs=None, p_rank1=None, best=None) -> pl.DataFrame:
    """An encoder table as scoring writes it, from overall q [encoder, axis], paired-difference intervals and the
    best set (``best``: the names with tier true)."""
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
    if best is not None:
        t = t.with_columns(tier=pl.col("encoder").is_in(list(best)))
    return t


def test_the_best_set_is_the_tier_column_and_says_what_it_means():
    q = np.array([[0.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [-0.3, -0.2, 0.0, -0.1]])
    t = table(q, ["a", "b", "c"], diffs={"b": (0.0, 0.0), "a": (-2.0, 0.5), "c": (-9.0, -1.0)},
              p_rank1={"b": 0.7, "a": 0.3}, best=["a", "b"])
    v = verdict.build(t, settings=SETTINGS)
    assert v["leader"] == "b" and v["p_rank1"] == 0.7
    assert v["best_set"]["encoders"] == ["b", "a"] and v["best_set"]["confidence"] == 0.95
    assert v["best_set"]["meaning"].startswith("With 95 % confidence the best encoder is one of these (a simultaneous")
    assert [m["encoder"] for m in v["members"]] == ["a"] and v["members"][0]["in_best_set"] is True
    assert [b["encoder"] for b in v["behind"]] == ["c"] and v["behind"][0]["in_best_set"] is False
    words = verdict.sentences(v)
    assert words[0] == "b ranks first in 70 % of the bootstrap replicates and has the highest CRS ({:.1f}).".format(
        t["crs"][0])
    assert words[1].startswith("With 95 % confidence the best encoder is one of b and a (a simultaneous set")
    assert "a against b: difference" in words[2] and "[-2.0, +0.5]" in words[2]
    assert "Outside the set: c (difference" in " ".join(words)
    # the set decides membership, not the pairwise interval: c's interval may hold 0 and c still be out
    t = table(q, ["a", "b", "c"], diffs={"b": (0.0, 0.0), "a": (-2.0, 0.5), "c": (-9.0, 1.0)}, best=["b"])
    v = verdict.build(t, settings=SETTINGS)
    assert v["best_set"]["encoders"] == ["b"] and v["members"] == []
    assert "With 95 % confidence b is the best encoder" in " ".join(verdict.sentences(v))


@pytest.mark.parametrize(("p", "said"), [(0.9951, ">99 %"), (1.0, ">99 %"), (0.98, "98 %"), (0.004, "<1 %"),
                                         (0.0, "<1 %"), (0.006, "1 %")])
def test_p_rank1_is_never_rounded_to_a_certainty(p, said):
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    v = verdict.build(table(q, ["a", "b"], p_rank1={"a": p}, best=["a"]), settings=SETTINGS)
    assert verdict.sentences(v)[0].startswith(f"a ranks first in {said} of the bootstrap replicates")


def plan_of(**kw) -> dict:
    return {"encoder": "b", "images": {"derm": 1300, "cxr": 12000}, "image_factor": 4.3, "seeds": 23, "power": 0.8,
            "min_difference": 2.0, "current_power": 0.31, "only_seeds": False,
            "variance": {"image": 1.0, "seed": 0.2}, **kw}


def test_the_plan_in_words():
    assert verdict.settle_words(plan_of(), "a", 5) == (
        "About 1,300 test images on derm and 12,000 on cxr at 5 seeds, or about 23 seeds at today's test images, "
        "would settle b against a (80 % power to detect a true gap of 2 CRS points; 31 % today).")
    assert verdict.settle_words(plan_of(images=None, only_seeds=True, seeds=140), "a", 5).startswith(
        "No number of test images settles b against a at 5 seeds: about 140 seeds would (80 % power")
    assert verdict.settle_words(plan_of(seeds=None), "a", 5).startswith(
        "About 1,300 test images on derm and 12,000 on cxr at 5 seeds would settle b against a (")
    assert verdict.settle_words(plan_of(images={}, seeds=None), "a", None).startswith(
        "About 4.3 times today's test images at today's seeds would settle b against a (")
    three = plan_of(images={"a1": 100, "b2": 2000, "c3": 30000})
    assert verdict.settle_words(three, "a", 5).startswith(
        "About 100 test images on a1, 2,000 on b2 and 30,000 on c3 at 5 seeds")
    assert verdict.settle_words(plan_of(images=None, seeds=None, only_seeds=True), "a", 5).startswith(
        "Neither more test images nor more seeds alone would settle b against a; both must grow (")
    together = {"images": {"derm": 2400, "cxr": 24000}, "seeds": 12}
    grown = plan_of(images=None, seeds=None, only_seeds=True, together=together)
    assert verdict.settle_words(grown, "a", 5).startswith(
        "Neither more test images nor more seeds alone would settle b against a; both must grow: about 2,400 test "
        "images on derm and 24,000 on cxr with 12 seeds would (80 % power")
    assert "a real gap is likely smaller" in verdict.settle_words(plan_of(current_power=0.85), "a", 5)


def test_each_member_of_the_set_gets_its_plan_in_the_sentences():
    q = np.array([[0.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [-0.3, -0.2, 0.0, -0.1]])
    t = table(q, ["a", "b", "c"], diffs={"b": (0.0, 0.0), "a": (-2.0, 0.5), "c": (-9.0, -1.0)}, best=["a", "b"])
    plan = plan_of(encoder="a")
    v = verdict.build(t, settings={**SETTINGS, "seeds": [0, 1, 2, 3, 4]}, settle=[plan])
    assert v["settle"] == [plan] and v["n_seeds"] == 5
    words = verdict.sentences(v)
    assert verdict.settle_words(plan, "b", 5) in words
    assert words.index(verdict.settle_words(plan, "b", 5)) == 3  # after the set and the member's gap
    # the seed bootstrap makes no plan, and the verdict says so
    seed = verdict.build(t, settings={**SETTINGS, "bootstrap": {"confidence": 0.95, "unit": "seed"}})
    assert seed["settle"] == [] and verdict.NO_PLAN in seed["notes"]


def test_the_axis_that_makes_the_whole_gap_decides_it():
    # b equals a except on calibration, where it is behind: giving b a's calibration closes the whole gap
    q = np.array([[0.2, 0.3, 0.1, 0.2], [0.2, -0.1, 0.1, 0.2], [-0.5, -0.5, -0.5, -0.5]])
    t = table(q, ["a", "b", "c"], diffs={"b": (-5.0, 1.0), "c": (-30.0, -10.0)}, best=["a", "b"])
    v = verdict.build(t, settings=SETTINGS)
    (m,) = v["members"]
    assert [d["axis"] for d in m["deciding_axes"]] == ["calibration"]
    effects = verdict.axis_effects(q, 0, 1, W)
    gap = core.components(q, W).crs[0] - core.components(q, W).crs[1]
    assert effects[AXES.index("calibration")] == pytest.approx(gap)
    assert "calibration (q -0.10 vs +0.30)" in " ".join(verdict.sentences(v))


def test_an_axis_where_the_member_is_ahead_is_named_as_such():
    q = np.array([[0.4, 0.4, 0.0, 0.4], [0.0, 0.0, 0.3, 0.0]])
    t = table(q, ["a", "b"], diffs={"b": (-40.0, 3.0)}, best=["a", "b"])
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


def test_no_intervals_means_no_set():
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    t = table(q, ["a", "b"]).with_columns(tier=pl.lit(None, dtype=pl.Boolean))
    v = verdict.build(t, settings=SETTINGS)
    assert v["intervals"] is False and v["best_set"] is None and v["members"] == []
    words = " ".join(verdict.sentences(v))
    assert "cannot say which encoders could be the best" in words
    assert "confidence" not in words
    assert verdict.build(table(q, ["a", "b"]), settings=SETTINGS)["best_set"] is None  # no tier column at all


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
    crs_b = float(table(q, ["a", "b"]).filter(pl.col("encoder") == "b")["crs"][0])
    assert crs_b < 50  # a dominates b: the reference's own row is below 50, and the sentence says why
    assert f"CRS 50 is b's level on every axis; b itself scores {crs_b:.1f} because it is dominated more than it " \
           "dominates." in words
    words = verdict.sentences(verdict.build(table(q, ["a", "b"]), settings={**SETTINGS, "reference": "a"}))
    assert any("a itself scores" in s and "because it dominates more than it is dominated" in s for s in words)
    words = verdict.sentences(verdict.build(table(q, ["a", "b"]), settings={**SETTINGS, "reference": "median"}))
    assert any("per-axis median encoder" in s for s in words)


def test_a_collapse_of_every_encoder_on_a_shift_target_is_in_the_verdict():
    def robustness(aurocs: dict[str, float], target="shift:site2") -> pl.DataFrame:
        rows = [{"encoder": e, "dataset": "digits", "condition": c, "kind": k, "auroc": a}
                for e, a in aurocs.items() for c, k, a in ((target, "shift", a), ("blur@3", "perturbed", 0.3))]
        return pl.DataFrame(rows)

    gone = verdict.shift_collapse(robustness({"a": 0.44, "b": 0.53, "c": 0.599}))
    assert gone == [{"dataset": "digits", "target": "site2", "auroc_low": 0.44, "auroc_high": 0.599,
                     "encoders": 3, "level": verdict.COLLAPSE_AUROC}]
    # one encoder that holds up on the shift target: no collapse of every encoder (perturbations do not count)
    assert verdict.shift_collapse(robustness({"a": 0.44, "b": 0.53, "c": 0.61})) == []
    assert verdict.shift_collapse(pl.DataFrame()) == []
    q = np.array([[0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    v = verdict.build(table(q, ["a", "b"]), settings=SETTINGS)
    assert not any("near chance" in s for s in verdict.sentences(v))
    v["shift_collapse"] = gone
    said = [s for s in verdict.sentences(v) if "near chance" in s]
    assert said == ["Every encoder is near chance on site2 (the shift target of digits; AUROC 0.44-0.60), all below "
                    "0.60 where 0.5 is chance, so none of them can be trusted at that site, whatever its CRS."]


def test_every_member_and_only_members_are_in_the_set_sentence():
    rng = np.random.default_rng(3)
    q = rng.uniform(-0.3, 0.3, size=(6, 4))
    names = list("abcdef")
    lead = table(q, names)["encoder"][0]
    best = [lead, *rng.choice([n for n in names if n != lead], size=2, replace=False)]
    v = verdict.build(table(q, names, best=best), settings=SETTINGS)
    assert sorted(v["best_set"]["encoders"]) == sorted(best) and v["best_set"]["encoders"][0] == lead
    text = " ".join(verdict.sentences(v))
    for m in v["members"]:
        assert f"{m['encoder']} against {lead}:" in text
    for b in v["behind"]:
        assert f"{b['encoder']} against" not in text and f"{b['encoder']} (difference" in text
