"""Probe-stage metrics against scikit-learn and hand-worked examples."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from crs.probe import metrics


def softmax_rows(rng, n, K):
    z = rng.normal(size=(n, K)) * 2
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32)


def onehot(y, K):
    return np.eye(K, dtype=np.float32)[y]


def logs(p):
    """What ``all_metrics`` takes: log-probabilities (as ``crs probe`` predicts and stores them)."""
    with np.errstate(divide="ignore"):
        return jnp.asarray(np.log(np.asarray(p, np.float64)), jnp.float32)


def run(p, T, known, task):
    return dict(zip(metrics.NAMES, np.asarray(metrics.all_metrics(logs(p), jnp.asarray(T), jnp.asarray(known), task))))


def test_multiclass_against_sklearn():
    rng = np.random.default_rng(0)
    n, K = 300, 4
    y = rng.integers(0, K, n)
    p = softmax_rows(rng, n, K)
    p[:, 0] = np.round(p[:, 0], 2)  # ties inside a class's scores
    p = p / p.sum(1, keepdims=True)
    T = onehot(y, K)
    m = run(p, T, np.ones_like(T), "multiclass")
    assert m["auroc"] == pytest.approx(roc_auc_score(y, p, multi_class="ovr", average="macro"), abs=1e-5)
    assert m["nll"] == pytest.approx(log_loss(y, p, labels=range(K)), abs=1e-5)
    assert m["brier"] == pytest.approx(((p - T) ** 2).sum(1).mean(), abs=1e-6)
    assert m["accuracy"] == pytest.approx((p.argmax(1) == y).mean())


def test_binary_brier_and_auroc_per_label_with_mask():
    rng = np.random.default_rng(1)
    n, K = 200, 3
    T = (rng.random((n, K)) < 0.3).astype(np.float32)
    p = np.clip(T * 0.3 + rng.random((n, K)) * 0.7, 0, 1).astype(np.float32)
    known = (rng.random((n, K)) > 0.2).astype(np.float32)
    m = run(p, T, known, "multilabel")
    aucs, briers, nlls, accs = [], [], [], []
    for k in range(K):
        v = known[:, k] > 0
        aucs.append(roc_auc_score(T[v, k], p[v, k]))
        briers.append(brier_score_loss(T[v, k], p[v, k]))
        nlls.append(log_loss(T[v, k], p[v, k], labels=[0, 1]))
        accs.append(((p[v, k] >= 0.5) == (T[v, k] > 0.5)).mean())
    assert m["auroc"] == pytest.approx(np.mean(aucs), abs=1e-5)
    assert m["brier"] == pytest.approx(np.mean(briers), abs=1e-6)
    assert m["nll"] == pytest.approx(np.mean(nlls), abs=1e-5)
    assert m["accuracy"] == pytest.approx(np.mean(accs), abs=1e-6)


def test_masked_entries_change_nothing():
    """A mask gives the same answer as slicing the masked rows away."""
    rng = np.random.default_rng(2)
    n = 60
    T = (rng.random((n, 1)) < 0.4).astype(np.float32)
    p = rng.random((n, 1)).astype(np.float32)
    known = np.ones((n, 1), np.float32)
    known[::3] = 0
    keep = known[:, 0] > 0
    masked = run(p, T, known, "multilabel")
    sliced = run(p[keep], T[keep], np.ones((keep.sum(), 1), np.float32), "multilabel")
    for name in metrics.NAMES:
        assert masked[name] == pytest.approx(sliced[name], abs=1e-6)


def test_ece_hand_worked():
    # 4 images, 2 classes. Confidences 0.9, 0.9 (bin 13), 0.6, 0.6 (bin 9).
    # Bin 13: accuracy 1/2, confidence 0.9 -> gap 0.4, weight 2/4.
    # Bin 9: accuracy 2/2, confidence 0.6 -> gap 0.4, weight 2/4.   ECE = 0.4.
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.4, 0.6], [0.6, 0.4]], np.float32)
    y = np.array([0, 1, 1, 0])
    m = run(p, onehot(y, 2), np.ones((4, 2), np.float32), "multiclass")
    assert m["ece"] == pytest.approx(0.4, abs=1e-6)
    # binary top-label ECE of one label: p = 0.2 -> confidence 0.8 in "negative" (bin 12);
    # the two images are negative and positive -> accuracy 1/2, gap 0.3.
    pl = np.array([[0.2], [0.2]], np.float32)
    Tl = np.array([[0.0], [1.0]], np.float32)
    assert run(pl, Tl, np.ones_like(Tl), "multilabel")["ece"] == pytest.approx(0.3, abs=1e-6)


def test_ece_bin_edges_are_pinned():
    # confidence exactly 1.0 falls in the last bin; 1/15 starts bin 1 (bins are [lo, hi))
    p = np.array([[1.0, 0.0], [1 / 15, 14 / 15]], np.float32)
    y = np.array([0, 1])
    m = run(p, onehot(y, 2), np.ones((2, 2), np.float32), "multiclass")
    assert m["ece"] == pytest.approx(((1 - 1.0) + (1 - 14 / 15)) / 2, abs=1e-6)


def test_auroc_without_both_classes_is_left_out():
    T = np.array([[1, 0], [1, 1], [1, 0]], np.float32)  # label 0 has no negatives
    p = np.array([[0.9, 0.2], [0.1, 0.8], [0.5, 0.3]], np.float32)
    m = run(p, T, np.ones_like(T), "multilabel")
    assert m["auroc"] == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([7, 30]))
def test_metrics_are_invariant_to_row_order_and_in_range(seed, n):
    rng = np.random.default_rng(seed)
    K = 3
    y = rng.integers(0, K, n)
    p = softmax_rows(rng, n, K)
    T = onehot(y, K)
    perm = rng.permutation(n)
    a = run(p, T, np.ones_like(T), "multiclass")
    b = run(p[perm], T[perm], np.ones_like(T), "multiclass")
    for name in metrics.NAMES:
        if np.isnan(a[name]):
            assert np.isnan(b[name])
        else:
            assert a[name] == pytest.approx(b[name], abs=1e-5)
    for name in ("auroc", "ece", "accuracy"):
        assert np.isnan(a[name]) or 0 <= a[name] <= 1 + 1e-6
    assert 0 <= a["brier"] <= 2 + 1e-6 and a["nll"] >= 0


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_fast_path_equals_scoring_metrics(task):
    """The probe's JAX metrics (used while probing) equal the single numpy/polars source in
    crs.scoring.metrics: long_table, then auroc, ece, brier, nll and accuracy per probe."""
    from crs.foundations.labels import targets
    from crs.scoring import metrics as reference

    rng = np.random.default_rng(7)
    P, n, K = 3, 120, 4
    if task == "multiclass":
        labels = rng.integers(0, K, n)
        probs = np.stack([softmax_rows(rng, n, K) for _ in range(P)])
    else:
        labels = np.where(rng.random((n, K)) < 0.15, -1, rng.random((n, K)) < 0.3).astype(np.int8)
        probs = rng.random((P, n, K)).astype(np.float32)
    # ties between images; no value on a bin edge, where float32 (here) and float64 (scoring)
    # can put a confidence in neighbouring bins
    probs[:, 10:20] = probs[:, :10]
    T, known = targets(labels, task, K)
    fast = np.asarray(metrics.all_metrics(logs(probs), jnp.asarray(T, jnp.float32),
                                          jnp.asarray(known, jnp.float32), task))  # [P, 5]
    table = reference.long_table(probs, labels, task, keys={"probe": list(range(P))})
    for name in metrics.NAMES:
        kw = {} if name == "auroc" else {"task": task}
        ref = getattr(reference, name)(table, "probe", **kw).sort("probe")[name].to_numpy()
        np.testing.assert_allclose(fast[:, metrics.NAMES.index(name)], ref, atol=2e-5, err_msg=name)
