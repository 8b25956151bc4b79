"""The JAX probe against a tightly converged scikit-learn LogisticRegression."""

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from crs.probe import core


def blobs(seed, n=200, F=8, K=3):
    """A 200 x 8 Gaussian blob per class, overlapping."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    centres = rng.normal(size=(K, F)) * 1.2
    X = (centres[y] + rng.normal(size=(n, F))).astype(np.float32)
    return X, y


def fit_all(X, T, weight, l2, task, **kw):
    return core.fit(jnp.asarray(X), jnp.asarray(T), jnp.asarray(weight), jnp.asarray(l2, dtype=jnp.float32),
                    task=task, **{"tol": 1e-5, **kw})


def test_multiclass_matches_sklearn_for_every_l2_and_subset():
    X, y = blobs(0)
    n, K = len(y), 3
    T = np.eye(K, dtype=np.float32)[y]
    l2 = [1e-3, 1e-1]
    sub = np.zeros(n, np.float32)
    sub[:80] = 1  # a label subset: the first 80 images
    weight = np.stack([np.ones(n, np.float32), sub])[None, :, :, None] * np.ones((1, 1, 1, K), np.float32)
    fit = fit_all(X, T, weight, l2, "multiclass")
    assert np.asarray(fit.converged).all()
    probs = np.asarray(core.probabilities(jnp.asarray(X), fit.W, fit.b, "multiclass"))  # [1, 2, 2, n, K]
    for j, rows in enumerate([slice(None), slice(0, 80)]):
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
    fit = fit_all(X, Y, known[None, None], [lam], "multilabel")
    assert np.asarray(fit.converged).all()
    probs = np.asarray(core.probabilities(jnp.asarray(X), fit.W, fit.b, "multilabel"))[0, 0, 0]
    for k in range(K):
        v = known[:, k] > 0
        ref = LogisticRegression(C=1 / (lam * v.sum()), tol=1e-10, max_iter=10_000).fit(X[v], Y[v, k])
        np.testing.assert_allclose(probs[:, k], ref.predict_proba(X)[:, 1], atol=2e-3)


def test_a_weight_mask_equals_slicing():
    X, y = blobs(2)
    K = 3
    T = np.eye(K, dtype=np.float32)[y]
    keep = np.arange(len(y)) % 2 == 0
    w = np.where(keep, 1.0, 0.0).astype(np.float32)[None, None, :, None] * np.ones((1, 1, 1, K), np.float32)
    masked = fit_all(X, T, w, [1e-2], "multiclass")
    sliced = fit_all(X[keep], T[keep], np.ones((1, 1, keep.sum(), K), np.float32), [1e-2], "multiclass")
    pm = core.probabilities(jnp.asarray(X), masked.W, masked.b, "multiclass")
    ps = core.probabilities(jnp.asarray(X), sliced.W, sliced.b, "multiclass")
    np.testing.assert_allclose(np.asarray(pm), np.asarray(ps), atol=1e-4)


def test_non_converged_probes_are_flagged():
    X, y = blobs(3)
    T = np.eye(3, dtype=np.float32)[y]
    fit = fit_all(X, T, np.ones((1, 1, len(y), 3), np.float32), [1e-4], "multiclass", max_iter=2)
    assert not np.asarray(fit.converged).any()
    assert np.asarray(fit.iterations).max() == 2
    assert float(np.asarray(fit.grad_norm).max()) >= 1e-5


def test_validation_loss_picks_the_less_overfit_probe():
    X, y = blobs(4, n=60, F=8)
    Xv, yv = blobs(5, n=200, F=8)
    T = np.eye(3, dtype=np.float32)[y]
    fit = fit_all(X, T, np.ones((1, 1, 60, 3), np.float32), [1e-6, 1e-1], "multiclass", max_iter=3000)
    pv = core.probabilities(jnp.asarray(Xv), fit.W, fit.b, "multiclass")
    Tv = np.eye(3, dtype=np.float32)[yv]
    loss = np.asarray(core.validation_loss(pv, jnp.asarray(Tv), jnp.ones_like(jnp.asarray(Tv)), "multiclass"))
    assert loss.shape == (1, 1, 2)
    ref = [np.mean(-np.log(np.clip(np.asarray(pv)[0, 0, i][np.arange(200), yv], 1e-7, 1))) for i in range(2)]
    np.testing.assert_allclose(loss[0, 0], ref, rtol=1e-5)
    assert loss[0, 0, 1] < loss[0, 0, 0]  # the regularised probe generalises better here
