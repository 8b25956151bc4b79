"""``crs probe`` on a tiny synthetic store: dead features, ties, one generation per pair, locks, damaged inputs.

The store is written through the store's own API (no images, no encoder): a 3-class
problem of 96 images (test, val, train), a perturbed copy of its test split and a shift
target. Encoder ``base`` has 6 informative features; ``padded`` has the same 6 plus
features that are dead or nearly dead on the training split but large on the perturbed
and shifted images.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from crs.foundations import records
from crs.foundations.errors import UserError
from crs.foundations.names import PERTURBATION_GENERATORS, SPLIT_CODE, VALIDATION
from crs.probe import run
from crs.store import DatasetTable, EmbeddingShape, LockHeld, Store, generators, store_order

NOISE = "gaussian_noise@1"
SHIFT = "shift:toy_shift"
SETTINGS = run.ProbeOptions(seeds=(0, 1), fractions=(0.5, 1.0), l2=(0.1, 1.0))
CONDITIONS = (VALIDATION, "clean", NOISE, SHIFT)


def _table(name, labels, split, shift_target=None) -> DatasetTable:
    order = store_order(split)
    n = len(labels)
    return DatasetTable(name=name, ids=np.array([f"{name}{i}" for i in range(n)])[order], labels=labels[order],
                        split=split[order], group=np.array([f"g{i}" for i in range(n)])[order],
                        attrs={"task": "multiclass", "classes": ["a", "b", "c"], "ordinal": False,
                               "shift_target": shift_target})


def _put(store, dataset, encoder, condition, X, rows):
    drawn = {generators.ATTR: PERTURBATION_GENERATORS[-1]} if generators.is_perturbed(condition) else {}
    arr = store.embedding(dataset, encoder, condition, EmbeddingShape(rows=rows, n_rows=len(X), width=X.shape[1],
                                                                      chunk=32, dtype="float32"), attrs=drawn)
    for j in arr.pending():
        arr.write_chunk(j, X[arr.chunk_rows(j)])
    assert arr.finalize()


def _padded(X, train_rows, rng, shifted=False):
    """X with two dead features (constant on the training rows) and one nearly dead (std 1e-7 of the others')."""
    n = len(X)
    dead = np.zeros((n, 2), np.float32)
    dead[:, 1] = 3.0
    near = (rng.normal(size=(n, 1)) * 1e-7).astype(np.float32)
    outside = np.ones(n, bool)
    outside[train_rows] = False
    if shifted:
        outside[:] = True
    # large where the probe never trained (every test, perturbed and shifted row): a dead feature's scale blows them up
    dead[outside] += rng.normal(scale=5.0, size=(int(outside.sum()), 2)).astype(np.float32)
    near[outside] += rng.normal(scale=2.0, size=(int(outside.sum()), 1)).astype(np.float32)
    return np.concatenate([X[:, :3], dead[:, :1], X[:, 3:], near, dead[:, 1:]], axis=1)


def _make_store(path: Path) -> Store:
    rng = np.random.default_rng(0)
    n, m = 96, 40
    y = np.arange(n) % 3
    split = np.full(n, SPLIT_CODE["train"], np.int8)
    split[:24], split[24:48] = SPLIT_CODE["test"], SPLIT_CODE["val"]
    centres = rng.normal(scale=1.5, size=(3, 6))
    store = Store(str(path))
    table = _table("toy", y, split, shift_target="toy_shift")
    store.write_dataset(table)
    X = (centres[table.labels] + rng.normal(size=(n, 6))).astype(np.float32)  # store order
    ys = np.arange(m) % 3
    target = _table("toy_shift", ys, np.full(m, SPLIT_CODE["test"], np.int8))
    store.write_dataset(target)
    Xs = (centres[target.labels] + 0.5 + rng.normal(size=(m, 6))).astype(np.float32)
    test = table.rows("test")
    Xn = X[test] + rng.normal(scale=0.5, size=(len(test), 6)).astype(np.float32)
    train = table.rows("train")
    for encoder, pad in (("base", None), ("padded", True)):
        _put(store, "toy", encoder, "clean", X if pad is None else _padded(X, train, rng), "all")
        Xn_, Xs_ = (Xn, Xs) if pad is None else (_padded(Xn, [], rng, True), _padded(Xs, [], rng, True))
        _put(store, "toy", encoder, NOISE, Xn_, "test")
        _put(store, "toy_shift", encoder, "clean", Xs_, "all")
    return store


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return _make_store(tmp_path_factory.mktemp("toy") / "s.zarr")


def _predictions(store, encoder):
    return {c: store.read_predictions("toy", encoder, c) for c in CONDITIONS}


# ------------------------------------------------------------------ standardisation
def test_dead_and_near_dead_features_leave_every_prediction_as_without_them(toy, tmp_path):
    a = run.probe(toy, "base", "toy", SETTINGS, results=tmp_path / "a")
    b = run.probe(toy, "padded", "toy", SETTINGS, results=tmp_path / "b")
    base, padded = _predictions(toy, "base"), _predictions(toy, "padded")
    for c in CONDITIONS:
        # float32 log-probabilities near -4: a few ulps (relative 1e-6) of reduction-order difference
        # between 6 and 6 + dead features; a feature that leaked in would move them by far more
        np.testing.assert_allclose(padded[c][0], base[c][0], atol=1e-6, rtol=1e-6, err_msg=c)
    ra, rb = pl.read_parquet(a.records), pl.read_parquet(b.records)
    assert ra["features_left_out"].unique().to_list() == [0]
    assert rb["features_left_out"].unique().to_list() == [3]
    assert padded["clean"][1]["features_left_out"] == 3
    assert records.metadata(Path(b.records))["crs:features_left_out"] == "3"
    metrics = ["auroc", "ece", "brier", "nll", "accuracy", "tie_share"]
    np.testing.assert_allclose(rb.sort("seed", "fraction", "condition")[metrics].to_numpy(),
                               ra.sort("seed", "fraction", "condition")[metrics].to_numpy(), atol=1e-6)
    # the features left out really are large on the shifted images: scaled by their training std they would explode
    Xs = toy.read_embedding("toy_shift", "padded", "clean")
    assert np.abs(Xs[:, [3, 7, 8]]).max() > 1.0
    # max_scaled: the largest |z| of the kept features, as standardising them by hand gives
    split = run.load_split(toy, "padded", "toy")
    shift = rb.filter(pl.col("condition") == "shift:toy_shift")["max_scaled"].unique().to_list()
    assert shift == [pytest.approx(float(np.abs(split.z(Xs)).max()), rel=1e-6)]


def test_the_threshold_is_relative_to_the_typical_feature():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 5))
    X[:, 1] = 7.0  # constant
    X[:, 2] *= 1e-6  # far below the others
    X[:, 3] *= 1e-3  # small, but a real feature
    for scale in (1.0, 1e-6, 1e6):
        assert run.live_features(X * scale).tolist() == [True, False, False, True, True]
    assert not run.live_features(np.ones((5, 3))).any()


