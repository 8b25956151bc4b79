"""The built-in synthetic datasets: determinism, table contract, splits, and difficulty."""

import dataclasses
import functools
import hashlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from crs.extract import synthetic
from crs.extract.synthetic.dataset import _plan
from crs.extract.synthetic.registry import SPECS
from crs.extract.synthetic.spec import RENDER_STREAM, keyed_rng

NAMES = synthetic.DATASETS
FULL = {"demo_derm": 900, "demo_fundus": 900, "demo_cxr": 1100, "demo_cxr_site2": 400}
GROUP_SIZES = {"demo_derm": 3, "demo_fundus": 2, "demo_cxr": 3, "demo_cxr_site2": 3}


def test_registry():
    assert NAMES == ("demo_derm", "demo_fundus", "demo_cxr", "demo_cxr_site2")
    derm, fundus, cxr, site2 = (synthetic.get(n) for n in NAMES)
    assert (derm.task, len(derm.classes), derm.ordinal) == ("multiclass", 5, False)
    assert (fundus.task, len(fundus.classes), fundus.ordinal) == ("multiclass", 5, True)
    assert (cxr.task, len(cxr.classes), cxr.shift_target) == ("multilabel", 4, "demo_cxr_site2")
    assert site2.classes == cxr.classes and site2.shift_target is None
    assert all(synthetic.get(n).image_size == 64 and synthetic.get(n).description for n in NAMES)


def test_unknown_name_lists_valid_names():
    with pytest.raises(KeyError, match="valid names: demo_derm, demo_fundus, demo_cxr, demo_cxr_site2"):
        synthetic.get("demo_mri")
    with pytest.raises(ValueError, match="size must be > 0"):
        synthetic.get("demo_derm", size=0)


@pytest.mark.parametrize("name", NAMES)
def test_table_and_images_contract(name):
    ds = synthetic.get(name, size=0.1)
    t = ds.table()
    n = len(t.ids)
    assert t.ids.dtype.kind == "U" and t.group.dtype.kind == "U" and len(set(t.ids.tolist())) == n
    assert t.ids[3] == f"{name}-000003"
    assert t.split.dtype == np.int8 and t.split.shape == (n,) and set(t.split.tolist()) <= {0, 1, 2}
    if ds.task == "multiclass":
        assert t.labels.dtype == np.int64 and t.labels.shape == (n,)
        assert t.labels.min() >= 0 and t.labels.max() < len(ds.classes)
    else:
        assert t.labels.dtype == np.int8 and t.labels.shape == (n, len(ds.classes))
        assert set(np.unique(t.labels).tolist()) <= {-1, 0, 1}
    # Groups are contiguous runs of 1..max images with one label (multiclass).
    starts = np.flatnonzero(np.r_[True, t.group[1:] != t.group[:-1]])
    assert len(starts) == len(set(t.group.tolist()))
    assert np.diff(np.r_[starts, n]).max() <= GROUP_SIZES[name]
    if ds.task == "multiclass":
        assert all(len(set(t.labels[t.group == g].tolist())) == 1 for g in t.group[starts[:20]])

    img = ds.images(np.array([0, n - 1]))
    assert img.dtype == np.uint8 and img.shape == (2, 64, 64, 3)
    assert img.std() > 10  # not blank
    if name.startswith("demo_cxr"):
        assert (img[..., 0] == img[..., 1]).all() and (img[..., 0] == img[..., 2]).all()
    assert ds.images([]).shape == (0, 64, 64, 3)
    with pytest.raises(ValueError, match="read-only"):  # the cached table is shared
        t.labels[0] = 0
    with pytest.raises(IndexError, match=f"rows 0..{n - 1}"):
        ds.images([n])


@pytest.mark.parametrize("name", NAMES)
def test_renderers_draw_float32(name):
    # float64 creeping in (a numpy scalar, a float64 constant) makes drawing ~4x slower.
    plan, render = _plan(name, 0.1, 0), SPECS[name].render
    for i in range(6):
        rng = keyed_rng(name, 0, RENDER_STREAM, i)
        img = render(64, plan.groups[plan.group_index[i]], plan.rows[i], rng)
        assert img.dtype == np.float32 and img.shape in ((3, 64, 64), (1, 64, 64))


