"""The standardisation floor: a near-dead training feature cannot blow up a shifted image."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from crs.probe import evaluate, standardise


def _rare_feature_sets(rng, n=1000, healthy=32, rare=3):
    """Healthy ReLU features with a two-class signal, plus ``rare`` ones non-zero on 1-3 training
    images (training std 2e-4..2e-3 of the typical) that fire on 98 % of the shifted images."""
    y, ys = rng.integers(0, 2, n), rng.integers(0, 2, n)
    sig = rng.normal(0, 0.3, healthy)
    X = np.maximum(1 + sig * y[:, None] + rng.normal(size=(n, healthy)), 0)
    Xs = np.maximum(1.3 + 0.7 * sig * ys[:, None] + rng.normal(size=(n, healthy)), 0)
    typical = np.median(X.std(0))
    R, Rs = np.zeros((n, rare)), np.zeros((n, rare))
    for f in range(rare):
        hits = rng.choice(n, 1 + f % 3, replace=False)
        R[hits, f] = 10 ** rng.uniform(-3.7, -2.7) * typical * np.sqrt(n / len(hits))
        Rs[:, f] = np.where(rng.random(n) < 0.98, np.abs(rng.normal(2, 0.5, n)) * typical, 0)
    return np.hstack([X, R]).astype(np.float32), y, np.hstack([Xs, Rs]).astype(np.float32), ys


def _z(X, A):
    keep = standardise.live_features(X)
    s = standardise.feature_scales(X[:, keep])
    return (A[:, keep] - X[:, keep].mean(0)) / s, s


def test_rare_features_stay_within_the_stated_bound_and_the_shift_does_not_tie():
    X, y, Xs, ys = _rare_feature_sets(np.random.default_rng(0))
    assert standardise.live_features(X).all()  # the rare features are not dead: they are kept
    zs, s = _z(X, Xs)
    typical = np.median(X.std(0))
    bound = np.abs(Xs - X.mean(0)).max(0) / (standardise.SCALE_FLOOR * typical)  # docs/standardisation.md
    assert (np.abs(zs).max(0) <= bound * (1 + 1e-5)).all()
    assert np.abs(zs[:, -3:]).max() < 100  # without the floor: above 1,000 (checked below)
    old = (Xs[:, -3:] - X[:, -3:].mean(0)) / (X[:, -3:].std(0) + 1e-6)
    assert np.abs(old).max() > 1000
    z, _ = _z(X, X)
    probe = LogisticRegression(C=1 / (1e-3 * len(y)), max_iter=5000).fit(z, y)  # the grid's weakest L2
    p = probe.predict_proba(zs).astype(np.float32)  # as the store kept probabilities
    tie = evaluate.tie_share(p[None, None], np.ones_like(p, bool))[0, 0]
    assert tie < 0.05, tie


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(1e-6, 1e6))
def test_no_kept_feature_is_divided_by_less_than_the_floor(seed, unit):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 6)) * np.array([1, 1, 1e-2, 1e-3, 0.5, 2.0]) * unit
    keep = standardise.live_features(X)
    s = standardise.feature_scales(X[:, keep]).astype(np.float64)
    sd = X[:, keep].std(0)
    typical = np.median(sd[sd > standardise.DEAD_REL * sd.max()])
    np.testing.assert_allclose(s, np.maximum(sd, standardise.SCALE_FLOOR * typical), rtol=1e-6)
    assert (s >= standardise.SCALE_FLOOR * typical * (1 - 1e-6)).all()
