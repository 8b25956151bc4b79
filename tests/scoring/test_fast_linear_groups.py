"""The linearised AUROC's positive sums per class over that class's own images (multi-class: no image is a
known positive of two classes) against the one dense matrix product they replace: the same linear values up to
float32 rounding of the sums, the same NaN pattern, the same arrays kept linear; multi-label keeps the dense path."""

from __future__ import annotations

import numpy as np
import pytest

from crs.labels import targets
from crs.scoring import resample as r


def _draw(rng, n, k, task, b=200):
    if task == "multiclass":
        y = rng.integers(0, k - 1, n)  # the last class never a label: no positive, its AUROC NaN
        y[: k - 1] = np.arange(k - 1)
    else:
        y = rng.integers(0, 2, (n, k)).astype(np.int8)
        y[rng.random((n, k)) < 0.1] = -1
    t, known = targets(y, task, k)
    return r.Draw(t, known, r.image_counts(n, b, rng))


def _arrays(rng, d, m):
    base = d.target * 0.4 + rng.random((m, *d.target.shape))
    base[: m // 2] = np.round(base[: m // 2], 1)  # ties in half of them
    return [a.astype(np.float32) for a in base]


def _dense(d):
    a = r.AurocDraws(d)
    a._groups = (None,)  # the dense product, as before
    return a


@pytest.mark.parametrize("n, k", [(1200, 6), (1500, 3)])
def test_grouped_positive_sums_match_the_dense_product(n, k):
    rng = np.random.default_rng(n + k)
    d = _draw(rng, n, k, "multiclass")
    arrays = _arrays(rng, d, 12)
    sorts = [r.sort_classes(p, d.target, d.known) for p in arrays]
    fast, slow = r.AurocDraws(d), _dense(d)
    assert fast._positive_groups() is not None
    a, b = fast._linear(arrays, sorts), slow._linear(arrays, sorts)
    assert np.array_equal(np.isnan(a), np.isnan(b)) and np.isfinite(a).any()
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    order, bounds = fast._positive_groups()  # every image once; class c's positives between its bounds
    assert sorted(order.tolist()) == list(range(n))
    pos = d.known & (d.target == 1)
    for c in range(k):
        assert pos[order[bounds[c]:bounds[c + 1]], c].all() and pos[:, c].sum() == bounds[c + 1] - bounds[c]


def test_compute_keeps_the_same_arrays_linear_and_the_same_values_to_float32_rounding():
    rng = np.random.default_rng(7)
    d = _draw(rng, 1100, 5, "multiclass")
    arrays = _arrays(rng, d, 10)
    got = {}
    for name, a in (("fast", r.AurocDraws(d)), ("slow", _dense(d))):
        for p in arrays:
            a.add(p)
        a.compute()
        got[name] = (a.summary(), [a.value(p) for p in arrays])
    assert got["fast"][0] == got["slow"][0]
    for x, y in zip(got["fast"][1], got["slow"][1], strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=2e-6)


def test_multilabel_keeps_the_dense_product():
    rng = np.random.default_rng(3)
    d = _draw(rng, 1000, 4, "multilabel")
    assert r.AurocDraws(d)._positive_groups() is None