@pytest.mark.parametrize("name", NAMES)
def test_row_order_and_subset_do_not_matter(name):
    ds = synthetic.get(name, size=0.1)
    a = ds.images([5, 2, 9])
    b = ds.images([2, 5, 9, 5])
    assert np.array_equal(a, b[[1, 0, 2]]) and np.array_equal(b[1], b[3])
    # Row i is the same at any size that holds it: labels, group and image.
    big = synthetic.get(name, size=0.2)
    assert np.array_equal(big.images([5, 2, 9]), a)
    assert np.array_equal(big.table().labels[:40], ds.table().labels[:40])
    assert np.array_equal(big.table().group[:40], ds.table().group[:40])
    assert not np.array_equal(synthetic.get(name, size=0.1, seed=1).images([5]), a[:1])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 39), min_size=1, max_size=6))
def test_any_rows_match_the_full_render(rows):
    ds = synthetic.get("demo_fundus", size=0.01)  # the 40-image floor
    assert np.array_equal(ds.images(rows), _dataset("demo_fundus", 0.01)[1][rows])


def test_same_images_in_a_fresh_process():
    code = (
        "import hashlib, numpy as np; from crs.extract import synthetic as s; "
        "print(''.join(hashlib.sha256(s.get(n, size=0.1).images(np.array([7, 0])).tobytes()).hexdigest()[:16] "
        "for n in s.DATASETS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    here = "".join(
        hashlib.sha256(synthetic.get(n, size=0.1).images(np.array([7, 0])).tobytes()).hexdigest()[:16] for n in NAMES
    )
    assert out == here


@pytest.mark.parametrize("name", NAMES)
def test_size_scales_the_image_count(name):
    assert len(synthetic.get(name).table().ids) == FULL[name]
    assert len(synthetic.get(name, size=0.5).table().ids) == round(FULL[name] * 0.5)
    if name == "demo_cxr_site2":  # the smallest: a bigger table costs time, not insight
        assert len(synthetic.get(name, size=2.0).table().ids) == FULL[name] * 2
    assert len(synthetic.get(name, size=0.001).table().ids) == 40  # a floor, so every split has something


@pytest.mark.parametrize("name", ["demo_derm", "demo_fundus", "demo_cxr"])
def test_splits_are_group_aware_stratified_70_10_20(name):
    ds = synthetic.get(name)
    t = ds.table()
    share = np.bincount(t.split, minlength=3) / len(t.split)
    np.testing.assert_allclose(share, [0.7, 0.1, 0.2], atol=0.02)
    splits_of_group = {}
    for g, s in zip(t.group.tolist(), t.split.tolist()):
        splits_of_group.setdefault(g, set()).add(s)
    assert all(len(s) == 1 for s in splits_of_group.values())
    for s in range(3):
        labels = t.labels[t.split == s]
        if ds.task == "multiclass":
            assert set(labels.tolist()) == set(range(len(ds.classes)))
            # stratified: each class's share in the split is near its overall share
            np.testing.assert_allclose(
                np.bincount(labels, minlength=5) / len(labels), np.bincount(t.labels) / len(t.labels), atol=0.05
            )
        else:
            assert ((labels == 1).sum(axis=0) > 0).all()
    assert not np.array_equal(t.split, synthetic.get(name, seed=1).table().split)


def test_shift_target_is_test_only():
    assert (synthetic.get("demo_cxr_site2").table().split == 2).all()
    assert (synthetic.get("demo_cxr_site2", size=0.3).table().split == 2).all()


