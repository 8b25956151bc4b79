"""Shape buckets (``crs.probe.schedule.bucketed``): padding is inert, and one program serves a bucket."""

import jax.numpy as jnp
import numpy as np
import pytest

from crs.probe import core
from crs.probe.padded import shape_bucket
from crs.probe.problem import TrainingSet


def problem(seed, n, F, K, S, task):
    """Correlated Gaussian features with a class signal, targets (multilabel: ~20 % unknown), S orders."""
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, F)) @ rng.normal(size=(F, F)) / np.sqrt(F)).astype(np.float32)
    X = (X - X.mean(0)) / X.std(0)
    score = X[:, :K] + 0.8 * rng.normal(size=(n, K))
    if task == "multiclass":
        T = np.eye(K, dtype=np.float32)[score.argmax(1)]
        known = np.ones_like(T)
    else:
        T = (score > 0.3).astype(np.float32)
        known = (rng.random((n, K)) > 0.2).astype(np.float32)
    return X, T, known, np.stack([rng.permutation(n) for _ in range(S)])


def fit(X, T, known, order, sizes, l2, task, **kw):
    data = TrainingSet(jnp.asarray(X), jnp.asarray(T), jnp.asarray(known), jnp.asarray(order), sizes,
                       jnp.asarray(l2, jnp.float32), task)
    return core.fit(data, core.FitOptions(**{"tol": 1e-5, **kw}))


def objective64(X, T, known, rows, lam, W, b, task):
    """The probe objective (``crs.probe.core`` docstring) in float64."""
    Z = X[rows].astype(np.float64) @ W + b
    if task == "multiclass":
        zmax = Z.max(1, keepdims=True)
        lse = zmax[:, 0] + np.log(np.exp(Z - zmax).sum(1))
        data = np.mean(lse - (T[rows] * Z).sum(1))
    else:
        k = known[rows]
        bce = np.logaddexp(0, Z) - T[rows] * Z
        data = ((bce * k).sum(0) / np.maximum(k.sum(0), 1)).sum()
    return data + 0.5 * lam * np.sum(W * W)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_a_padded_fit_equals_the_unpadded_one(task):
    """Rows 45 -> 48 and features 13 -> 384 of padding (``small_width``); subsets of 3 rows (isotropic
    scale), 9 and all.

    Solved tightly, so that what is left is rounding along the solver's path (at the default
    tolerance a 3-row, nearly separable probe may stop anywhere on its flat valley, padded or not).
    """
    X, T, known, order = problem(0, 45, 13, 3, 2, task)
    sizes, l2 = (3, 9, 45), [1e-2, 1e-1]
    assert (shape_bucket(45), core.small_width(48, 13)) == (48, core.SMALL_WIDTH) == (48, 384)
    # both along the warm L2 path, which small data takes by default (``core.warm_path``; unpadded fits would not)
    padded, plain = (fit(X, T, known, order, sizes, l2, task, buckets=b, tol=1e-6, gap=1e-6, warm_start=True)
                     for b in (True, False))
    # 3-row probes at tol 1e-6 are at float32's resolution: one may stall, flagged, at its minimum, padded
    # or not (which one depends on the CPU's rounding); the objectives below are what holds the two fits
    # together there. Larger subsets must converge
    for f in (padded, plain):
        assert np.asarray(f.converged)[:, 1:].all()
    assert padded.W.shape == plain.W.shape == (2, 3, 2, 13, 3)
    # predictions compared where both converged: a stalled probe sits somewhere on its flat valley, where
    # the objective is the same to 1e-7 and held-out probabilities may differ by more than 1e-3
    both = np.asarray(padded.converged) & np.asarray(plain.converged)  # [seed, fraction, l2]
    probs = [np.asarray(core.probabilities(jnp.asarray(X), f.W, f.b, task)) for f in (padded, plain)]
    np.testing.assert_allclose(probs[0][both], probs[1][both], atol=1e-3)
    for s in range(2):
        for j, m in enumerate(sizes):
            for i, lam in enumerate(l2):
                f = [objective64(X, T, known, order[s, :m], lam, np.asarray(o.W[s, j, i], np.float64),
                                 np.asarray(o.b[s, j, i], np.float64), task) for o in (padded, plain)]
                assert f[0] == pytest.approx(f[1], rel=1e-5), (s, m, lam)


