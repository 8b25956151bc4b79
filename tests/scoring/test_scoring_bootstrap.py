"""The paired seed bootstrap against a slow per-replicate loop; the tier, the set for the best (crs-v1.md s. 5)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import polars as pl
import pytest
from scipy.stats import norm, rankdata
from scipy.stats import t as t_dist

from crs.scoring.axes import AXES
from crs.scoring.best_set import best_set
from crs.scoring.bootstrap import (
    draw_seeds,
    paired_bootstrap,
    replicates,
    seed_tensor,
    seed_weights,
)

W = (0.5, 0.25, 0.25)


# -- a slow, obvious reference: one replicate at a time, plain Python ----------------------


def slow_q(x, ref):
    """q [encoder, dataset, axis] from seed means x, loop by loop (docs/crs-v1.md section 2)."""
    n_e, n_d, n_a = x.shape
    q = np.zeros_like(x)
    for d in range(n_d):
        for a in range(n_a):
            col = [float(x[e, d, a]) for e in range(n_e)]
            r = statistics.median(col) if ref == "median" else col[ref]
            for e, v in enumerate(col):
                den = 1.0 - r if v >= r else r
                q[e, d, a] = 0.0 if den == 0 else (v - r) / den
    return q


def slow_crs(q, weights):
    """CRS per encoder from overall q [encoder, axis] (docs/crs-v1.md section 3)."""
    n = len(q)

    def beats(i, j):
        return all(q[i][a] >= q[j][a] - 1e-9 for a in range(4)) and any(
            q[i][a] > q[j][a] + 1e-9 for a in range(4)
        )

    out = []
    for i in range(n):
        wins = sum(beats(i, j) for j in range(n) if j != i)
        losses = sum(beats(j, i) for j in range(n) if j != i)
        dom = ((wins - losses) / (n - 1) + 1) / 2
        bal = math.prod((v + 1) / 2 for v in q[i]) ** 0.25
        worst = (min(q[i]) + 1) / 2
        out.append(100 * (weights[0] * dom + weights[1] * bal + weights[2] * worst))
    return np.array(out)


def slow_replicate(x_seed, idx, ref, weights):
    s = x_seed.shape[2]  # the drawn seeds' deviations from the seed mean, widened to a t interval's
    wide = np.sqrt(s / (s - 1)) * t_dist.ppf(0.975, s - 1) / norm.ppf(0.975)
    mean = x_seed.mean(axis=2)
    x = np.clip(mean + wide * (x_seed[:, :, idx, :].mean(axis=2) - mean), 0, 1)  # seed means of the drawn seeds
    q = slow_q(x, ref).mean(axis=1)
    crs = slow_crs(q, weights)
    return x.mean(axis=1), q, crs, rankdata(-crs, method="average")


@pytest.fixture
def x_seed():
    rng = np.random.default_rng(7)
    return rng.uniform(0.3, 0.9, size=(4, 2, 5, 4))  # [encoder, dataset, seed, axis]


def test_draw_is_numpy_generator_with_the_seed():
    draw = draw_seeds(5, 20, seed=11)
    assert draw.shape == (20, 5)
    assert np.array_equal(draw, np.random.default_rng(11).integers(0, 5, size=(20, 5)))


def test_seed_weights_are_draw_counts():
    draw = np.array([[0, 0, 2], [1, 2, 0]])
    assert seed_weights(draw, 3) == pytest.approx(np.array([[2, 0, 1], [1, 1, 1]]) / 3)


@pytest.mark.parametrize("ref", ["median", 2])
def test_vectorised_equals_per_replicate_loop(x_seed, ref):
    draw = draw_seeds(x_seed.shape[2], 20, seed=3)
    reps = replicates(x_seed, draw, ref, W, "1")  # v1: slow_crs is docs/crs-v1.md written out
    names = ["e0", "e1", "e2", "e3"]
    point = slow_crs(slow_q(x_seed.mean(axis=2), ref).mean(axis=1), W)
    got = paired_bootstrap(x_seed, names, point, reference=ref, weights=W, n_bootstrap=20, seed=3, version="1")

    slow = [slow_replicate(x_seed, idx, ref, W) for idx in draw]
    axis = np.stack([s[0] for s in slow])
    q = np.stack([s[1] for s in slow])
    crs = np.stack([s[2] for s in slow])
    rank = np.stack([s[3] for s in slow])
    assert reps.axis == pytest.approx(axis)
    assert reps.q == pytest.approx(q)
    assert reps.crs == pytest.approx(crs)
    assert np.array_equal(reps.rank, rank)

    # the reference's CRS and q intervals are null (its CRS is the scale's zero point), the rest kept
    others = [e for e in range(4) if e != ref]
    assert got["reference"].to_list() == [e == ref for e in range(4)]
    if ref != "median":
        assert got["crs_low"][ref] is None and got["crs_high"][ref] is None
        assert all(got[f"q_{a}_{end}"][ref] is None for a in AXES for end in ("low", "high"))
    low, high = np.percentile(crs, [2.5, 97.5], axis=0)
    assert got["crs_low"].to_numpy()[others] == pytest.approx(low[others])
    assert got["crs_high"].to_numpy()[others] == pytest.approx(high[others])
    for k, a in enumerate(AXES):
        lo, hi = np.percentile(axis[:, :, k], [2.5, 97.5], axis=0)
        assert got[f"{a}_low"].to_numpy() == pytest.approx(lo)
        assert got[f"{a}_high"].to_numpy() == pytest.approx(hi)
        lo, hi = np.percentile(q[:, :, k], [2.5, 97.5], axis=0)
        assert got[f"q_{a}_low"].to_numpy()[others] == pytest.approx(lo[others])
        assert got[f"q_{a}_high"].to_numpy()[others] == pytest.approx(hi[others])
    for e in range(4):
        ranks = sorted(rank[:, e])
        assert got["rank_low"][e] == ranks[math.floor(0.025 * 19)]
        assert got["rank_high"][e] == ranks[math.ceil(0.975 * 19)]
        assert got["p_rank1"][e] == pytest.approx(np.mean(rank[:, e] == 1))
    leader = int(np.argmax(point))
    # the tier is the set for the best, widened by every encoder whose difference interval to the leader holds 0
    diff = crs - crs[:, [int(np.argmax(point))]]
    lo, hi = np.percentile(diff, [2.5, 97.5], axis=0)
    assert got["tier"].to_list() == (best_set(crs, point) | ((lo <= 0) & (hi >= 0))).tolist()
    assert got["tier"][leader]
    # the paired difference encoder minus leader, one replicate at a time, sorted by hand
    for e in range(4):
        d = sorted(float(crs[b, e] - crs[b, leader]) for b in range(20))
        pos = 0.025 * 19  # numpy's linear percentile: between the sorted values at floor and ceil of pos
        want_lo = d[math.floor(pos)] + (pos - math.floor(pos)) * (d[math.ceil(pos)] - d[math.floor(pos)])
        pos = 0.975 * 19
        want_hi = d[math.floor(pos)] + (pos - math.floor(pos)) * (d[math.ceil(pos)] - d[math.floor(pos)])
        assert got["crs_diff"][e] == pytest.approx(point[e] - point[leader])
        assert (got["crs_diff_low"][e], got["crs_diff_high"][e]) == pytest.approx((want_lo, want_hi))
    assert (got["crs_diff"][leader], got["crs_diff_low"][leader], got["crs_diff_high"][leader]) == (0, 0, 0)


def test_same_seed_same_output_other_seed_differs(x_seed):
    names = ["e0", "e1", "e2", "e3"]
    point = np.zeros(4)
    a = paired_bootstrap(x_seed, names, point, n_bootstrap=50, seed=5)
    b = paired_bootstrap(x_seed, names, point, n_bootstrap=50, seed=5)
    c = paired_bootstrap(x_seed, names, point, n_bootstrap=50, seed=6)
    assert a.equals(b)
    assert not a.equals(c)


def test_clear_leader_is_alone_in_its_tier():
    rng = np.random.default_rng(0)
    level = np.array([0.9, 0.7, 0.6])[:, None, None, None]  # best at every seed, every axis
    x_seed = level + 0.01 * rng.standard_normal((3, 2, 5, 4))
    point = np.array([90.0, 50.0, 40.0])
    out = paired_bootstrap(x_seed, ["best", "mid", "low"], point, n_bootstrap=200, seed=0)
    assert out["tier"].to_list() == [True, False, False]
    assert out["p_rank1"].to_list() == [1.0, 0.0, 0.0]
    assert out["rank_low"][0] == out["rank_high"][0] == 1.0


def test_indistinguishable_pair_share_the_tier():
    # a is better on seeds 0-1, b on seeds 2-3, by the same margin; c is worst everywhere
    per_seed = np.array([[0.8, 0.8, 0.7, 0.7], [0.7, 0.7, 0.8, 0.8], [0.5, 0.5, 0.5, 0.5]])
    x_seed = np.broadcast_to(per_seed[:, None, :, None], (3, 2, 4, 4)).copy()
    draw = draw_seeds(4, 200, seed=0)
    reps = replicates(x_seed, draw, "median", W)
    point_crs = slow_crs(slow_q(x_seed.mean(axis=2), "median").mean(axis=1), W)
    assert point_crs[0] == pytest.approx(point_crs[1])
    out = paired_bootstrap(x_seed, ["a", "b", "c"], point_crs, weights=W, n_bootstrap=200, seed=0)
    assert out["tier"].to_list() == [True, True, False]
    assert np.any(reps.crs[:, 0] > reps.crs[:, 1]) and np.any(reps.crs[:, 1] > reps.crs[:, 0])
    # ties for the top share first place
    assert out["p_rank1"].sum() == pytest.approx(1.0)
    assert 0.0 < out["p_rank1"][0] < 1.0 and out["p_rank1"][2] == 0.0


def axes_frame(encoders, datasets, seeds):
    rows = [
        {"encoder": e, "dataset": d, "seed": s, **{a: 0.5 + 0.01 * s for a in AXES}}
        for e in encoders
        for d in datasets
        for s in seeds
    ]
    return pl.DataFrame(rows)


def test_seed_tensor_orders_by_the_names_given():
    frame = axes_frame(["b", "a"], ["d2", "d1"], [2, 0, 1])
    x, seeds = seed_tensor(frame.reverse(), ["a", "b"], ["d1", "d2"])
    assert seeds == [0, 1, 2]
    assert x.shape == (2, 2, 3, 4)
    assert x[:, :, :, 0] == pytest.approx(np.broadcast_to([0.5, 0.51, 0.52], (2, 2, 3)))


def test_missing_seed_names_encoder_and_dataset():
    frame = axes_frame(["a", "b"], ["d1", "d2"], [0, 1, 2])
    frame = frame.filter(
        ~((pl.col("encoder") == "b") & (pl.col("dataset") == "d2") & (pl.col("seed") == 1))
    )
    with pytest.raises(ValueError, match=r"'b' on dataset 'd2' lacks seed\(s\) \[1\]"):
        seed_tensor(frame, ["a", "b"], ["d1", "d2"])


def test_a_test_split_too_small_for_the_image_bootstrap_gives_no_tier(tmp_path, make_store):
    from crs.scoring.options import ScoreOptions
    from crs.scoring.run import score

    # 3 test images of 3 classes: a replicate that draws one image three times has no class to score
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7, "c": 0.4}, n_test=3, seeds=(0, 1))
    s = score(records, ScoreOptions(bootstrap=60, bootstrap_unit="image"), store=store)
    assert s.settings["bootstrap"]["unit"] == "image"
    enc = s.encoders
    assert enc["tier"].null_count() == enc.height  # no tier at all, not the leader alone
    assert enc["crs_low"].is_nan().all() and enc["p_rank1"].is_nan().all()
    note = [w for w in s.settings["warnings"] if "no CRS" in w]
    assert len(note) == 1 and "d1" in note[0] and "no set for the best encoder" in note[0]
    assert "--bootstrap-unit seed" in note[0]
    # the seed bootstrap of the same records has intervals and a tier
    seed = score(records, ScoreOptions(bootstrap=60, bootstrap_unit="seed"), store=store)
    assert seed.encoders["tier"].null_count() == 0 and seed.encoders["tier"].any()
    assert not any("no CRS" in w for w in seed.settings["warnings"])


def test_summarise_leaves_no_interval_when_a_replicate_has_no_crs():
    reps = replicates(np.random.default_rng(0).uniform(0.5, 1.0, (3, 2, 4, 4)), draw_seeds(4, 50, 0))
    crs = reps.crs.copy()
    crs[7, 1] = np.nan
    from crs.scoring.bootstrap import summarise

    point = reps.crs.mean(axis=0)
    out = summarise(reps._replace(crs=crs), ["a", "b", "c"], point)
    assert out["tier"].to_list() == [None, None, None] and out["tie_group"].to_list() == [None, None, None]
    assert out["crs_low"].is_nan().all() and out["rank_high"].is_nan().all()
    lead = int(np.argmax(point))
    assert out["crs_diff"].to_numpy() == pytest.approx(point - point[lead])  # the point difference stays
    assert [v != v for v in out["crs_diff_low"]] == [e != lead for e in range(3)]  # no interval but the leader's 0
    assert out["discrimination_low"].is_finite().all()  # the axes' intervals do not depend on the CRS


def test_tie_groups_say_the_places_of_the_rank_intervals():
    # a and b swap first place by seed; c is always third
    per_seed = np.array([[0.8, 0.8, 0.7, 0.7], [0.7, 0.7, 0.8, 0.8], [0.5, 0.5, 0.5, 0.5]])
    x_seed = np.broadcast_to(per_seed[:, None, :, None], (3, 2, 4, 4)).copy()
    point = slow_crs(slow_q(x_seed.mean(axis=2), "median").mean(axis=1), W)
    out = paired_bootstrap(x_seed, ["a", "b", "c"], point, weights=W, n_bootstrap=200, seed=0)
    assert out["tie_group"].to_list() == ["tied 1st-2nd", "tied 1st-2nd", "3rd"]
    assert out["reference"].to_list() == [False, False, False]  # the median is no encoder
