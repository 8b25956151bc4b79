"""The evaluation's fixed shapes (crs.probe.padded): padding is inert, and nearby sizes share programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from crs.probe import core, metrics, padded, predict


def _probs(rng, lead, n, K, task):
    z = rng.normal(size=lead + (n, K)).astype(np.float32) * 2
    if task == "multilabel":
        return 1 / (1 + np.exp(-z))
    e = np.exp(z - z.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def _labels(rng, n, K, task):
    if task == "multiclass":
        T = np.eye(K, dtype=np.float32)[rng.integers(0, K, n)]
        return T, np.ones_like(T)
    return (rng.random((n, K)) < 0.4).astype(np.float32), (rng.random((n, K)) > 0.2).astype(np.float32)


_plain = jax.jit(jax.vmap(metrics._one, in_axes=(0, None, None, None)), static_argnums=3)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_padded_metrics_equal_the_unpadded_ones_on_the_counted_rows(task):
    """Padding rows and probes, and leaving rows out by mask, gives the metrics of the counted rows alone."""
    rng = np.random.default_rng(0)
    n, K = 37, 4
    probs = _probs(rng, (3, 30), n, K, task)  # 90 probes: two batches, the second padded
    probs[..., :5, 0] = np.round(probs[..., :5, 0], 1)  # ties
    T, known = _labels(rng, n, K, task)
    counted = rng.random(n) > 0.25
    got = metrics.all_metrics(np.log(probs), T, known, task, counted)
    assert got.shape == (3, 30, len(metrics.NAMES))
    want = np.asarray(_plain(jnp.asarray(np.log(probs[..., counted, :]).reshape(90, -1, K)), jnp.asarray(T[counted]),
                             jnp.asarray(known[counted]), task)).reshape(3, 30, -1)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    auc = metrics.NAMES.index("auroc")
    assert np.array_equal(got[..., auc], want[..., auc])  # ranks of the same scores: the same AUROC, to the bit


def test_multiclass_rows_left_out_are_left_out_of_every_metric():
    """Against scikit-learn on the counted rows: a multiclass row counts where known[:, 0] is 1."""
    rng = np.random.default_rng(1)
    n, K = 120, 3
    p = _probs(rng, (), n, K, "multiclass")
    y = rng.integers(0, K, n)
    T = np.eye(K, dtype=np.float32)[y]
    counted = np.arange(n) % 3 != 0
    m = dict(zip(metrics.NAMES, metrics.all_metrics(np.log(p[None]), T, np.ones_like(T), "multiclass", counted)[0]))
    pc, yc = p[counted], y[counted]
    assert m["auroc"] == pytest.approx(roc_auc_score(yc, pc, multi_class="ovr"), abs=1e-5)
    assert m["nll"] == pytest.approx(log_loss(yc, pc, labels=range(K)), abs=1e-5)
    assert m["brier"] == pytest.approx(((pc - T[counted]) ** 2).sum(1).mean(), abs=1e-6)
    assert m["accuracy"] == pytest.approx((pc.argmax(1) == yc).mean(), abs=1e-6)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_validation_losses_equal_the_plain_definition(task):
    rng = np.random.default_rng(2)
    n, K = 50, 3
    probs = _probs(rng, (2, 3, 4), n, K, task)
    T, known = _labels(rng, n, K, task)
    got = core.validation_losses(probs, T, known, task)
    want = np.asarray(core.validation_loss(jnp.asarray(probs), jnp.asarray(T), jnp.asarray(known), task))
    np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_predict_pads_features_and_probes_without_changing_the_probabilities(task):
    rng = np.random.default_rng(3)
    n, F, K = 40, 37, 3  # F pads to 48; 2 x 40 probes: two batches
    X = rng.normal(size=(n, F)).astype(np.float32)
    W = rng.normal(size=(2, 40, F, K)).astype(np.float32) * 0.3
    b = rng.normal(size=(2, 40, K)).astype(np.float32)
    got = core.predict(X, W, b, task)
    want = np.asarray(core.log_probabilities(jnp.asarray(X), jnp.asarray(W), jnp.asarray(b), task))
    assert got.shape == (2, 40, n, K)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_chunked_rows_cross_arrays_and_pad_the_last_chunk():
    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=(m, 5)).astype(np.float32) for m in (7, 20, 1, 13)]  # 41 rows: chunks of 16
    W = rng.normal(size=(3, 5, 2)).astype(np.float32)
    shapes = []

    def predict(A, index):
        shapes.append(A.shape)
        return np.einsum("nf,pfk->pnk", A, W if index is None else W[index])

    got = padded.chunked_rows(predict, arrays, prepare=lambda A: 2 * A, rows=16)
    assert shapes == [(16, 5)] * 3  # every call one shape
    for a, g in zip(arrays, got):
        np.testing.assert_allclose(g, np.einsum("nf,pfk->pnk", 2 * a, W), rtol=1e-6)
    picked = padded.chunked_rows(predict, arrays, index=np.array([2, 0]), rows=16)
    np.testing.assert_allclose(picked[1], np.einsum("nf,pfk->pnk", arrays[1], W[[2, 0]]), rtol=1e-6)


def test_nearby_sizes_share_the_evaluation_programs():
    """Sets of other row counts and encoders of other widths in the same buckets compile nothing new."""
    rng = np.random.default_rng(5)
    K, task = 3, "multiclass"
    for n, F in ((150, 40), (201, 45)):  # rows bucket to the minimum, features to 48
        X = rng.normal(size=(n, F)).astype(np.float32)
        W = rng.normal(size=(5, 7, F, K)).astype(np.float32)
        b = np.zeros((5, 7, K), np.float32)
        # as crs.probe.run predicts
        probs = padded.chunked_rows(lambda A, index, W=W, b=b: core.predict(A, W, b, task), [X])[0]
        T, known = _labels(rng, n, K, task)
        metrics.all_metrics(probs, T, known, task)
        if n == 150:
            sizes = (predict._log_probabilities._cache_size(), metrics._all_jit._cache_size())
    assert (predict._log_probabilities._cache_size(), metrics._all_jit._cache_size()) == sizes


def test_the_host_preparation_of_small_loops_equals_the_compiled_one():
    """``core._prepare_host`` (numpy) gives what ``core._prepare_impl`` gives in a program, sizes an array."""
    rng = np.random.default_rng(6)
    n, F, K, S = 48, 24, 3, 2
    Xs = rng.normal(size=(n, F)).astype(np.float32)
    T, known = _labels(rng, n, K, "multilabel")
    order = np.stack([rng.permutation(n) for _ in range(S)]).astype(np.int32)
    sizes, blocks = np.array([5, 12, 48], np.int32), ((0, n, 0),)
    compiled = jax.jit(core._prepare_impl, static_argnums=(5, 6))(Xs, T, known, order, sizes, blocks, True)
    host = core._prepare_host(Xs, T, known, order, sizes, blocks, True)
    for a, b in zip(jax.tree.leaves(compiled), jax.tree.leaves(host)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