def test_a_store_whose_features_are_all_constant_is_refused(tmp_path):
    store = _make_store(tmp_path / "s.zarr")
    _put(store, "toy", "flat", "clean", np.ones((96, 6), np.float32), "all")  # committed as written: not damage
    with pytest.raises(UserError, match="every feature of flat is constant.*crs extract --encoder flat"):
        run.probe(store, "flat", "toy", SETTINGS, results=tmp_path / "r")


# ------------------------------------------------------------------ ties
def test_tie_share_counts_the_known_entries_equal_to_another_images():
    probs = np.array([[0.2, 0.8], [0.2, 0.8], [0.5, 0.5], [0.1, 0.9]])[None, None]  # [1, 1, 4 images, 2 classes]
    known = np.ones((4, 2), bool)
    assert run.tie_share(probs, known).tolist() == [[4 / 8]]  # images 0 and 1 tie in both classes
    known[1, 0] = False  # image 1's first label unknown: image 0 no longer ties there
    assert run.tie_share(probs, known).tolist() == [[2 / 7]]
    assert run.tie_share(np.ones((1, 1, 4, 2)), np.ones((4, 2), bool)).tolist() == [[1.0]]


# ------------------------------------------------------------------ one generation
class Killed(BaseException):
    """Stands in for SIGKILL at a chosen write."""


def _kill_after(monkeypatch, store, k):
    """Stop the next probe after its k-th write (predictions, then selection, subsets, run records)."""
    count = {"n": 0}

    def step(real):
        def wrapped(*args, **kwargs):
            if count["n"] == k:
                raise Killed
            count["n"] += 1
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(store, "write_predictions", step(store.write_predictions))
    monkeypatch.setattr(records, "write_parquet", step(records.write_parquet))


def _check(store, results, encoder="base"):
    attrs = {c: store.read_predictions("toy", encoder, c)[1] for c in CONDITIONS}
    return records.check_pair(results, encoder, "toy", attrs)


