"""The JAX probe against a tightly converged scikit-learn LogisticRegression."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from crs.probe import core, schedule
from crs.probe.problem import TrainingSet


def blobs(seed, n=200, F=8, K=3):
    """A 200 x 8 Gaussian blob per class, overlapping."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    centres = rng.normal(size=(K, F)) * 1.2
    X = (centres[y] + rng.normal(size=(n, F))).astype(np.float32)
    return X, y


def random_problem(rng, n, F, K, S, task):
    """Gaussian features, random targets (multilabel: about 20 % unknown) and S row orders."""
    X = rng.normal(size=(n, F)).astype(np.float32)
    if task == "multiclass":
        T = np.eye(K, dtype=np.float32)[rng.integers(0, K, n)]
        known = np.ones_like(T)
    else:
        T = (rng.random((n, K)) < 0.4).astype(np.float32)
        known = (rng.random((n, K)) > 0.2).astype(np.float32)
    return X, T, known, np.stack([rng.permutation(n) for _ in range(S)])


def fit_all(X, T, order, sizes, l2, task, known=None, **kw):
    known = np.ones_like(T) if known is None else known
    data = TrainingSet(jnp.asarray(X), jnp.asarray(T), jnp.asarray(known), jnp.asarray(np.atleast_2d(order)), sizes,
                       jnp.asarray(l2, dtype=jnp.float32), task)
    return core.fit(data, core.FitOptions(**{"tol": 1e-5, **kw}))


@pytest.mark.parametrize("min_block_rows,schedule",
                         [(1, "joint"), (2048, "joint"), (None, "joint"), (None, "fraction")])
def test_multiclass_matches_sklearn_for_every_l2_and_subset(min_block_rows, schedule):
    """A block per fraction, one masked block, the default blocks, and a solver loop per fraction."""
    X, y = blobs(0)
    n, K = len(y), 3
    T = np.eye(K, dtype=np.float32)[y]
    l2 = [1e-3, 1e-1]
    # subsets: the first 80 images, and all
    fit = fit_all(X, T, np.arange(n), (80, n), l2, "multiclass", min_block_rows=min_block_rows, schedule=schedule)
    assert np.asarray(fit.converged).all()
    probs = np.asarray(core.probabilities(jnp.asarray(X), fit.W, fit.b, "multiclass"))  # [1, 2, 2, n, K]
    for j, rows in enumerate([slice(0, 80), slice(None)]):
        n_s = len(y[rows])
        for i, lam in enumerate(l2):
            ref = LogisticRegression(C=1 / (lam * n_s), tol=1e-10, max_iter=10_000).fit(X[rows], y[rows])
            np.testing.assert_allclose(probs[0, j, i], ref.predict_proba(X), atol=2e-3)


def test_multilabel_with_masked_labels_matches_per_label_sklearn():
    rng = np.random.default_rng(1)
    n, F, K = 200, 8, 3
    Y = (rng.random((n, K)) < 0.35).astype(np.float32)
    X = (Y @ rng.normal(size=(K, F)) + rng.normal(size=(n, F))).astype(np.float32)
    known = (rng.random((n, K)) > 0.15).astype(np.float32)  # U-Ignore-like masked entries
    lam = 1e-2
    fit = fit_all(X, Y, rng.permutation(n), (n,), [lam], "multilabel", known=known)
    assert np.asarray(fit.converged).all()
    probs = np.asarray(core.probabilities(jnp.asarray(X), fit.W, fit.b, "multilabel"))[0, 0, 0]
    for k in range(K):
        v = known[:, k] > 0
        ref = LogisticRegression(C=1 / (lam * v.sum()), tol=1e-10, max_iter=10_000).fit(X[v], Y[v, k])
        np.testing.assert_allclose(probs[:, k], ref.predict_proba(X)[:, 1], atol=2e-3)