def test_label_distributions():
    derm = np.bincount(synthetic.get("demo_derm").table().labels) / 900
    np.testing.assert_allclose(derm, [0.45, 0.20, 0.15, 0.12, 0.08], atol=0.05)
    fundus = np.bincount(synthetic.get("demo_fundus").table().labels) / 900
    np.testing.assert_allclose(fundus, [0.40, 0.15, 0.25, 0.10, 0.10], atol=0.05)
    for name in ("demo_cxr", "demo_cxr_site2"):
        labels = synthetic.get(name).table().labels
        prevalence = (labels == 1).mean(axis=0)
        assert ((prevalence > 0.08) & (prevalence < 0.4)).all()
        assert 0.02 < (labels == -1).mean() < 0.1
        positive = (labels == 1).astype(float)
        assert np.corrcoef(positive[:, 0], positive[:, 3])[0, 1] > 0.1  # cardiomegaly and edema co-occur


def test_other_image_sizes():
    for name in NAMES:
        ds = dataclasses.replace(synthetic.get(name, size=0.1), image_size=32)
        assert ds.images([0, 1]).shape == (2, 32, 32, 3)


# --- difficulty: learnable, not trivial, and the site shift costs some AUROC -----------


def _pixels(img):
    """[N, 64, 64, 3] -> [N, 8 * 8 * 3] block means (16 x 16 blocks give much the same
    AUROCs, and take ~10x longer to fit)."""
    return img.reshape(len(img), 8, 8, 8, 8, 3).mean(axis=(2, 4)).reshape(len(img), -1)


def _histograms(img):  # 16-bin histogram, mean and std of each channel
    x = img.reshape(len(img), -1, 3)
    feats = []
    for c in range(3):
        hist = (np.arange(16) == (x[:, :, c, None] // 16)).mean(axis=1)
        feats += [hist, x[:, :, c].mean(axis=1, keepdims=True), x[:, :, c].std(axis=1, keepdims=True)]
    return np.concatenate(feats, axis=1)


@functools.cache
def _dataset(name, size):
    ds = synthetic.get(name, size=size)
    return ds.table(), ds.images(np.arange(len(ds.table().ids)))


def _probe_auroc(train_x, train_y, test_x, test_y):
    """Macro one-vs-rest AUROC (multi-class) or mean per-label AUROC, -1 entries ignored."""
    with threadpool_limits(1):  # BLAS threads only slow fits this small, badly on a busy machine
        return _fit_and_score(train_x, train_y, test_x, test_y)


def _fit_and_score(train_x, train_y, test_x, test_y):
    scaler = StandardScaler().fit(train_x)
    train_x, test_x = scaler.transform(train_x), scaler.transform(test_x)
    if train_y.ndim == 1:
        p = LogisticRegression(C=0.05, tol=1e-3, max_iter=1000).fit(train_x, train_y).predict_proba(test_x)
        return roc_auc_score(test_y, p, multi_class="ovr", average="macro")
    aucs = []
    for k in range(train_y.shape[1]):
        fit, ev = train_y[:, k] >= 0, test_y[:, k] >= 0
        model = LogisticRegression(C=0.05, tol=1e-3, max_iter=1000).fit(train_x[fit], train_y[fit, k])
        aucs.append(roc_auc_score(test_y[ev, k], model.predict_proba(test_x[ev])[:, 1]))
    return float(np.mean(aucs))


@pytest.mark.parametrize("name", ["demo_derm", "demo_fundus", "demo_cxr"])
def test_difficulty_is_between_chance_and_perfect(name):
    t, img = _dataset(name, 0.5)
    fit, test = t.split < 2, t.split == 2
    for features in (_pixels, _histograms):
        x = features(img)
        auroc = _probe_auroc(x[fit], t.labels[fit], x[test], t.labels[test])
        assert 0.6 < auroc < 0.97, (name, features.__name__, auroc)


def test_site_shift_costs_some_but_not_all_auroc():
    (t, img), (t2, img2) = _dataset("demo_cxr", 0.5), _dataset("demo_cxr_site2", 0.8)
    x, x2 = _pixels(img), _pixels(img2)
    fit, test = t.split < 2, t.split == 2
    clean = _probe_auroc(x[fit], t.labels[fit], x[test], t.labels[test])
    shifted = _probe_auroc(x[fit], t.labels[fit], x2, t2.labels)
    assert 0.6 < shifted < clean - 0.03, (clean, shifted)
