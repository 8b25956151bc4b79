"""The image bootstrap's batch (resample.AurocDraws): shared arrays, the linearised AUROC and its
check, the exact fallback, and the ECE as one matrix product, each against the plain kernels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from crs.labels import targets
from crs.scoring import metrics, resample
from crs.scoring.axes import used_rows
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


@pytest.mark.parametrize("n,k,ties,known_share", [(40, 3, True, 0.8), (300, 4, False, 1.0), (25, 2, True, 0.6)])
def test_exact_draws_and_placements_equal_weighted_auroc(n, k, ties, known_share):
    rng = np.random.default_rng(n)
    p, target, known = _case(n, k, rng, ties, known_share)
    target[:, -1] = 0  # a class without positives: NaN everywhere, both ways
    counts = resample.image_counts(n, 9, rng)
    srt = resample.sort_classes(p, target, known)
    got = resample.exact_draws(srt, counts.T)
    want = _plain(p, target, known, counts)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[:, -1]).all()
    assert np.allclose(got, want, rtol=0, atol=1e-14, equal_nan=True)
    auc, _, _ = resample.placements(p, target, known, srt)
    assert np.allclose(auc, _plain(p, target, known, np.ones((n, 1)))[0], atol=1e-14, equal_nan=True)


def test_linear_plus_the_second_order_term_is_the_exact_auroc():
    """The identity behind the linearisation (resample module doc): exact = linear + r_c, with
    r_c = delta_pos' R delta_neg / (P N) from the doubly centred residual R of the pair kernel."""
    rng = np.random.default_rng(1)
    n = 30
    s = np.round(rng.random(n) * 5) / 5  # ties
    pos = rng.random(n) < 0.4
    auc, a_pos, a_neg = resample.placements(s[:, None], pos[:, None].astype(np.int8), np.ones((n, 1), bool))
    counts = resample.image_counts(n, 6, rng)
    h = (s[pos][:, None] > s[~pos][None, :]) + 0.5 * (s[pos][:, None] == s[~pos][None, :])
    r = h - h.mean(1, keepdims=True) - h.mean(0, keepdims=True) + h.mean()
    for b in range(counts.shape[1]):
        c = counts[:, b].astype(float)
        big_p, big_n = c[pos].sum(), c[~pos].sum()
        linear = auc[0] + c @ a_pos[:, 0] / big_p + c @ a_neg[:, 0] / big_n
        remainder = (c[pos] - 1) @ r @ (c[~pos] - 1) / (big_p * big_n)
        assert linear + remainder == pytest.approx(metrics.weighted_auroc(s, pos, counts[:, [b]])[0], abs=1e-12)


def test_identical_arrays_are_computed_once_and_a_last_bit_is_not_identical():
    rng = np.random.default_rng(2)
    p, target, known = _case(120, 3, rng)
    batch = resample.AurocDraws(resample.Draw(target, known, resample.image_counts(120, 50, rng)))
    twin, other = p.copy(), p.copy()
    other[0, 0] = np.nextafter(other[0, 0], 1.0)
    for a in (p, twin, other):
        batch.add(a)
    batch.compute()
    assert batch.summary() == {"linear": 0, "exact": 2, "shared": 1}
    assert batch.value(twin).tobytes() == batch.value(p).tobytes()
    assert batch.value(p).tobytes() == metrics.weighted_macro_auroc(p, target, known, batch.draw.counts).tobytes()