@pytest.mark.parametrize("shared_below", [0, schedule.SHARED_LOOP_BELOW])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_a_loop_per_fraction_reaches_the_joint_loops_minima(task, shared_below, monkeypatch):
    """Every probe of the per-fraction schedule has the joint schedule's objective (to the tolerance), and
    in either schedule the whole-training-set fraction, the same problem for every seed, is solved once:
    equal across seeds bit for bit, while the smaller subsets still differ by seed. With the default
    threshold the two small fractions share one loop; with 0 each has its own."""
    monkeypatch.setattr("crs.probe.schedule.SHARED_LOOP_BELOW", shared_below)
    rng = np.random.default_rng(3)
    n, F, K = 240, 6, 3
    if task == "multiclass":
        X, y = blobs(3, n=n, F=F, K=K)
        T, known = np.eye(K, dtype=np.float32)[y], np.ones((n, K), np.float32)
    else:
        T = (rng.random((n, K)) < 0.3).astype(np.float32)
        X = (T @ rng.normal(size=(K, F)) + rng.normal(size=(n, F))).astype(np.float32)
        known = (rng.random((n, K)) > 0.1).astype(np.float32)
    order = np.stack([rng.permutation(n) for _ in range(3)])
    # out of order, so that the one-fraction loops' two halves (``crs.probe.solver._stages``) must put each result back
    sizes, l2 = (30, 120, n), [1e-1, 1e-3, 3e-2, 1e-2]
    fits = {s: fit_all(X, T, order, sizes, l2, task, known=known, schedule=s) for s in ("joint", "fraction")}
    assert fits["fraction"].W.shape == fits["joint"].W.shape == (3, 3, 4, F, K)
    assert np.asarray(fits["fraction"].converged).all()
    for kind, fit in fits.items():
        W = np.asarray(fit.W)  # [S, Fr, L, F, K]
        assert (W[:, -1] == W[:1, -1]).all(), kind
        assert not (W[1, 0] == W[0, 0]).all(), kind
    for s in range(3):
        for j, m in enumerate(sizes):
            w = np.zeros((n, K), np.float32)
            w[order[s, :m]] = 1
            w = w * known
            for i, lam in enumerate(l2):
                f = [float(core.objective((fit.W[s, j, i], fit.b[s, j, i]), jnp.asarray(X), jnp.asarray(T),
                                          jnp.asarray(w), lam, task)) for fit in fits.values()]
                assert abs(f[0] - f[1]) <= 1e-4 * abs(f[0]) + 1e-6, (s, j, i, f)


def test_solver_loops_share_one_loop_among_the_small_fractions_only():
    n, F = 20_000, 768
    sizes = (200, 400, 1000, 2000, 5000, 10_000, n)
    loops = core.solver_loops(sizes, n, F, "fraction")
    assert [g for g, _ in loops] == [(200, 400, 1000), (2000,), (5000,), (10_000,), (n,)]
    assert loops[0][1] == ((0, 1000, 0),)  # 1,000 x 768 < ONE_BLOCK_BELOW: one dense block, the smaller program
    assert core.solver_loops(sizes, n, F, "fraction", 1)[0][1] == core.plan_blocks((200, 400, 1000), 1)
    assert all(blocks == ((0, g[0], 0),) for g, blocks in loops[1:])
    assert core.solver_loops(sizes, n, F, "joint") == [(sizes, core.plan_blocks(sizes))]
    small = (7, 13, 32, 63, 158, 315, 630)  # small data: one dense block (a smaller program to compile)
    assert core.solver_loops(small, 630, 354, "joint") == [(small, ((0, 630, 0),))]
    assert core.solver_loops(small, 630, 354, "joint", 1) == [(small, core.plan_blocks(small, 1))]
    # a lone small fraction keeps its own loop; every fraction small but the whole set: one shared loop + the whole set
    assert [g for g, _ in core.solver_loops((200, 5000, n), n, F, "fraction")] == [(200,), (5000,), (n,)]
    assert [g for g, _ in core.solver_loops((10, 20, 40), 40, 8, "fraction")] == [(10, 20), (40,)]


