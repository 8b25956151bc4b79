"""The seed bootstrap's widened deviations (crs.scoring.bootstrap.seed_scale, resample_seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from scipy.stats import t as t_dist

from crs.scoring.bootstrap import draw_seeds, interval, resample_seeds, seed_scale, seed_weights


def test_the_scale_turns_the_resampled_spread_into_the_t_intervals():
    for s in (2, 3, 5, 10, 30):
        want = np.sqrt(s / (s - 1)) * t_dist.ppf(0.975, s - 1) / norm.ppf(0.975)
        assert seed_scale(s) == pytest.approx(want, rel=1e-12)
    assert seed_scale(5) == pytest.approx(1.584, abs=5e-4)
    assert seed_scale(1) == 1.0
    assert seed_scale(5, confidence=0.9) < seed_scale(5)


def test_replicates_keep_the_seed_mean_and_have_the_t_intervals_spread():
    """Over many draws the replicates average the seed mean, and their variance is
    (t/z)^2 s^2 / S, s^2 the unbiased variance of the S seeds: the t interval's spread."""
    x = np.array([0.61, 0.70, 0.66, 0.58, 0.73])
    w = seed_weights(draw_seeds(5, 200_000, seed=4), 5)
    reps = resample_seeds(w, x)
    assert reps.shape == (200_000,)
    ratio = t_dist.ppf(0.975, 4) / norm.ppf(0.975)
    assert reps.mean() == pytest.approx(x.mean(), abs=5e-4)
    assert reps.var() == pytest.approx(ratio**2 * x.var(ddof=1) / 5, rel=0.02)
    plain = w @ x  # the unwidened bootstrap: (S-1)/S of the mean's variance, normal quantiles
    assert plain.var() == pytest.approx(x.var(ddof=0) / 5, rel=0.02)
    low, high = interval(reps)
    plain_low, plain_high = interval(plain)
    assert high - low > 1.4 * (plain_high - plain_low)


def test_shared_and_per_replicate_values_agree_and_every_cell_is_its_own():
    rng = np.random.default_rng(2)
    x = rng.uniform(0.2, 0.8, size=(3, 4, 5))  # [cell, cell, seed]
    w = seed_weights(draw_seeds(5, 50, seed=9), 5)
    shared = resample_seeds(w, x)
    own = resample_seeds(w, np.broadcast_to(x, (50, *x.shape)), per_replicate=True)
    assert shared.shape == (50, 3, 4)
    assert np.allclose(shared, own, rtol=0, atol=1e-14)
    one = resample_seeds(w, x[1, 2])  # a cell alone gives what it gives among others
    assert np.allclose(shared[:, 1, 2], one, rtol=0, atol=1e-14)


def test_one_seed_is_left_as_it_is_and_results_stay_in_the_unit_interval():
    w = seed_weights(draw_seeds(1, 10, seed=0), 1)
    assert np.array_equal(resample_seeds(w, np.array([[0.3], [0.9]])), np.tile([0.3, 0.9], (10, 1)))
    x = np.array([0.0, 0.02, 0.99, 1.0, 0.97])  # wide spread next to both ends
    reps = resample_seeds(seed_weights(draw_seeds(5, 2000, seed=1), 5), x)
    assert reps.min() >= 0.0 and reps.max() <= 1.0
    assert (reps == 1.0).any() and (reps == 0.0).any()


def test_a_missing_seed_leaves_its_cell_without_replicates():
    x = np.array([[0.5, 0.6, np.nan], [0.5, 0.6, 0.7]])
    reps = resample_seeds(seed_weights(draw_seeds(3, 20, seed=5), 3), x)
    assert np.isnan(reps[:, 0]).all() and np.isfinite(reps[:, 1]).all()


def test_fewer_than_five_seeds_are_named_in_a_warning_with_the_fix():
    from crs.scoring.caveats import say_if_few_seeds

    for n, unit in ((2, "both"), (4, "seed")):
        said: list[str] = []
        say_if_few_seeds(n, unit, said)
        assert len(said) == 1 and f"only {n} seeds" in said[0] and "--seeds 5" in said[0]
        assert f"{seed_scale(n):.2f} times" in said[0]
    for n, unit in ((5, "both"), (1, "both"), (3, "image")):  # enough, nothing to widen, no seed draw
        said = []
        say_if_few_seeds(n, unit, said)
        assert said == []
