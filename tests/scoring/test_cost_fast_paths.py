"""The fast paths of ``crs score`` at paper scale, each against its slow definition.

``metrics.array_metrics`` (every metric of many arrays at once) against ``metrics.all_metrics``
on the long table: AUROC to the bit (both sum integers and halves exactly, then divide once),
the others to 1e-12 relative (the same terms, added in another order). ``probe_metrics``, which
computes each distinct array once, against the long-table path over every seed and fraction.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from crs.foundations.conditions import parse
from crs.foundations.labels import targets
from crs.scoring import metrics, predictions
from crs.scoring import temperature as ts
from crs.scoring.axes import FRACTION_TOL
from crs.scoring.predictions import read, stored_metrics

REL = 1e-12


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return bool(np.allclose(a, b, rtol=REL, atol=1e-15, equal_nan=True))


def _multiclass(rng, m, n, k):
    y = rng.integers(0, k - 1, n)  # the last class is never a label: it has no positive
    z = np.round(rng.normal(size=(m, n, k)), 1)  # rounded: ties in scores and confidences
    p = np.exp(z)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32), y


def _multilabel(rng, m, n, k):
    y = rng.integers(0, 2, (n, k)).astype(np.int8)
    y[rng.random((n, k)) < 0.2] = -1
    y[:, 0] = -1  # a label with no known entry is left out of every mean
    y[:, 1] = 1  # and one with no negative has no AUROC
    p = 1.0 / (1.0 + np.exp(-np.round(rng.normal(size=(m, n, k)), 1)))
    return p.astype(np.float32), y


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
@pytest.mark.parametrize("n", [7, 300])
def test_array_metrics_equal_the_table_metrics(task, n):
    rng = np.random.default_rng(n)
    m, k = 4, 5
    probs, labels = (_multiclass if task == "multiclass" else _multilabel)(rng, m, n, k)
    probs[1] = probs[0]  # identical arrays give identical rows
    ordinal = task == "multiclass"
    table = metrics.long_table(probs, labels, task, {"probe": list(range(m))})
    want = metrics.all_metrics(table, ["probe"], task, ordinal)
    names = [c for c in want.columns if c != "probe"]
    target, known = targets(labels, task, k)
    got = metrics.array_metrics(probs, target, known, task, names)
    for name in names:
        assert _close(got[name], want[name].to_numpy()), name
    assert np.array_equal(got["auroc"][0], got["auroc"][1])


def test_auroc_rows_equal_the_kernel_to_the_bit():
    rng = np.random.default_rng(1)
    scores = rng.random((6, 200))
    scores[:3] = np.round(scores[:3], 2)  # rows with many ties, and rows without (the kernel's shortcut)
    pos = rng.random((6, 200)) < 0.3
    neg = ~pos & (rng.random((6, 200)) < 0.8)  # some entries are neither (unknown)
    pos[5] = False  # no positive: NaN
    got = metrics.auroc_rows(scores, pos, neg)
    for r in range(6):
        want = metrics.weighted_auroc(scores[r], pos[r], np.ones((200, 1)), pos[r] | neg[r])[0]
        assert got[r] == want or (np.isnan(got[r]) and np.isnan(want))
    assert np.isnan(got[5])


def _slow_probe_metrics(store, test, dataset, encoder, condition, seeds, fr, temps) -> pl.DataFrame:
    """What ``_condition_metrics`` computed before: the long table of every seed and fraction."""
    kind = parse(condition).kind
    fr = fr if kind == "clean" else [f for f in fr if abs(f - 1.0) <= FRACTION_TOL]
    if kind == "shift":
        c_target, c_known, _, _ = predictions.split_targets(store, parse(condition).dataset)
    else:
        c_target, c_known = test.target, test.known
    probs = predictions.Predictions(store, dataset, encoder, condition).select(seeds, fr)
    labels = stored_metrics._labels_from(c_target, c_known, test.task)
    keys, by = {"seed": seeds, "fraction": fr}, ["seed", "fraction"]
    out = metrics.all_metrics(metrics.long_table(probs, labels, test.task, keys), by, test.task, test.ordinal)
    val, t_all = temps
    t = t_all[np.ix_(read.find_index(val.seeds, seeds, "seeds", val.where),
                     read.find_index(val.fractions, fr, "fractions", val.where))]
    scaled = metrics.long_table(ts.scale(probs, t, test.task), labels, test.task, keys)
    for name, fn in (("ece", metrics.ece), ("brier", metrics.brier), ("nll", metrics.nll)):
        out = out.join(fn(scaled, by, test.task).rename({name: f"{name}_ts"}), on=by, how="left")
    if kind == "perturbed":
        return out, None, None
    at_one = [pl.col("fraction") == 1.0]
    per_class = metrics.auroc_per_class(metrics.long_table(probs, labels, test.task, keys).filter(*at_one), ["seed"])
    rel = [metrics.reliability(tab.filter(*at_one), ["seed"], test.task)
           for tab in (metrics.long_table(probs, labels, test.task, keys), scaled)]
    return out, per_class, rel


def test_probe_metrics_equal_the_long_table_path(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.5}, seeds=(0, 1, 2), fractions=(0.5, 1.0))
    # as the probe writes them: at fraction 1 every seed's probe is one probe, so its arrays are equal
    for cond in ("clean", "gaussian_noise@1", "shift:d1_site2", "validation"):
        probs, attrs = store.read_predictions("d1", "a", cond)
        probs[:, -1] = probs[0, -1]
        store.write_predictions("d1", "a", cond, probs, attrs)
    got = predictions.probe_metrics(store, records, ["a", "b"], ["d1"])
    test = stored_metrics._TestSplit(*predictions.split_targets(store, "d1"))
    seen = 0
    for (enc, cond), g in records.group_by("encoder", "condition"):
        temps = stored_metrics._temperatures(store, "d1", enc, test.task)
        fr = sorted(g["fraction"].unique().to_list())
        want, want_class, want_rel = _slow_probe_metrics(store, test, "d1", enc, cond, [0, 1, 2], fr, temps)
        mine = got.metrics.filter((pl.col("encoder") == enc) & (pl.col("condition") == cond)).sort("seed", "fraction")
        assert mine.height == want.height
        for name in [c for c in want.columns if c not in ("seed", "fraction")]:
            assert _close(mine[name].to_numpy(), want[name].to_numpy()), (enc, cond, name)
        seen += 1
        if want_class is None:
            continue
        pick = (pl.col("encoder") == enc) & (pl.col("condition") == cond)
        assert_frame_equal(got.per_class.filter(pick).select(want_class.columns).sort("seed", "class"),
                           want_class.sort("seed", "class"), rel_tol=REL, abs_tol=1e-15)
        for scaled, w in zip((False, True), want_rel, strict=True):
            g = got.reliability.filter(pick & (pl.col("scaled") == scaled)).select(w.columns).sort("seed", "bin")
            assert_frame_equal(g, w.sort("seed", "bin"), rel_tol=REL, abs_tol=1e-15, check_dtypes=False)
    assert seen == 6
    full = got.metrics.filter((pl.col("encoder") == "a") & (pl.col("fraction") == 1.0)
                              & (pl.col("condition") == "clean"))
    assert full["auroc"].n_unique() == 1 and full.height == 3  # one probe, three rows


@pytest.mark.parametrize("route", ["numpy", "compiled"])
@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_exact_batch_equals_the_kernel_to_the_bit(task, route, monkeypatch):
    from crs.scoring import kernels, resample

    # numpy's kernel for small work, the compiled pass once the budget is spent (kernels.numpy_takes)
    monkeypatch.setattr(kernels, "NUMPY_WORK", 1 << 40 if route == "numpy" else 0)
    monkeypatch.setattr(kernels, "_KERNELS", {} if route == "numpy" else kernels._KERNELS)
    monkeypatch.setattr(kernels, "_numpy_work", [0])
    used = []
    monkeypatch.setattr(kernels, "auroc_rows", lambda *a, f=kernels.auroc_rows: used.append(1) or f(*a))

    rng = np.random.default_rng(2)
    n, k = 60, 4
    probs, labels = (_multiclass if task == "multiclass" else _multilabel)(rng, 5, n, k)
    target, known = targets(labels, task, k)
    counts = resample.image_counts(n, 50, np.random.default_rng(3))
    counts[:, 0] = 0
    counts[0, 0] = n  # a replicate of one image: no class has both kinds, NaN
    got = resample.exact_batch([resample.sort_classes(p) for p in probs], resample.class_masks(target, known),
                               resample.small_counts(counts))
    for p, g in zip(probs, got, strict=True):
        want = metrics.weighted_macro_auroc(p, target, known, counts)
        assert np.array_equal(g, want, equal_nan=True)
    assert np.isnan(got[:, 0]).all()
    assert bool(used) == (route == "compiled")


def test_score_hands_the_bootstrap_reads_to_the_metrics(make_store, tmp_path, monkeypatch):
    # score() computes the probe metrics from the arrays the image bootstrap read (on a helper
    # thread): the same tables as probe_metrics reading them itself, and no array is read twice
    from crs.scoring import ScoreOptions, score
    from crs.store import Store

    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6, "c": 0.3})
    alone = predictions.probe_metrics(store, records, ["a", "b", "c"], ["d1"])
    reads: list[tuple] = []
    real = Store.read_predictions

    def counted(self, dataset, encoder, condition):
        reads.append((dataset, encoder, condition))
        return real(self, dataset, encoder, condition)

    monkeypatch.setattr(Store, "read_predictions", counted)
    s = score(records, ScoreOptions(bootstrap_unit="both", bootstrap=20), store=store)
    assert s.settings["bootstrap"]["unit"] == "both"
    assert s.probe_metrics.equals(alone.metrics)
    # polars' group means (reliability bins) are not bit-stable from one call to the next: 1e-12
    assert_frame_equal(s.reliability, alone.reliability, rel_tol=REL, abs_tol=1e-15)
    assert_frame_equal(s.auroc_per_class, alone.per_class, rel_tol=REL, abs_tol=1e-15)
    assert len(reads) == len(set(reads)) == 3 * 4  # clean, perturbed, shift and validation, once each


def test_numpy_takes_small_work_until_its_budget_is_spent_then_the_compiled_pass_takes_all(monkeypatch):
    from crs.scoring import kernels

    monkeypatch.setattr(kernels, "NUMPY_WORK", 100)
    monkeypatch.setattr(kernels, "_KERNELS", {})
    monkeypatch.setattr(kernels, "_numpy_work", [0])
    assert [kernels.numpy_takes(w) for w in (60, 50, 40)] == [True, False, True]  # 60 + 40 fit, 50 more would not
    assert not kernels.numpy_takes(1)
    monkeypatch.setattr(kernels, "_numpy_work", [0])
    kernels._KERNELS["runs"] = object()  # the pass loaded in this process: it takes even small work
    assert not kernels.numpy_takes(1)


def test_arrays_with_nan_scores_take_the_compiled_pass_whatever_the_budget(monkeypatch):
    from crs.scoring import kernels, resample

    rng = np.random.default_rng(5)
    n, k = 40, 3
    p = rng.random((n, k)).astype(np.float32)
    p[::7, 1] = np.nan  # several NaN scores: a run each, in the order sort_classes leaves them
    target, known = np.eye(k, dtype=np.int8)[rng.integers(0, k, n)], np.ones((n, k), bool)
    counts = resample.small_counts(resample.image_counts(n, 30, rng))
    masks, srt = resample.class_masks(target, known), resample.sort_classes(p)
    values = []
    for budget in (1 << 40, 0):  # numpy's budget unspent, then spent
        monkeypatch.setattr(kernels, "NUMPY_WORK", budget)
        monkeypatch.setattr(kernels, "_numpy_work", [0])
        values.append(resample.exact_batch([srt], masks, counts))
    assert np.array_equal(values[0], values[1], equal_nan=True)
