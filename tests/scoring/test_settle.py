"""The plan that settles a tie (scoring/settle.py): a hand-worked example, the seeds-only case, how it scales,
and simulated power at the planned size."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.scoring.settle import Parts, design_power, plan, plans, round_up, seed_correction, widening


def spread(variance: float) -> np.ndarray:
    """Two replicates whose variance (numpy's, ddof 0) is ``variance``."""
    return np.array([-1.0, 1.0]) * math.sqrt(variance)


def test_a_hand_worked_plan():
    # One seed: no seed variance is estimated, so no widening and no noise in it, and the plan is the textbook one.
    # V_seed = 0.25, V_img = 1.25 - 0.25 = 1, V* = (2 / (1.959964 + 0.841621))^2 = 0.509627.
    # images: k = 1 / (0.509627 - 0.25) = 3.851681 (3.851663 with the far tail counted): 300 -> 1,155.5 -> 1,200
    # and 1,000 -> 3,851.7 -> 3,900. power now: Phi(2 / sqrt(1.25) - 1.959964) + Phi(-2 / sqrt(1.25) - 1.959964)
    # = 0.432069 + 0.000089.
    p = plan(spread(1.25), spread(0.25), {"y": 1000, "x": 300}, 1)
    assert p["images"] == {"x": 1200, "y": 3900}
    assert p["image_factor"] == pytest.approx(3.851663, rel=1e-5)
    assert p["seeds"] is None and p["only_seeds"] is False
    assert p["current_power"] == pytest.approx(0.432158, abs=1e-6)
    assert p["variance"] == pytest.approx({"image": 1.0, "seed": 0.25}, rel=1e-6)
    assert (p["power"], p["min_difference"]) == (0.8, 2.0)


@pytest.mark.parametrize(("v_img", "v_pt", "k", "m"), [(1.0, 0.3, 1.0, 1.0), (1.0, 0.3, 4.0, 1.0),
                                                       (0.2, 0.6, 1.0, 2.0), (0.5, 0.5, 3.0, 3.0)])
def test_design_power_is_the_rate_of_the_widened_intervals_test(v_img, v_pt, k, m):
    # The slow reference: draw the point (image part, mean of S' = 5m seeds), estimate the seed variance from the
    # S' seeds, widen it to Student's t as the bootstrap does, and count how often z sqrt(V_img / k + V_seed)
    # lies below |point|. 200,000 draws: Monte Carlo error about 0.001.
    rng = np.random.default_rng(7)
    n, seeds, delta, z = 200_000, round(5 * m), 2.0, 1.959964
    sd_seed = math.sqrt(v_pt * 5)  # a seed's own spread: the mean of 5 has variance v_pt
    s = sd_seed * rng.standard_normal((n, seeds))
    point = delta + math.sqrt(v_img / k) * rng.standard_normal(n) + s.mean(axis=1)
    v_seed = widening(seeds) * s.var(axis=1, ddof=1) / seeds
    rate = np.mean(np.abs(point) > z * np.sqrt(v_img / k + v_seed))
    got = design_power(Parts(v_img, v_pt, 5, True), delta, k, m, z)
    assert got == pytest.approx(rate, abs=0.006)


def test_the_seed_variance_is_made_median_unbiased():
    # chi2 medians: 4 df 3.356694, 9 df 8.342833; one seed has no seed variance to correct
    assert seed_correction(5) == pytest.approx(4 / 3.356694, rel=1e-6)
    assert seed_correction(10) == pytest.approx(9 / 8.342833, rel=1e-6)
    assert seed_correction(1) == 1.0
    assert plan(spread(1.25), spread(0.25), {"x": 300}, 1)["variance"]["seed"] == pytest.approx(0.25)


def test_seed_variance_past_the_target_leaves_only_seeds():
    # V_seed = 0.6 * 1.191649 = 0.714989 >= V* = 0.5096: images alone cannot; V_img = 0.1,
    # m = 0.714989 / (0.509627 - 0.1) = 1.745465 -> 8.73 -> 9 seeds
    p = plan(spread(0.7), spread(0.6), {"x": 300}, 5)
    assert p["only_seeds"] is True and p["images"] is None and p["image_factor"] is None
    assert p["seeds"] == 9


def test_where_neither_alone_can_both_grow_together():
    # V_img = 1.2 - 0.6 = 0.6 and V_seed = 0.6 * 1.191649 = 0.714989, each past what 80 % power allows
    # (V* = 0.509627): neither alone. Together: the fewest seeds whose power with unlimited images is 0.9, then
    # the images that reach 0.8 at those seeds.
    p = plan(spread(1.2), spread(0.6), {"x": 300}, 5)
    assert p["images"] is None and p["seeds"] is None and p["only_seeds"] is True
    both = p["together"]
    assert both["seeds"] > 5 and both["images"]["x"] > 300
    parts, z = Parts(0.6, 0.6 * seed_correction(5), 5, False), 1.959964
    assert design_power(parts, 2.0, both["images"]["x"] / 300, both["seeds"] / 5, z) >= 0.8
    assert design_power(parts, 2.0, math.inf, both["seeds"] / 5, z) >= 0.9
    assert design_power(parts, 2.0, math.inf, (both["seeds"] - 2) / 5, z) < 0.9  # two seeds fewer fall short
    assert plan(spread(1.25), spread(0.25), {"x": 300}, 5)["together"] is None


def test_the_widened_seed_part_counts_once_in_the_spread_and_widened_in_the_test():
    # unit 'both' widens each seed deviation to Student's t (c(5) = (2.776 / 1.960)^2 = 2.006): the point's own
    # seed variance is V_seed / c, so the widened plan asks for fewer images than one that took V_seed as it is
    assert widening(5) == pytest.approx((2.776445 / 1.959964) ** 2, rel=1e-5)
    plain = plan(spread(1.25), spread(0.25), {"x": 300}, 5)
    widened = plan(spread(1.25), spread(0.25), {"x": 300}, 5, widened=True)
    assert widened["variance"]["seed"] == pytest.approx(plain["variance"]["seed"] / widening(5))
    assert widened["images"]["x"] < plain["images"]["x"]


def test_a_design_that_already_has_the_power_asks_for_nothing_more():
    p = plan(spread(0.2), spread(0.1), {"x": 300}, 5)
    assert p["current_power"] > 0.8
    assert p["images"] == {"x": 300} and p["seeds"] == 5
    same = plan(np.zeros(10), np.zeros(10), {"x": 300}, 5)  # twins: no variance at all
    assert same["current_power"] == 1.0 and same["images"] == {"x": 300} and same["seeds"] == 5


def test_round_up_keeps_two_significant_figures_and_never_rounds_down():
    assert [round_up(x) for x in (0.2, 5, 37.2, 99.5, 101, 1234, 1200, 12345)] == [1, 5, 38, 100, 110, 1300, 1200,
                                                                                   13000]


variances = st.floats(0.01, 5.0)


@settings(max_examples=60, deadline=None)
@given(variances, variances, st.floats(0.5, 5.0), st.floats(1.1, 4.0))
def test_scaling(v_img, v_seed, delta, c):
    base = plan(spread(v_img + v_seed), spread(v_seed), {"x": 1000}, 5, min_difference=delta)
    # every difference and the smallest difference that matters scaled by c: the same plan
    scaled = plan(c * spread(v_img + v_seed), c * spread(v_seed), {"x": 1000}, 5, min_difference=c * delta)
    assert scaled["current_power"] == pytest.approx(base["current_power"])
    assert scaled["only_seeds"] == base["only_seeds"]
    if base["image_factor"] is not None:
        assert scaled["image_factor"] == pytest.approx(base["image_factor"])
    # a larger difference to detect never asks for more, and has at least today's power
    larger = plan(spread(v_img + v_seed), spread(v_seed), {"x": 1000}, 5, min_difference=c * delta)
    assert larger["current_power"] >= base["current_power"]
    if base["images"] is not None:
        assert larger["images"]["x"] <= base["images"]["x"]
    if base["seeds"] is not None:
        assert larger["seeds"] <= base["seeds"]
    # more seed variance never asks for fewer images
    noisier = plan(spread(v_img + c * v_seed), spread(c * v_seed), {"x": 1000}, 5, min_difference=delta)
    if noisier["images"] is not None:
        assert base["images"] is not None and noisier["images"]["x"] >= base["images"]["x"]


@pytest.mark.parametrize(("sd_img", "sd_seed", "more"), [(20.0, 1.5, "images"), (10.0, 6.0, "seeds")])
def test_the_planned_size_has_the_power_asked_for(sd_img, sd_seed, more):
    # A benchmark whose difference is the mean over images plus the mean over seeds (sd_img and sd_seed each):
    # the pilot (400 images, 40 seeds) is bootstrapped both ways, the plan read from it, and 4,000 benchmarks
    # of the planned size drawn with a true difference of 2: the share the two-sided test detects is the
    # power. Monte Carlo error 0.006 near 0.8; the pilot's variance estimates add a few per cent more.
    # The first case needs more images (V_img alone is past the target), the second only more seeds.
    rng = np.random.default_rng(3)
    n_img, n_seed, b = 400, 40, 4000
    e, s = sd_img * rng.standard_normal(n_img), sd_seed * rng.standard_normal(n_seed)
    seed_mean = s[rng.integers(0, n_seed, (b, n_seed))].mean(axis=1)
    both = seed_mean + e[rng.integers(0, n_img, (b, n_img))].mean(axis=1)
    p = plan(both, seed_mean + e.mean(), {"x": n_img}, n_seed)
    if more == "images":
        assert p["seeds"] is None and p["images"]["x"] > n_img
        v = sd_img**2 / p["images"]["x"] + sd_seed**2 / n_seed  # the true variance at the planned size
    else:
        assert p["only_seeds"] and p["images"] is None and p["seeds"] > n_seed
        v = sd_img**2 / n_img + sd_seed**2 / p["seeds"]
    power = np.mean(np.abs(2.0 + math.sqrt(v) * rng.standard_normal(b)) / math.sqrt(v) > 1.959964)
    assert 0.7 <= power <= 0.9, power


def test_plans_cover_the_best_set_but_the_leader():
    rng = np.random.default_rng(0)
    both, seed = rng.standard_normal((50, 3)), 0.3 * rng.standard_normal((50, 3))
    got = plans(both, seed, np.array([1.0, 3.0, 2.0]), ["a", "b", "c"], np.array([True, True, False]),
                {"x": 100}, 5)
    assert [g["encoder"] for g in got] == ["a"]
    assert got[0] == {"encoder": "a", **plan(both[:, 1] - both[:, 0], seed[:, 1] - seed[:, 0], {"x": 100}, 5,
                                             widened=True)}


def test_refuses_what_it_cannot_plan_from():
    with pytest.raises(ValueError, match="finite"):
        plan(np.array([1.0, np.nan]), np.zeros(2), {"x": 1}, 5)
    with pytest.raises(ValueError, match="min_difference"):
        plan(np.zeros(3), np.zeros(3), {"x": 1}, 5, min_difference=0.0)