def test_block_plans():
    sizes = (200, 400, 1000, 2000, 5000, 10000, 20000)
    assert core.plan_blocks(sizes, 4096) == ((0, 5000, 0), (5000, 10000, 5), (10000, 20000, 6))
    assert core.plan_blocks(sizes, 1) == tuple(zip((0,) + sizes[:-1], sizes, range(7)))
    assert core.plan_blocks((7, 63, 630), 2048) == ((0, 630, 0),)  # one dense block
    default = core.plan_blocks((7, 13, 32, 63, 158, 315, 630))  # blocks of at least 10 % of the rows
    assert default == ((0, 63, 0), (63, 158, 4), (158, 315, 5), (315, 630, 6))
    assert core.plan_blocks((5, 5, 20), 1) == ((0, 5, 0), (5, 20, 2))  # no empty block


@pytest.mark.parametrize("min_rows", [1, 12, 10_000])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_blocked_objectives_equal_the_plain_masked_objective(task, min_rows):
    """The nested-block computation against the slow, obvious one: each probe on its own rows."""
    rng = np.random.default_rng(7)
    n, F, K, S, L = 50, 6, 3, 2, 2
    X, T, known, order = random_problem(rng, n, F, K, S, task)
    sizes = (5, 5, 20, 50)  # a repeated size gives an empty block
    l2 = np.array([1e-2, 0.5], np.float32)
    x = rng.normal(size=(S, len(sizes), L, F * K + K)).astype(np.float32) * 0.3
    got = np.asarray(core.blocked_objectives(jnp.asarray(x), jnp.asarray(X[order]), jnp.asarray(T[order]),
                                             jnp.asarray(known[order]), sizes, jnp.asarray(l2), task,
                                             min_rows=min_rows))
    for s in range(S):
        for j, m in enumerate(sizes):
            weight = np.zeros((n, K), np.float32)
            weight[order[s, :m]] = 1.0
            weight *= known
            for i in range(L):
                params = (jnp.asarray(x[s, j, i, : F * K].reshape(F, K)), jnp.asarray(x[s, j, i, F * K :]))
                want = core.objective(params, jnp.asarray(X), jnp.asarray(T), jnp.asarray(weight), l2[i], task)
                assert got[s, j, i] == pytest.approx(float(want), rel=1e-5)


def test_a_subset_equals_fitting_on_its_rows_alone():
    X, y = blobs(2)
    K = 3
    T = np.eye(K, dtype=np.float32)[y]
    keep = np.flatnonzero(np.arange(len(y)) % 2 == 0)
    order = np.concatenate([keep, np.setdiff1d(np.arange(len(y)), keep)])
    # without the preconditioner the masked rows change nothing, to the last bit
    # rows after the subset are masked
    subset = fit_all(X, T, order, (len(keep),), [1e-2], "multiclass", precondition=False)
    alone = fit_all(X[keep], T[keep], np.arange(len(keep)), (len(keep),), [1e-2], "multiclass", precondition=False)
    ps = core.probabilities(jnp.asarray(X), subset.W, subset.b, "multiclass")
    pa = core.probabilities(jnp.asarray(X), alone.W, alone.b, "multiclass")
    np.testing.assert_array_equal(np.asarray(ps), np.asarray(pa))
    # with it, the rotation is built from all rows, so the path differs but the minimiser does not
    subset = fit_all(X, T, order, (len(keep),), [1e-2], "multiclass", tol=1e-6)
    alone = fit_all(X[keep], T[keep], np.arange(len(keep)), (len(keep),), [1e-2], "multiclass", tol=1e-6)
    ps = core.probabilities(jnp.asarray(X), subset.W, subset.b, "multiclass")
    pa = core.probabilities(jnp.asarray(X), alone.W, alone.b, "multiclass")
    np.testing.assert_allclose(np.asarray(ps), np.asarray(pa), atol=1e-4)


def test_non_converged_probes_are_flagged():
    X, y = blobs(3)
    T = np.eye(3, dtype=np.float32)[y]
    fit = fit_all(X, T, np.arange(len(y)), (len(y),), [1e-4], "multiclass", max_iter=2)
    assert not np.asarray(fit.converged).any()
    assert np.asarray(fit.iterations).max() == 2
    assert float(np.asarray(fit.grad_norm).max()) >= 1e-5


