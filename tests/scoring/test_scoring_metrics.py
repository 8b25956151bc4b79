"""Polars metrics against scikit-learn, hand-worked examples and slow references."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    accuracy_score,
    balanced_accuracy_score,
    brier_score_loss,
    cohen_kappa_score,
    log_loss,
    roc_auc_score,
)

from crs.foundations.labels import TASKS
from crs.scoring import metrics as m


def multiclass(n=200, k=5, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    y[:k] = np.arange(k)  # every class present
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return p, y


def multilabel(n=200, k=4, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random((n, k)) < 0.4).astype(np.int8)
    y[:2] = [[1] * k, [0] * k]
    p = 1 / (1 + np.exp(-(rng.normal(size=(n, k)) + 1.2 * (2 * y - 1))))
    y[rng.random((n, k)) < 0.1] = -1  # unknown entries
    y[:2] = [[1] * k, [0] * k]
    return p, y


def one(frame_fn, table, *args, **kw):
    return frame_fn(table, (), *args, **kw).item()


@pytest.fixture(scope="module")
def mc():
    p, y = multiclass()
    return p, y, m.long_table(p, y, "multiclass")


@pytest.fixture(scope="module")
def ml():
    p, y = multilabel()
    return p, y, m.long_table(p, y, "multilabel")


def test_auroc_matches_sklearn(mc, ml):
    p, y, t = mc
    assert one(m.auroc, t) == pytest.approx(roc_auc_score(y, p, multi_class="ovr", average="macro"))
    p, y, t = ml
    want = np.mean([roc_auc_score(y[y[:, j] >= 0, j], p[y[:, j] >= 0, j]) for j in range(y.shape[1])])
    assert one(m.auroc, t) == pytest.approx(want)


def test_auroc_ties_and_missing_class():
    p = np.array([[0.5, 0.5], [0.5, 0.5], [0.8, 0.2], [0.2, 0.8]])
    y = np.array([0, 1, 0, 1])
    t = m.long_table(p, y, "multiclass")
    assert one(m.auroc, t) == pytest.approx(roc_auc_score(y, p[:, 1]))
    # class 2 never occurs: left out of the macro mean
    p3 = np.c_[p * 0.9, np.full(4, 0.1)]
    per = m.auroc_per_class(m.long_table(p3, y, "multiclass"))
    assert per["auroc"][2] is None
    assert one(m.auroc, m.long_table(p3, y, "multiclass")) == pytest.approx(
        np.mean([roc_auc_score(y == c, p3[:, c]) for c in (0, 1)])
    )


def test_accuracy_balanced_accuracy_kappa(mc, ml):
    p, y, t = mc
    pred = p.argmax(1)
    assert one(m.accuracy, t, "multiclass") == pytest.approx(accuracy_score(y, pred))
    assert one(m.balanced_accuracy, t, "multiclass") == pytest.approx(balanced_accuracy_score(y, pred))
    assert one(m.kappa_quadratic, t) == pytest.approx(
        cohen_kappa_score(y, pred, weights="quadratic", labels=list(range(p.shape[1])))
    )
    p, y, t = ml
    acc, bal = [], []
    for j in range(y.shape[1]):
        k = y[:, j] >= 0
        acc.append(accuracy_score(y[k, j], p[k, j] >= 0.5))
        bal.append(balanced_accuracy_score(y[k, j], p[k, j] >= 0.5))
    assert one(m.accuracy, t, "multilabel") == pytest.approx(np.mean(acc))
    assert one(m.balanced_accuracy, t, "multilabel") == pytest.approx(np.mean(bal))


def test_kappa_ordinal_hand_example():
    # true grades 0,1,2,3 predicted 0,2,2,1: observed sum (a-b)^2 = 0+1+0+4 = 5;
    # expected = (1/4) sum_ij (a_i - b_j)^2 = (1/4)(4*14 + 4*9 - 2*6*5) = 8; kappa = 1 - 5/8
    y = np.array([0, 1, 2, 3])
    pred = np.array([0, 2, 2, 1])
    p = np.full((4, 4), 0.1)
    p[np.arange(4), pred] = 0.7
    assert one(m.kappa_quadratic, m.long_table(p, y, "multiclass")) == pytest.approx(1 - 5 / 8)


def test_brier_and_nll_match_sklearn(mc, ml):
    p, y, t = mc
    onehot = np.eye(p.shape[1])[y]
    assert one(m.brier, t, "multiclass") == pytest.approx(((p - onehot) ** 2).sum(1).mean())
    assert one(m.nll, t, "multiclass") == pytest.approx(log_loss(y, p, labels=list(range(p.shape[1]))))
    p, y, t = ml
    b, ll = [], []
    for j in range(y.shape[1]):
        k = y[:, j] >= 0
        b.append(brier_score_loss(y[k, j], p[k, j]))
        ll.append(log_loss(y[k, j], p[k, j], labels=[0, 1]))
    assert one(m.brier, t, "multilabel") == pytest.approx(np.mean(b))
    assert one(m.nll, t, "multilabel") == pytest.approx(np.mean(ll))
    # a binary multi-class task's Brier is twice sklearn's binary Brier (both classes counted)
    p2 = np.c_[1 - p[:, 0], p[:, 0]]
    y2 = np.where(y[:, 0] == 1, 1, 0)
    t2 = m.long_table(p2, y2, "multiclass")
    assert one(m.brier, t2, "multiclass") == pytest.approx(2 * brier_score_loss(y2, p2[:, 1]))


def test_ece_hand_worked():
    # top-label confidences .9 (right, bin 13), .8 (wrong, bin 12), .6 (right) and .62
    # (wrong) share bin 9, .55 (wrong, bin 8):
    # ECE = (|1-.9| + |0-.8| + |(1-.6) + (0-.62)| + |0-.55|) / 5 = (.1 + .8 + .22 + .55) / 5
    p = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.62, 0.38], [0.55, 0.45]])
    y = np.array([0, 1, 0, 1, 1])
    t = m.long_table(p, y, "multiclass")
    assert one(m.ece, t, "multiclass") == pytest.approx(1.67 / 5)
    # classwise: class 0 probabilities .9 .8 .6 .62 .55 (bins 13 12 9 9 8) vs y==0: 1 0 1 0 0
    #   gaps |1-.9| + |0-.8| + |1-.6+0-.62| + |0-.55| = 1.67; class 1 the mirror image
    #   (.1 .2 .4 .38 .45 vs 0 1 0 1 1 -> bins 1 3 6 5 6): .1 + .8 + |-.4 + .55| + .62 = 1.67
    assert one(m.classwise_ece, t) == pytest.approx(1.67 / 5)
    rel = m.reliability(t, (), "multiclass")
    assert rel["bin"].to_list() == [8, 9, 12, 13]
    assert rel["count"].to_list() == [1, 2, 1, 1]
    assert rel["confidence"].to_list() == pytest.approx([0.55, 0.61, 0.8, 0.9])
    assert rel["accuracy"].to_list() == pytest.approx([0.0, 0.5, 0.0, 1.0])


def test_ece_multilabel_is_mean_of_binary_top_label():
    # one label: p .9/.3 with y 1/1 -> conf .9 right, conf .7 wrong: (.1 + .7) / 2 = .4;
    # the other: p .2/.6 with y 0/unknown -> conf .8 right: .2. mean .3
    p = np.array([[0.9, 0.2], [0.3, 0.6]])
    y = np.array([[1, 0], [1, -1]], dtype=np.int8)
    assert one(m.ece, m.long_table(p, y, "multilabel"), "multilabel") == pytest.approx(0.3)


def test_reliability_matches_calibration_curve(mc):
    p, y, t = mc
    rel = m.reliability(t, (), "multiclass", kind="class")
    for c in range(p.shape[1]):
        true, pred = calibration_curve(y == c, p[:, c], n_bins=m.N_BINS, strategy="uniform")
        got = rel.filter(pl.col("class") == c)
        assert got["accuracy"].to_list() == pytest.approx(true.tolist())
        assert got["confidence"].to_list() == pytest.approx(pred.tolist())


def test_bin_edge_convention_pinned():
    # bins are [b/15, (b+1)/15): a value on an inner edge goes to the upper bin here and
    # to the lower one in sklearn's calibration_curve (np.searchsorted on the inner edges)
    edges = np.linspace(0.0, 1.0, m.N_BINS + 1)
    v = edges[6]
    p = np.array([[1 - v, v], [0.5, 0.5]])
    rel = m.reliability(m.long_table(p, np.array([1, 0]), "multiclass"), (), "multiclass", "class")
    bins = rel.filter(pl.col("class") == 1)["bin"].to_list()
    assert bins == [6, 7]  # 0.4 -> bin 6 = [6/15, 7/15), 0.5 -> bin 7
    # 0.4 and 0.41 share bin 6 here; sklearn's calibration_curve puts 0.4 in the bin below
    p = np.array([[1 - v, v], [0.59, 0.41]])
    rel = m.reliability(m.long_table(p, np.array([1, 0]), "multiclass"), (), "multiclass", "class")
    assert rel.filter(pl.col("class") == 1)["bin"].to_list() == [6]
    _, sk_pred = calibration_curve([1, 0], p[:, 1], n_bins=m.N_BINS, strategy="uniform")
    assert sk_pred.tolist() == pytest.approx([v, 0.41])  # two bins
    # 1.0 falls in the last bin, 0.0 in the first
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    rel = m.reliability(m.long_table(p, np.array([0, 0]), "multiclass"), (), "multiclass", "class")
    assert sorted(set(rel["bin"].to_list())) == [0, m.N_BINS - 1]


def aurc_reference(conf, correct):
    """Slow AURC for distinct confidences: mean over k of the error rate of the top k."""
    order = np.argsort(-conf, kind="stable")
    err = 1.0 - correct[order]
    return np.mean([err[: k + 1].mean() for k in range(len(err))])


def test_aurc_matches_reference(mc):
    p, y, t = mc
    conf, correct = p.max(1), (p.argmax(1) == y).astype(float)
    assert one(m.aurc, t, "multiclass") == pytest.approx(aurc_reference(conf, correct))


def test_aurc_ties_average_over_orderings():
    conf = np.array([0.9, 0.7, 0.7, 0.7, 0.6, 0.6])
    correct = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    want = np.mean(
        [
            aurc_reference(conf[list(perm)], correct[list(perm)])
            for perm in itertools.permutations(range(6))
        ]
    )
    p = np.c_[conf, 1 - conf]
    y = np.where(correct == 1, 0, 1)
    assert one(m.aurc, m.long_table(p, y, "multiclass"), "multiclass") == pytest.approx(want)


def test_by_groups_equal_separate_calls():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(3), size=(2, 3, 40))  # [seed, fraction, image, class]
    y = rng.integers(0, 3, 40)
    keys = {"seed": [0, 1], "fraction": [0.1, 0.5, 1.0]}
    got = m.all_metrics(m.long_table(p, y, "multiclass", keys), ["seed", "fraction"], ordinal=True)
    assert got.height == 6 and got.columns[:2] == ["seed", "fraction"]
    for s, f in itertools.product(range(2), range(3)):
        alone = m.all_metrics(m.long_table(p[s, f], y, "multiclass"), ordinal=True)
        row = got.filter((pl.col("seed") == s) & (pl.col("fraction") == keys["fraction"][f]))
        for c in alone.columns:
            assert row[c].item() == pytest.approx(alone[c].item()), c


def test_bad_input_named():
    with pytest.raises(ValueError, match="task must be"):
        m.ece(pl.DataFrame(), (), "regression")
    with pytest.raises(ValueError, match=r"class indices in \[0, 2\)"):
        m.long_table(np.full((2, 2), 0.5), np.array([0, 2]), "multiclass")


@st.composite
def prediction_tables(draw):
    task = draw(st.sampled_from(TASKS))
    n, k = draw(st.integers(2, 25)), draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    grid = draw(st.booleans())  # coarse probabilities: many ties and bin edges
    if task == "multiclass":
        p = rng.dirichlet(np.ones(k), size=n)
        if grid:
            p = np.round(p * 5) / 5 + 1e-3
            p = p / p.sum(1, keepdims=True)
        y = rng.integers(0, k, n)
    else:
        p = rng.random((n, k))
        if grid:
            p = np.round(p * 4) / 4
        y = rng.integers(-1, 2, (n, k)).astype(np.int8)
    return task, p, y, seed


@settings(max_examples=40, deadline=None)
@given(prediction_tables())
def test_ranges_and_row_order_invariance(case):
    task, p, y, seed = case
    t = m.long_table(p, y, task)
    got = m.all_metrics(t, (), task, ordinal=task == "multiclass")
    shuffled = t.sample(fraction=1.0, shuffle=True, seed=seed % 1000)
    again = m.all_metrics(shuffled, (), task, ordinal=task == "multiclass")
    for c in got.columns:
        a, b = got[c].item(), again[c].item()
        assert (a is None and b is None) or a == pytest.approx(b, abs=1e-12), c
    lo_hi = {
        "auroc": (0, 1), "accuracy": (0, 1), "balanced_accuracy": (0, 1), "ece": (0, 1),
        "classwise_ece": (0, 1), "brier": (0, 2), "nll": (0, np.inf), "aurc": (0, 1),
        "kappa_quadratic": (-1, 1),
    }  # fmt: skip
    for c, (lo, hi) in lo_hi.items():
        if c in got.columns and got[c].item() is not None:
            assert lo - 1e-12 <= got[c].item() <= hi + 1e-12, c
