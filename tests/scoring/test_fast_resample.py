"""The image bootstrap's faster kernels against their slow definitions: the compiled exact AUROC on
integer multiplicities of each width to the bit against ``metrics.weighted_auroc``, and
``AurocDraws``' hash-once lookup of an added array, which must never answer for other values."""

from __future__ import annotations

import numpy as np
import pytest

from crs.scoring import kernels, metrics, resample


def _case(n, k, rng, ties, known_share):
    y = rng.integers(0, k, n)
    y[:k] = np.arange(k)
    target = np.eye(k, dtype=np.int8)[y]
    target[:, -1] = 0  # a class without positives: NaN
    known = rng.random((n, k)) < known_share
    p = np.exp(1.5 * target + rng.normal(size=(n, k)))
    p = p / p.sum(1, keepdims=True)
    return (np.round(p * 4) / 4 if ties else p).astype(np.float32), target, known


# 33,000 images: int32 multiplicities (``small_counts``), and sums past 2^31 (2n^2)
@pytest.mark.parametrize("n,ties,known_share", [(60, True, 0.7), (400, False, 1.0), (33000, True, 0.9)])
def test_the_compiled_pass_on_integer_counts_of_each_width_equals_the_kernel(n, ties, known_share):
    rng = np.random.default_rng(n)
    p, target, known = _case(n, 4, rng, ties, known_share)
    counts = resample.image_counts(n, 16, rng)
    srt = resample.sort_classes(p)
    masks = resample.class_masks(target, known)
    kernel = np.stack([metrics.weighted_auroc(p[:, j], target[:, j] == 1, counts, known[:, j]) for j in range(4)])
    small = resample.small_counts(counts)
    assert small.dtype == (np.int16 if n < 2**15 else np.int32)
    for c in (small, counts.astype(np.int64), counts.astype(np.float64)):
        assert np.array_equal(kernels.auroc_rows(srt.scores, srt.order, *masks, c), kernel, equal_nan=True)


def test_an_added_array_is_looked_up_by_memory_only_until_release():
    rng = np.random.default_rng(3)
    n = 300  # exact: the values do not depend on what else is in the batch
    p, target, known = _case(n, 3, rng, False, 1.0)
    draw = resample.Draw(target, known, resample.image_counts(n, 40, rng))

    def fresh(a):
        return resample.AurocDraws(draw).value(a.copy())

    buffer = np.stack([p, p[::-1].copy()])  # two arrays, one memory
    batch = resample.AurocDraws(draw)
    batch.add(buffer[0])
    batch.add(buffer[1])
    batch.compute()
    assert np.array_equal(batch.value(buffer[0]), fresh(buffer[0]), equal_nan=True)
    assert np.array_equal(batch.value(buffer[1]), fresh(buffer[1]), equal_nan=True)
    batch.release()
    buffer[0] = np.roll(p, 7, axis=0)  # other values in the same memory: hashed again, not the old key
    assert np.array_equal(batch.value(buffer[0]), fresh(buffer[0]), equal_nan=True)
    assert not np.array_equal(batch.value(buffer[0]), batch.value(buffer[1].copy()), equal_nan=True)


@pytest.mark.parametrize("n", [200, 1100])
def test_run_axes_ece_is_computed_once_per_distinct_array_with_the_kernels_values(n, monkeypatch):
    rng = np.random.default_rng(n)
    p, target, known = _case(n, 3, rng, False, 1.0)
    draw = resample.Draw(target, known, resample.image_counts(n, 30, rng))
    kernel = "weighted_ece" if n < resample.ECE_PRODUCT_FROM else "ece_draws"
    want = (metrics.weighted_ece(p, target, known, draw.counts, "multiclass") if kernel == "weighted_ece" else
            metrics.ece_draws(p, target, known, np.ascontiguousarray(draw.counts.T, dtype=np.float64), "multiclass"))
    calls = []
    real = getattr(resample, kernel)
    monkeypatch.setattr(resample, kernel, lambda *a, **k: calls.append(1) or real(*a, **k))
    batch = resample.AurocDraws(draw)
    seeds = [p, p.copy(), np.roll(p, 1, axis=0)]  # the first two: one probe for both seeds
    got = [batch.ece(s, "multiclass") for s in seeds]
    assert np.array_equal(got[0], want, equal_nan=True) and np.array_equal(got[1], want, equal_nan=True)
    assert not np.array_equal(got[2], want)
    assert len(calls) == 2