def test_bad_subset_sizes_are_refused():
    X, y = blobs(3, n=20)
    T = np.eye(3, dtype=np.float32)[y]
    with pytest.raises(ValueError, match="subset sizes must increase"):
        fit_all(X, T, np.arange(20), (10, 5), [1e-2], "multiclass")


def test_validation_loss_picks_the_less_overfit_probe():
    X, y = blobs(4, n=60, F=8)
    Xv, yv = blobs(5, n=200, F=8)
    T = np.eye(3, dtype=np.float32)[y]
    fit = fit_all(X, T, np.arange(60), (60,), [1e-6, 1e-1], "multiclass", max_iter=3000)
    pv = core.log_probabilities(jnp.asarray(Xv), fit.W, fit.b, "multiclass")
    Tv = np.eye(3, dtype=np.float32)[yv]
    loss = np.asarray(core.validation_loss(pv, jnp.asarray(Tv), jnp.ones_like(jnp.asarray(Tv)), "multiclass"))
    assert loss.shape == (1, 1, 2)
    ref = [np.mean(-np.log(np.clip(np.exp(np.asarray(pv))[0, 0, i][np.arange(200), yv], 1e-7, 1))) for i in range(2)]
    np.testing.assert_allclose(loss[0, 0], ref, rtol=1e-5)
    assert loss[0, 0, 1] < loss[0, 0, 0]  # the regularised probe generalises better here


@pytest.mark.parametrize("plain", [False, True])
def test_block_logits_transpose_is_the_adjoint(plain):
    rng = np.random.default_rng(5)
    S, n, F, K = 2, 40, 6, 3
    sizes = (5, 20, 40)
    blocks = core.plan_blocks(sizes, 1)
    Xo = jnp.asarray(rng.normal(size=(S, n, F)), jnp.float32)
    XoT = core.transposed_blocks(Xo, blocks)
    x = jnp.asarray(rng.normal(size=(S, len(sizes), 2, F * K + K)), jnp.float32)
    Z = core.block_logits(x, Xo, blocks, XoT, plain)
    W, b = np.asarray(x[..., : F * K]).reshape(S, len(sizes), 2, F, K), np.asarray(x[..., F * K:])
    for z, (lo, hi, first) in zip(Z, blocks):  # the logits themselves, in numpy
        ref = np.einsum("snf,sjlfk->sjlkn", np.asarray(Xo)[:, lo:hi], W[:, first:]) + b[:, first:, :, :, None]
        np.testing.assert_allclose(np.asarray(z), ref, rtol=1e-5, atol=1e-5)
    dZ = tuple(jnp.asarray(rng.normal(size=z.shape), jnp.float32) for z in Z)
    mine = core.block_logits_T(dZ, Xo, blocks, x.shape, XoT, plain)
    auto = jax.linear_transpose(lambda v: core.block_logits(v, Xo, blocks, XoT, plain), x)(dZ)[0]
    np.testing.assert_allclose(np.asarray(mine), np.asarray(auto), rtol=1e-5, atol=1e-5)