@pytest.mark.parametrize("k", [0, 1, 4, 6])
def test_a_probe_stopped_at_any_write_is_seen_whole_or_refused(tmp_path, k, monkeypatch):
    store = _make_store(tmp_path / "s.zarr")
    results = tmp_path / "r"
    run.probe(store, "base", "toy", SETTINGS, results=results)
    old = _check(store, results)
    old_records = (results / "run_records" / "base__toy.parquet").read_bytes()
    with monkeypatch.context() as m:
        _kill_after(m, store, k)
        with pytest.raises(Killed):
            run.probe(store, "base", "toy", run.ProbeOptions(seeds=(0, 1), fractions=(0.5, 1.0), l2=(1e-3, 10.0)),
                      results=results)
    assert (results / "run_records" / "base__toy.parquet").read_bytes() == old_records
    if k == 0:
        assert _check(store, results) == old  # nothing written: the old generation, whole
    else:
        with pytest.raises(records.MixedGeneration, match=r"base × toy .*crs probe --encoder base --dataset toy"):
            _check(store, results)
    assert not list(results.rglob("*.tmp"))
    run.probe(store, "base", "toy", SETTINGS, results=results)  # the named repair
    assert _check(store, results) not in (None, old)


def test_the_mlp_head_is_named_in_the_repair(tmp_path):
    (tmp_path / "run_records").mkdir()
    pl.DataFrame({"a": [1]}).write_parquet(tmp_path / "run_records" / "base+mlp__toy.parquet")
    for predictions in ({"clean": {"generation": "abc"}}, {"clean": {}}):  # run records naming no generation
        with pytest.raises(records.DamagedRecords, match=r"records no probe generation.*--encoder base --dataset toy"
                                                         r".* --head mlp"):
            records.check_pair(tmp_path, "base+mlp", "toy", predictions)
    records.write_parquet(tmp_path / "run_records" / "base+mlp__toy.parquet", pl.DataFrame({"a": [1]}), "g1")
    assert records.check_pair(tmp_path, "base+mlp", "toy", {"clean": {"generation": "g1"}}) == "g1"
    # an array created but killed before its attributes were written names no generation
    with pytest.raises(records.MixedGeneration, match=r"predictions validation \(none\)"):
        records.check_pair(tmp_path, "base+mlp", "toy", {"clean": {"generation": "g1"}, "validation": {}})


# ------------------------------------------------------------------ damaged inputs
def test_damaged_embeddings_or_labels_never_overwrite_good_run_records(tmp_path):
    store = _make_store(tmp_path / "s.zarr")
    results = tmp_path / "r"
    run.probe(store, "base", "toy", SETTINGS, results=results)
    good = {p: p.read_bytes() for p in results.rglob("*.parquet")}
    preds = store.read_predictions("toy", "base", "clean")[0]
    x = store.root["datasets/toy/embeddings/base/clean/x"]
    saved = x[...]
    x[5, 2] = np.nan
    with pytest.raises(UserError, match=r"clean embeddings of base on toy .*non-finite.*crs extract --encoder base"):
        run.probe(store, "base", "toy", SETTINGS, results=results)
    x[...] = saved
    label = Path(tmp_path / "s.zarr" / "datasets" / "toy" / "label")
    for chunk in (label / "c").rglob("*"):
        if chunk.is_file():
            chunk.unlink()  # a deleted label chunk reads as class 0 everywhere
    with pytest.raises(UserError):
        run.probe(store, "base", "toy", SETTINGS, results=results)
    assert {p: p.read_bytes() for p in results.rglob("*.parquet")} == good
    np.testing.assert_array_equal(store.read_predictions("toy", "base", "clean")[0], preds)


# ------------------------------------------------------------------ locks
HOLD = """
import sys, time
from crs.store import Store
from crs.store.locks import probe_lock
with probe_lock(Store(sys.argv[1]), sys.argv[2], "base", "toy"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_probe_of_a_pair_is_refused_naming_the_holder_and_other_pairs_run(tmp_path):
    store = _make_store(tmp_path / "s.zarr")
    results = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, store.path, str(results)], stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        names = f"pid {holder.pid} on host {socket.gethostname()}"
        with pytest.raises(LockHeld, match=f"base × toy is being probed by another run \\({names}"):
            run.probe(store, "base", "toy", SETTINGS, results=results)
        assert not (results / "run_records").exists()
        from typer.testing import CliRunner

        from crs.cli import app

        cli = CliRunner().invoke(app, ["probe", "--encoder", "base", "--dataset", "toy", "--store", store.path,
                                       "--results", str(results), "--seeds", "1"])  # the holder is a process
        assert cli.exit_code == 2 and names in " ".join(cli.output.split()), cli.output
        run.probe(store, "padded", "toy", SETTINGS, results=results)  # another pair runs at once
    finally:
        holder.kill()
        holder.wait()
    # a killed holder frees the lock at once; its record is reported as taken over
    lock = next((results / ".crs-locks").glob("*.lock"))
    assert json.loads(lock.read_text())["pid"] == holder.pid
    run.probe(store, "base", "toy", SETTINGS, results=results)
    assert lock.read_text() == ""
    assert records.check_pair(results, "base", "toy") is not None
