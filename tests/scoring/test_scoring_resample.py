"""Image-level resampling: weighted AUROC and ECE against repeated-image references."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from crs.foundations.labels import TASKS, targets
from crs.scoring import metrics, resample
from crs.scoring.axes import AxisArrays, axes_by_seed, axes_from


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 40), st.booleans())
def test_weighted_auroc_equals_sklearn_on_repeated_images(seed, n, coarse):
    rng = np.random.default_rng(seed)
    scores = rng.random(n)
    if coarse:  # many ties
        scores = np.round(scores * 3) / 3
    positive = rng.random(n) < 0.5
    counts = resample.image_counts(n, 3, rng)
    got = metrics.weighted_auroc(scores, positive, counts)
    for b in range(counts.shape[1]):
        rep = np.repeat(np.arange(n), counts[:, b])
        y = positive[rep]
        if y.all() or not y.any():
            assert np.isnan(got[b])
        else:
            assert got[b] == pytest.approx(roc_auc_score(y, scores[rep]))
            # sklearn's sample_weight route gives the same number
            assert got[b] == pytest.approx(roc_auc_score(positive, scores, sample_weight=counts[:, b]))


def test_unit_counts_reproduce_plain_metrics():
    rng = np.random.default_rng(0)
    for task in TASKS:
        n, k = 60, 4
        if task == "multiclass":
            p = rng.dirichlet(np.ones(k), size=n)
            labels = rng.integers(0, k, n)
        else:
            p = rng.random((n, k))
            labels = rng.integers(-1, 2, (n, k)).astype(np.int8)
        t, known = targets(labels, task, k)
        ones = np.ones((n, 1), dtype=np.int32)
        table = metrics.long_table(p, labels, task)
        assert metrics.weighted_macro_auroc(p, t, known, ones)[0] == pytest.approx(
            metrics.auroc(table).item()
        )
        assert metrics.weighted_ece(p, t, known, ones, task)[0] == pytest.approx(
            metrics.ece(table, (), task).item()
        )
        # a replicate equals the plain metric on the images repeated by their counts
        counts = resample.image_counts(n, 3, rng)
        got_auc = metrics.weighted_macro_auroc(p, t, known, counts)
        got_ece = metrics.weighted_ece(p, t, known, counts, task)
        for b in range(3):
            rep = np.repeat(np.arange(n), counts[:, b])
            tb = metrics.long_table(p[rep], labels[rep], task)
            assert got_auc[b] == pytest.approx(metrics.auroc(tb).item())
            assert got_ece[b] == pytest.approx(metrics.ece(tb, (), task).item())


def test_image_counts_seeded_and_complete():
    a = resample.image_counts(50, 20, np.random.default_rng(7))
    b = resample.image_counts(50, 20, np.random.default_rng(7))
    assert np.array_equal(a, b)
    assert a.shape == (50, 20) and (a.sum(axis=0) == 50).all() and a.min() >= 0
    with pytest.raises(ValueError, match="at least one image"):
        resample.image_counts(0, 5, np.random.default_rng(0))


def test_axes_from_matches_axes_by_seed(make_records):
    records = make_records({"a": 0.9, "b": 0.7}, seeds=(0, 1))
    want = axes_by_seed(records).sort("encoder", "dataset", "seed")
    full = pl.col("fraction") == 1.0
    for row in want.iter_rows(named=True):
        r = records.filter(
            (pl.col("encoder") == row["encoder"])
            & (pl.col("dataset") == row["dataset"])
            & (pl.col("seed") == row["seed"])
        )
        clean = r.filter((pl.col("condition") == "clean") & full)
        low = r.filter((pl.col("condition") == "clean") & ~full).sort("fraction")["auroc"].to_numpy()
        pert = r.filter(pl.col("condition").str.contains("@")).sort("condition")["auroc"].to_numpy()
        shift = r.filter(pl.col("condition").str.starts_with("shift:"))["auroc"].to_numpy()
        got = axes_from(
            AxisArrays(np.array(clean["auroc"].item()), np.array(clean["ece"].item()), low, pert, shift)
        )
        assert got.tolist() == pytest.approx(
            [row["discrimination"], row["calibration"], row["label_efficiency"], row["robustness"]]
        )


def test_run_axes_with_unit_counts_equals_the_axes_of_the_plain_metrics():
    rng = np.random.default_rng(3)
    n, k = 80, 3
    labels = rng.integers(0, k, n)
    t, known = targets(labels, "multiclass", k)
    probs = rng.dirichlet(np.ones(k), size=(4, n))  # two fractions, a perturbation, a shift
    ones = np.ones((n, 1), dtype=np.int32)
    draw = resample.Draw(t, known, ones)
    run = resample.RunArrays(probs[:2], [probs[2]], [probs[3]])
    got = resample.run_axes(run, draw, [draw], "multiclass", version="1")[0]

    def auc(p):
        return metrics.auroc(metrics.long_table(p, labels, "multiclass")).item()

    d = auc(probs[1])
    ece = metrics.ece(metrics.long_table(probs[1], labels, "multiclass")).item()
    want = axes_from(AxisArrays(np.array(d), np.array(ece), np.array([auc(probs[0])]),
                                np.array([auc(probs[2])]), np.array([auc(probs[3])])))
    assert got == pytest.approx(want, rel=1e-12)


def slow_ece(conf, hit, n_bins=metrics.N_BINS):
    """sum_b (n_b / n) |mean_b hit - mean_b conf|, one bin at a time in plain Python."""
    total = 0.0
    for b in range(n_bins):
        members = [i for i, c in enumerate(conf) if min(int(c * n_bins), n_bins - 1) == b]
        total += abs(sum(float(hit[i]) - float(conf[i]) for i in members))
    return total / len(conf)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60))
def test_binned_ece_equals_a_slow_loop_on_repeated_images(seed, n):
    rng = np.random.default_rng(seed)
    conf = rng.random(n)
    hit = rng.random(n) < conf
    counts = resample.image_counts(n, 3, rng)
    got = metrics.binned_ece(conf, hit, counts.astype(np.float64))
    for b in range(3):
        rep = np.repeat(np.arange(n), counts[:, b])
        assert got[b] == pytest.approx(slow_ece(conf[rep], hit[rep]), abs=1e-12)
