"""The image bootstrap's batch (resample.AurocDraws): shared arrays, the compiled exact AUROC on small
and large test sets, batches of any size, and the ECE as one matrix product, each against the plain
kernels (``metrics.weighted_auroc``, ``weighted_macro_auroc``, ``weighted_ece``) to the bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from crs.foundations.labels import targets
from crs.scoring import kernels, metrics, resample
from crs.scoring.axes import used_rows
from crs.scoring.comparison import Runs
from crs.scoring.predictions import image_bootstrap_axes


def _case(n, k, rng, ties=False, known_share=1.0, signal=1.5):
    y = rng.integers(0, k, n)
    y[:k] = np.arange(k)
    target = np.eye(k, dtype=np.int8)[y]
    known = rng.random((n, k)) < known_share
    z = signal * target + rng.normal(size=(n, k))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    if ties:
        p = np.round(p * 3) / 3
    return p, target, known


def _plain(p, target, known, counts):
    return np.stack([metrics.weighted_auroc(p[:, j], target[:, j] == 1, counts, known[:, j])
                     for j in range(p.shape[1])], axis=1)  # [replicate, class]


@pytest.mark.parametrize("n,k,ties,known_share", [(40, 3, True, 0.8), (300, 4, False, 1.0), (25, 2, True, 0.6),
                                               (200, 9, True, 0.9)])
def test_the_compiled_pass_equals_weighted_auroc_class_by_class(n, k, ties, known_share):
    rng = np.random.default_rng(n)
    p, target, known = _case(n, k, rng, ties, known_share)
    target[:, -1] = 0  # a class without positives: NaN everywhere, both ways
    counts = resample.image_counts(n, 9, rng)
    counts[:, 0] = 0
    counts[0, 0] = n  # a replicate of one image: no class has both kinds, NaN
    srt = resample.sort_classes(p)
    pos, neg = resample.class_masks(target, known)
    want = _plain(p, target, known, counts)
    for c in (counts, resample.small_counts(counts), counts.astype(np.int64)):
        got = kernels.auroc_rows(srt.scores, srt.order, pos, neg, c).T
        assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[:, -1]).all() and np.isnan(got[0]).all()
    macro = resample.exact_batch([srt], (pos, neg), resample.small_counts(counts))[0]
    assert np.array_equal(macro, metrics.weighted_macro_auroc(p, target, known, counts), equal_nan=True)


def test_a_tie_run_of_positives_and_negatives_counts_each_pair_half():
    """By hand: scores 0.1 (neg), 0.5 (pos, neg, pos tied), 0.9 (pos); every image drawn once.
    Pairs (pos above neg = 1, tied = 1/2): each 0.5 positive beats 0.1 and ties one 0.5 negative:
    1.5 each; 0.9 beats both negatives: 2. (1.5 + 1.5 + 2) / (3 x 2) = 5/6."""
    s = np.array([[0.1], [0.5], [0.5], [0.5], [0.9]], dtype=np.float32)
    target = np.array([[0], [1], [0], [1], [1]], dtype=np.int8)
    srt = resample.sort_classes(s)
    masks = resample.class_masks(target, np.ones_like(target, dtype=bool))
    got = kernels.auroc_rows(srt.scores, srt.order, *masks, np.ones((5, 1), np.int16))
    assert got[0, 0] == 5 / 6
    twice = np.array([[1], [2], [1], [1], [1]], np.int16)  # the first tied positive drawn twice: (3 + 1.5 + 2) / 8
    assert kernels.auroc_rows(srt.scores, srt.order, *masks, twice)[0, 0] == 6.5 / 8


def test_identical_arrays_are_computed_once_and_a_last_bit_is_not_identical():
    rng = np.random.default_rng(2)
    p, target, known = _case(120, 3, rng)
    batch = resample.AurocDraws(resample.Draw(target, known, resample.image_counts(120, 50, rng)))
    twin, other = p.copy(), p.copy()
    other[0, 0] = np.nextafter(other[0, 0], 1.0)
    for a in (p, twin, other):
        batch.add(a)
    batch.compute()
    assert batch.summary() == {"exact": 2, "shared": 1}
    assert batch.value(twin).tobytes() == batch.value(p).tobytes()
    assert batch.value(p).tobytes() == metrics.weighted_macro_auroc(p, target, known, batch.draw.counts).tobytes()


@pytest.mark.parametrize("sparse", [False, True])
def test_large_test_sets_are_exact_to_the_bit(sparse):
    """3,000 images (what was linearised before); ``sparse``: 40 known labels a class and scores on 4 levels."""
    rng = np.random.default_rng(3)
    n, k, b = 3000, 4, 300
    p, target, known = _case(n, k, rng, signal=1.0)
    if sparse:
        known = np.zeros((n, k), dtype=bool)
        known[:40] = True
        p = np.round(p * 3) / 3
    draw = resample.Draw(target, known, resample.image_counts(n, b, rng))
    batch = resample.AurocDraws(draw)
    got = batch.value(p)
    assert batch.summary() == {"exact": 1, "shared": 0}
    assert np.array_equal(got, metrics.weighted_macro_auroc(p, target, known, draw.counts), equal_nan=True)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_ece_as_one_product_equals_the_per_bin_kernel(task):
    rng = np.random.default_rng(5)
    n, k = 200, 4
    if task == "multiclass":
        p = rng.dirichlet(np.ones(k), size=n)
        labels = rng.integers(0, k, n)
    else:
        p = rng.random((n, k))
        labels = rng.integers(-1, 2, (n, k)).astype(np.int8)
        labels[:, 3] = -1  # a label with nothing known: left out of the mean, as weighted_ece does
    t, known = targets(labels, task, k)
    counts = resample.image_counts(n, 30, rng)
    counts[:, 0] = 0  # a replicate with no weight: NaN both ways
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of the all-NaN replicate
        want = metrics.weighted_ece(p, t, known, counts, task)
    got = metrics.ece_draws(p, t, known, np.ascontiguousarray(counts.T, dtype=np.float64), task)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[0])
    assert np.allclose(got, want, rtol=0, atol=1e-12, equal_nan=True)


def test_image_bootstrap_axes_say_how_each_dataset_was_computed(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6})
    methods: dict = {}
    args = (store, Runs(used_rows(records), ["a", "b"], ["d1"], [0, 1, 2]), 20)
    first = image_bootstrap_axes(*args, np.random.default_rng(0), methods=methods)
    assert first.tobytes() == image_bootstrap_axes(*args, np.random.default_rng(0)).tobytes()
    got = methods["d1"]
    arrays = 2 * 3 * (2 + 1 + 1)  # encoders x seeds x (clean at 2 fractions, one perturbed, one shift)
    assert set(got) == {"exact", "shared"} and got["exact"] + got["shared"] == arrays and got["exact"] > 0


def test_score_records_the_image_method_per_dataset(make_store, tmp_path):
    from crs.scoring import ScoreOptions, score

    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6})
    both = score(records, ScoreOptions(bootstrap=20), store=store)
    assert both.settings["bootstrap"]["unit"] == "both"
    method = both.settings["bootstrap"]["image_method"]["d1"]
    assert set(method) == {"exact", "shared"} and method["exact"] > 0
    seed = score(records, ScoreOptions(bootstrap=20, bootstrap_unit="seed"), store=store)
    assert "image_method" not in seed.settings["bootstrap"]


def test_batches_of_any_size_give_the_same_values(monkeypatch):
    rng = np.random.default_rng(6)
    n, k = 1200, 3
    arrays = [_case(n, k, np.random.default_rng(i))[0] for i in range(3)]
    _, target, known = _case(n, k, np.random.default_rng(0))
    known[rng.random((n, k)) < 0.1] = False  # some unknown entries (multi-label style): left out both ways
    draw = resample.Draw(target, known, resample.image_counts(n, 100, rng))

    def values():
        batch = resample.AurocDraws(draw)
        for a in arrays:
            batch.add(a)
        batch.compute()
        return np.stack([batch.value(a) for a in arrays]), batch.summary()

    together, summary = values()
    monkeypatch.setattr(resample, "_SORT_BLOCK", 1)  # one array a block
    alone, summary_alone = values()
    assert summary == summary_alone == {"exact": 3, "shared": 0}
    assert together.tobytes() == alone.tobytes()
    exact = np.stack([metrics.weighted_macro_auroc(a, target, known, draw.counts) for a in arrays])
    assert np.array_equal(together, exact, equal_nan=True)