def _objectives64(x, X, T, known, order, sizes, l2, task):
    """Every probe's objective in float64 numpy, probe by probe: [S, Fr, L]."""
    S, Fr, L, d = x.shape
    K = T.shape[1]
    F = X.shape[1]
    out = np.zeros((S, Fr, L))
    for s in range(S):
        for j, m in enumerate(sizes):
            rows = order[s, :m]
            for i in range(L):
                W, b = x[s, j, i, : F * K].reshape(F, K), x[s, j, i, F * K:]
                z = X[rows].astype(np.float64) @ W + b
                if task == "multiclass":
                    top = z.max(1, keepdims=True)
                    lse = top[:, 0] + np.log(np.exp(z - top).sum(1))
                    data = (lse - (T[rows] * z).sum(1)).mean()
                else:
                    bce = np.logaddexp(0.0, z) - T[rows] * z
                    data = ((bce * known[rows]).sum(0) / np.maximum(known[rows].sum(0), 1.0)).sum()
                out[s, j, i] = data + 0.5 * l2[i] * (W * W).sum()
    return out


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
@pytest.mark.parametrize("scale", [0.1, 60.0])
def test_the_line_search_change_equals_the_objectives_difference(task, scale):
    """f(x + t p) - f(x) from link values, for ordinary and for saturated logits.

    At scale 60 the logits reach hundreds, so a step that hands a row to another class
    meets probabilities that underflow in float32 (the log1p form alone gave -inf there).
    """
    rng = np.random.default_rng(11)
    n, F, K, S, L = 40, 5, 3, 2, 2
    X, T, known, order = random_problem(rng, n, F, K, S, task)
    sizes, l2 = (10, 40), np.array([1e-3, 0.3], np.float32)
    blocks = core.plan_blocks(sizes, 1)
    Xo, To, ko = jnp.asarray(X[order]), jnp.asarray(T[order]), jnp.asarray(known[order])
    d = F * K + K
    x = (rng.normal(size=(S, len(sizes), L, d)) * scale).astype(np.float32)
    p = (rng.normal(size=(S, len(sizes), L, d)) * scale).astype(np.float32)
    P = core.link_values(core.block_logits(jnp.asarray(x), Xo, blocks), task)
    Zp = core.block_logits(jnp.asarray(p), Xo, blocks)
    f0 = _objectives64(x.astype(np.float64), X, T, known, order, sizes, l2, task)
    for step in (1.0, 0.25, 1e-3):
        t = np.full((S, len(sizes), L), step, np.float32)
        got = np.asarray(core.loss_change(P, Zp, jnp.asarray(t), jnp.asarray(x), jnp.asarray(p),
                                          core.Labels(To, ko, sizes, blocks, task), jnp.asarray(l2)), np.float64)
        x1 = x.astype(np.float64) + np.float64(step) * p.astype(np.float64)
        want = _objectives64(x1, X, T, known, order, sizes, l2, task) - f0
        assert np.isfinite(got).all()
        # float32 logits of size |z| carry an absolute error of about 1e-7 |z| per row
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6 * scale * scale)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_subsets_far_smaller_than_the_features_match_sklearn(task):
    """Subsets of 6 and 12 rows on 64 features get the isotropic scale (``core.ISOTROPIC_BELOW``); the
    whole set the diagonal one. Same minimiser as scikit-learn's either way (a tight tolerance: at the
    default one, the nearly separable 6-row probes stop within 4e-3 of it, with either scale)."""
    rng = np.random.default_rng(3)
    n, F, K = 120, 64, 3
    assert 12 < core.ISOTROPIC_BELOW * F < n
    if task == "multiclass":
        y = np.arange(n) % K  # every subset holds every class
        X = (rng.normal(size=(K, F))[y] * 0.5 + rng.normal(size=(n, F))).astype(np.float32)
        T = np.eye(K, dtype=np.float32)[y]
    else:
        T = np.stack([np.arange(n) % 2, np.arange(n) // 2 % 2, np.arange(n) % 3 == 0], 1).astype(np.float32)
        X = (T @ rng.normal(size=(K, F)) * 0.5 + rng.normal(size=(n, F))).astype(np.float32)
    l2 = [1e-2, 1.0]
    sizes = (6, 12, n)
    fit = fit_all(X, T, np.arange(n), sizes, l2, task, tol=1e-7)
    assert np.asarray(fit.converged).all()
    probs = np.asarray(core.probabilities(jnp.asarray(X), fit.W, fit.b, task))[0]  # [Fr, L, n, K]
    for j, m in enumerate(sizes):
        for i, lam in enumerate(l2):
            if task == "multiclass":
                ref = LogisticRegression(C=1 / (lam * m), tol=1e-10, max_iter=100_000).fit(X[:m], T[:m].argmax(1))
                np.testing.assert_allclose(probs[j, i], ref.predict_proba(X), atol=2e-3, err_msg=f"{m} rows, {lam}")
            else:
                for k in range(K):
                    ref = LogisticRegression(C=1 / (lam * m), tol=1e-10, max_iter=100_000).fit(X[:m], T[:m, k])
                    np.testing.assert_allclose(probs[j, i, :, k], ref.predict_proba(X)[:, 1], atol=2e-3,
                                               err_msg=f"{m} rows, {lam}, label {k}")