def test_linearised_auroc_on_a_large_test_set_is_within_its_tolerance():
    rng = np.random.default_rng(3)
    n, k, b = 3000, 4, 300
    p, target, known = _case(n, k, rng, signal=1.0)
    draw = resample.Draw(target, known, resample.image_counts(n, b, rng))
    batch = resample.AurocDraws(draw)
    got = batch.value(p)
    assert batch.summary()["linear"] == 1
    exact = metrics.weighted_macro_auroc(p, target, known, draw.counts)
    sd = exact.std()
    m = resample.CHECK_DRAWS
    assert np.abs(got[:m] - exact[:m]).max() <= resample.LINEAR_TOL * sd  # what the check passed on
    assert np.abs(got - exact).max() <= 0.25 * sd  # every replicate, not only the checked ones
    for q in (2.5, 97.5):  # the interval ends move far less than the bootstrap's own Monte Carlo error
        assert abs(np.percentile(got, q) - np.percentile(exact, q)) <= 0.05 * sd
    assert np.array_equal(batch.value(p), got)


def test_the_check_falls_back_to_exact_where_few_labels_are_known_and_scores_tie(monkeypatch):
    rng = np.random.default_rng(4)
    n = resample.LINEAR_MIN_IMAGES + 20  # big enough to try the linearisation ...
    target = (rng.random((n, 2)) < 0.5).astype(np.int8)
    known = np.zeros((n, 2), dtype=bool)
    known[:40] = True  # ... but 40 known labels each (a sparse multi-label set), scores on 4 levels
    p = np.round((0.3 * target + rng.random((n, 2))) * 3) / 3
    draw = resample.Draw(target, known, resample.image_counts(n, 200, rng))
    batch = resample.AurocDraws(draw)
    got = batch.value(p)
    assert batch.summary() == {"linear": 0, "exact": 1, "shared": 0}
    want = metrics.weighted_macro_auroc(p, target, known, draw.counts)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(got, want, rtol=0, atol=1e-14, equal_nan=True)
    # the same array passes nowhere when asked for exact, and small sets never try
    exact = resample.AurocDraws(draw, "exact")
    assert np.allclose(exact.value(p), want, atol=1e-14, equal_nan=True) and exact.summary()["linear"] == 0
    with pytest.raises(ValueError, match="method"):
        resample.AurocDraws(draw, "fast")
    # without the check the linear values would have been kept, and they are off
    monkeypatch.setattr(resample, "LINEAR_TOL", np.inf)
    unchecked = resample.AurocDraws(draw)
    off = unchecked.value(p)
    assert unchecked.summary()["linear"] == 1
    assert np.nanmax(np.abs(off - want)) > 0.1 * np.nanstd(want)


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
    args = (store, used_rows(records), ["a", "b"], ["d1"], [0, 1, 2], 20)
    auto = image_bootstrap_axes(*args, np.random.default_rng(0), methods)
    exact = image_bootstrap_axes(*args, np.random.default_rng(0), method="exact")
    # the tiny store's test split is below LINEAR_MIN_IMAGES: every array exact, the same bits
    assert auto.tobytes() == exact.tobytes()
    got = methods["d1"]
    arrays = 2 * 3 * (2 + 1 + 1)  # encoders x seeds x (clean at 2 fractions, one perturbed, one shift)
    assert got["linear"] == 0 and got["exact"] + got["shared"] == arrays and got["exact"] > 0


def test_score_records_the_image_method_per_dataset(make_store, tmp_path):
    from crs.scoring import score

    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6})
    both = score(records, store=store, n_bootstrap=20)
    assert both.settings["bootstrap"]["unit"] == "both"
    method = both.settings["bootstrap"]["image_method"]["d1"]
    assert method["linear"] == 0 and method["exact"] > 0  # 40 test images: below LINEAR_MIN_IMAGES
    assert "image_method" not in score(records, store=store, n_bootstrap=20, bootstrap_unit="seed").settings["bootstrap"]


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
    monkeypatch.setattr(resample, "_BATCH_COLUMNS", 2 * k)  # one array a batch
    alone, summary_alone = values()
    assert summary == summary_alone and summary["linear"] == 3
    assert np.allclose(together, alone, rtol=0, atol=1e-6)
    exact = np.stack([metrics.weighted_macro_auroc(a, target, known, draw.counts) for a in arrays])
    assert np.abs(together - exact).max() <= 0.3 * exact.std(axis=1).min()
