"""CRS v2's calibration error (crs.scoring.calibration) equals its authors' reference code
(``uncertainty-calibration``, Kumar, Liang & Ma 2019) on random inputs, and its bootstrap replicates
are the same estimator on the images repeated by their multiplicities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.scoring import calibration as ce

try:  # the reference, in the test extra: a missing reference is a failure, never a skip
    import calibration as kc
except ImportError as missing:  # pragma: no cover - only without the test extra
    raise ImportError("the reference package `uncertainty-calibration` is missing: pip install -e '.[test]' "
                      "(pyproject.toml's test extra pins it)") from missing


def _probs(rng, n, k, sharp):
    logits = rng.normal(size=(n, k)) * sharp
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _reference_squared(conf, hit, edges):
    return kc.unbiased_square_ce(kc.bin(list(zip(conf, hit, strict=True)), list(edges)))


@given(st.integers(2, 400), st.integers(2, 6), st.floats(0.1, 4.0), st.integers(0, 2**31 - 1))
@settings(max_examples=15, deadline=None)
def test_multiclass_equals_the_reference(n, k, sharp, seed):
    rng = np.random.default_rng(seed)
    p = _probs(rng, n, k, sharp)
    y = rng.integers(0, k, n)
    want = kc.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=15, binning_scheme=kc.get_equal_bins,
                                     mode="top-label")
    got = ce.point_error(p, np.eye(k)[y], np.ones((n, k), bool), "multiclass")
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    conf = p.max(axis=1)
    assert list(ce.equal_mass_edges(conf)) == pytest.approx(kc.get_equal_bins(list(conf), num_bins=15))


def test_multilabel_is_the_mean_squared_error_of_each_label_as_the_reference_scores_it():
    rng = np.random.default_rng(3)
    n, k = 300, 4
    p = 1 / (1 + np.exp(-rng.normal(size=(n, k)) * 2))
    y = (rng.random((n, k)) < p ** 1.3).astype(np.int8)
    known = rng.random((n, k)) > 0.2
    squares = []
    for j in range(k):
        m = known[:, j]
        two = np.stack([1 - p[m, j], p[m, j]], axis=1)  # the label as a two-class problem, top label
        squares.append(kc.lower_bound_scaling_ce(two, y[m, j].astype(int), p=2, debias=True, num_bins=15,
                                                 binning_scheme=kc.get_equal_bins, mode="top-label"))
        conf = np.maximum(p[m, j], 1 - p[m, j])
        hit = ((p[m, j] > 0.5) == (y[m, j] == 1)).astype(float)
        s_ref = _reference_squared(conf, hit, kc.get_equal_bins(list(conf), num_bins=15))
        assert max(s_ref, 0) ** 0.5 == pytest.approx(squares[-1], rel=1e-9, abs=1e-12)
        squares[-1] = s_ref
    got = ce.point_error(p, y, known, "multilabel")
    assert got == pytest.approx(max(np.mean(squares), 0) ** 0.5, rel=1e-9, abs=1e-12)


def test_a_replicate_is_the_estimator_on_the_images_repeated_by_their_counts():
    rng = np.random.default_rng(5)
    n, k = 250, 3
    p = _probs(rng, n, k, 2.0)
    y = rng.integers(0, k, n)
    conf, hit = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
    edges = ce.equal_mass_edges(conf)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=4).astype(float)  # [replicate, image]
    s, plug = ce.squared_error(conf, hit, counts, edges)
    for r in range(4):
        rep = np.repeat(np.arange(n), counts[r].astype(int))
        assert s[r] == pytest.approx(_reference_squared(conf[rep], hit[rep], edges), rel=1e-9, abs=1e-12)
        assert plug[r] == pytest.approx(kc.plugin_ce(kc.bin(list(zip(conf[rep], hit[rep], strict=True)),
                                                            list(edges))) ** 2, rel=1e-9, abs=1e-12)
    # the replicates crs reports are drawn from the test set with its bin gaps shrunk (docs/crs-v2.md section 1)
    got = ce.replicate_errors(p, np.eye(k)[y], np.ones((n, k), bool), counts, "multiclass")
    assert got == pytest.approx(np.sqrt(np.maximum(_slow_replicates(conf, hit, counts, edges), 0)), rel=1e-9)


def _slow_replicates(conf, hit, counts, edges):
    """The shrunk-gap replicates one bin and one replicate at a time: lam^2 = max(sum w^2 v t, 0) / sum w^2 v g^2
    over the test set's bins, each replicate's gap moved from around g_b to around lam g_b, and the replicates
    moved by S - lam^2 sum w g^2."""
    b = ce.bins_of(conf, edges)
    n, bins = conf.size, range(edges.size)
    full = {j: (np.sum(b == j), conf[b == j].mean() - hit[b == j].mean(), hit[b == j].mean())
            for j in bins if np.sum(b == j) >= 2}
    v = {j: h * (1 - h) / (m - 1) for j, (m, g, h) in full.items()}
    t = {j: g * g - v[j] for j, (m, g, h) in full.items()}
    s = sum(m / n * t[j] for j, (m, g, h) in full.items())
    lam2 = max(sum((m / n) ** 2 * v[j] * t[j] for j, (m, g, h) in full.items()), 0) / sum(
        (m / n) ** 2 * v[j] * g * g for j, (m, g, h) in full.items())
    out = []
    for c in counts:
        total, acc = c.sum(), 0.0
        for j, (_, g, _) in full.items():
            m = c[b == j].sum()
            if m >= 2:
                gap = (c[b == j] @ conf[b == j] - c[b == j] @ hit[b == j]) / m
                h = c[b == j] @ hit[b == j] / m
                acc += m / total * ((gap - g + np.sqrt(lam2) * g) ** 2 - h * (1 - h) / (m - 1))
        out.append(acc + s - lam2 * sum(m / n * g * g for m, g, _ in full.values()))
    return np.array(out)


def test_the_bootstrap_spreads_as_s_does_for_a_calibrated_probe():
    """Near perfect calibration S is dominated by its quadratic part, and a bootstrap drawn from the test set as it
    is spreads 1.7 times as much as S does between test sets (its gaps carry their own noise); drawn with the gaps
    shrunk, it spreads about as S does (within 25 %, Monte Carlo error of both spreads about 5 %)."""
    rng = np.random.default_rng(11)
    n, sets = 2000, 300
    spread, boot = [], []
    for r in range(sets):
        p = 1 / (1 + np.exp(-2.0 * rng.standard_normal(n)))
        y = (rng.random(n) < p).astype(np.int8)[:, None]
        known = np.ones((n, 1), bool)
        spread.append(ce.point_loss(p[:, None], y, known, "multilabel"))
        if r < 20:
            counts = rng.multinomial(n, np.full(n, 1 / n), size=200).astype(float)
            boot.append(ce.replicate_losses(p[:, None], y, known, counts, "multilabel").std())
    ratio = np.mean(boot) / np.std(spread)
    assert 0.8 <= ratio <= 1.25, ratio


@pytest.mark.parametrize("n, decimals", [(10_000, None), (10_000, 2), (3_000, 1), (500, 2)])
def test_large_sets_and_tied_probabilities_equal_the_reference(n, decimals):
    """Up to 10,000 images, and probabilities rounded so that many images share a confidence (ties across
    the equal-mass bin edges)."""
    rng = np.random.default_rng(n + (decimals or 0))
    k = 3
    p = _probs(rng, n, k, 1.5)
    if decimals is not None:
        p = np.round(p, decimals)
        p[:, -1] = 1.0 - p[:, :-1].sum(axis=1)
        p = np.clip(p, 0.0, 1.0)
    y = rng.integers(0, k, n)
    want = kc.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=15, binning_scheme=kc.get_equal_bins,
                                     mode="top-label")
    got = ce.point_error(p, np.eye(k)[y], np.ones((n, k), bool), "multiclass")
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