def test_problems_of_one_bucket_share_one_program():
    """Two problems of other shapes that pad to the same bucket (48 x 384) compile one solver program."""
    sizes_of = {40: (2, 8, 40), 47: (3, 10, 47)}
    before = set(core._PROGRAMS)
    for n, F in ((40, 12), (47, 15)):
        X, T, known, order = problem(n, n, F, 3, 2, "multiclass")
        out = fit(X, T, known, order, sizes_of[n], [1e-2, 1e-1], "multiclass")
        assert out.W.shape == (2, 3, 2, F, 3) and np.asarray(out.converged).all()
    used = [k for k in core._PROGRAMS if k[1] == "multiclass" and k[2] == 3 and k[3] == ((0, 48, 0),)]
    assert len(set(core._PROGRAMS) - before) <= 1 and len(used) == 1
    assert core._PROGRAMS[used[0]]._cache_size() == 1  # one shape, one compiled program


def test_small_loops_pad_their_features_to_one_width():
    """Narrow features of small loops pad to SMALL_WIDTH (one program for crs demo's 50- to 367-wide
    encoders); wider ones, and loops whose padded problem reaches ONE_BLOCK_BELOW values, to their bucket."""
    for F in (1, 13, 54, 192, 334, 367, 384):
        assert core.small_width(768, F) == 384
    assert core.small_width(768, 385) == shape_bucket(385) == 512
    n = core.ONE_BLOCK_BELOW // 384  # 2730 rows x 384 = 1,048,320: under
    assert core.small_width(n, 13) == 384 and core.small_width(n + 1, 13) == shape_bucket(13) == 16
    for n in (16, 768, 1024, 4096, 20_000):
        for F in (1, 17, 200, 768, 1000):
            w = core.small_width(n, F)
            assert w >= F and w in (shape_bucket(F), core.SMALL_WIDTH)


def test_shape_buckets_grow_by_at_most_half():
    got = [shape_bucket(v) for v in range(1, 3000)]
    assert got[:16] == [16] * 16 and shape_bucket(17) == 24 and shape_bucket(25) == 32
    for v, b in zip(range(1, 3000), got):
        assert b >= v and (v <= 16 or b <= 1.5 * v)
    assert sorted(set(got)) == [b for b in sorted(set(got)) if b in {16 * 2**k for k in range(9)}
                                or b in {24 * 2**k for k in range(8)}]


def test_small_data_walks_the_l2_path_by_default():
    """``warm_start="auto"`` walks the L2 path for the one-dense-block loops of small data only, and that is
    the explicit warm path, bit for bit; it reaches the side-by-side fit's minima to the solver's tolerance."""
    assert core.warm_path((630, 384), "joint") and core.warm_path((770, 54), "joint")
    assert not core.warm_path((20_000, 768), "fraction")  # large data: side by side, one loop per fraction
    assert not core.warm_path((630, 384), "joint", buckets=False)  # unbucketed loops keep side by side
    assert not core.warm_path((4096, 512), "joint")  # joint, but past ONE_BLOCK_BELOW values
    X, T, known, order = problem(1, 45, 13, 3, 2, "multiclass")
    sizes, l2 = (9, 45), [1e-2, 1e-1]
    auto, warm, cold = (fit(X, T, known, order, sizes, l2, "multiclass", **kw)
                        for kw in ({}, {"warm_start": True}, {"warm_start": False}))
    for a, b in zip(auto, warm):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(auto.converged).all() and np.asarray(cold.converged).all()
    for s in range(2):
        for j, m in enumerate(sizes):
            for i, lam in enumerate(l2):
                f = [objective64(X, T, known, order[s, :m], lam, np.asarray(o.W[s, j, i], np.float64),
                                 np.asarray(o.b[s, j, i], np.float64), "multiclass") for o in (auto, cold)]
                assert f[0] == pytest.approx(f[1], rel=2e-3), (s, m, lam)
