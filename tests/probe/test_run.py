"""The probe stage on a multi-label dataset with unknown labels and a shift target."""

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from crs.extract.run import extract
from crs.foundations.names import VALIDATION
from crs.probe.run import ProbeOptions, pairs_in_store, planned_loops, probe
from crs.store import Store, StoreError


class _Recorder:
    """A Progress that keeps what it was told: tasks (description, total, unit) and advances per task."""

    def __init__(self):
        self.tasks, self.advanced = [], []

    def add_task(self, description, total=None, **fields):
        self.tasks.append((description, total, fields.get("unit")))
        self.advanced.append(0)
        return len(self.tasks) - 1

    def update(self, task, **fields):
        pass

    def advance(self, task, advance=1):
        self.advanced[task] += advance


@pytest.fixture(scope="module")
def cxr_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cxr") / "s.zarr"
    store = Store(str(path))
    for d in ("demo_cxr", "demo_cxr_site2"):
        extract(store, "demo-stats", d, size=0.3, chunk=64)
    return store


def test_multilabel_probe_with_masks_shift_and_predictions(cxr_store, tmp_path):
    store = cxr_store
    assert pairs_in_store(store) == [("demo-stats", "demo_cxr")]  # the test-only site is not probed
    progress = _Recorder()
    summary = probe(store, "demo-stats", "demo_cxr",
                    ProbeOptions(seeds=(0, 1), fractions=(0.25, 1.0), l2=(1e-2, 1.0)),
                    results=tmp_path, progress=progress)
    # progress per solver loop, as many as planned_loops says (the task's total gives the time left)
    ((description, total, unit),) = progress.tasks
    assert unit == "loops" and total == planned_loops(store, "demo-stats", "demo_cxr", (0.25, 1.0)) >= 1
    assert progress.advanced == [total] and "demo_cxr" in description
    # the run records name the tool and the settings that made them
    import json

    from crs.foundations.records import metadata

    made = json.loads(metadata(Path(summary.records))["crs_provenance"])
    assert made["settings"]["fractions"] == [0.25, 1.0] and made["settings"]["l2"] == [1e-2, 1.0]
    assert made["settings"]["head"] == "linear" and made["crs_bench"] and made["libraries"]
    from crs.extract import perturb

    assert summary.conditions == 1 + len(perturb.conditions("radiology")) + 1  # clean, the suite, the shift
    rec = pl.read_parquet(summary.records)
    assert rec.height == 2 * 2 * summary.conditions
    assert "shift:demo_cxr_site2" in rec["condition"].to_list()

    table = store.dataset("demo_cxr")
    test = table.rows("test")
    labels = table.labels[test]
    assert (labels == -1).any()  # the dataset has unknown labels to mask
    probs, attrs = store.read_predictions("demo_cxr", "demo-stats", "clean")
    assert probs.shape == (2, 2, len(test), 4) and attrs["seeds"] == [0, 1]
    # the recorded AUROC is the mean over labels of sklearn's AUROC on the known entries
    for s in range(2):
        for f, fraction in enumerate((0.25, 1.0)):
            expected = np.mean([roc_auc_score(labels[labels[:, k] >= 0, k], probs[s, f, labels[:, k] >= 0, k])
                                for k in range(4)])
            row = rec.filter((pl.col("seed") == s) & (pl.col("fraction") == fraction)
                             & (pl.col("condition") == "clean"))
            assert row["auroc"].item() == pytest.approx(expected, abs=1e-5)
    # the chosen probes' validation probabilities are stored too (scoring's temperature scaling)
    val, vattrs = store.read_predictions("demo_cxr", "demo-stats", VALIDATION)
    assert val.shape == (2, 2, len(table.rows("val")), 4) and vattrs["fractions"] == [0.25, 1.0]
    assert vattrs["form"] == "log_prob" and np.isfinite(val).all() and (val < 0).all()
    # the shift rows are evaluated on the target's test split
    shift = rec.filter(pl.col("condition") == "shift:demo_cxr_site2")
    assert shift["n_eval"].unique().to_list() == [len(store.dataset("demo_cxr_site2").rows("test"))]
    shifted, _ = store.read_predictions("demo_cxr", "demo-stats", "shift:demo_cxr_site2")
    assert shifted.shape[2] == shift["n_eval"][0]
    # every label subset holds every finding; fewer labels at 25 %
    assert rec["classes_missing"].max() == 0
    n_train = rec.filter(pl.col("condition") == "clean").group_by("fraction").agg(pl.col("n_train").first())
    n_train_by_fraction = dict(n_train.iter_rows())
    assert n_train_by_fraction == {0.25: int(np.ceil(0.25 * len(table.rows("train")))), 1.0: len(table.rows("train"))}
    # the whole L2 grid is recorded with its validation figures and the choice
    grid = pl.read_parquet(tmp_path / "probe_selection" / Path(summary.records).name)
    assert grid.height == 2 * 2 * 2 and grid["selected_by"].unique().to_list() == ["loss"]
    chosen = grid.filter(pl.col("chosen"))
    assert chosen.height == 4
    assert (chosen.join(grid.group_by("seed", "fraction").agg(pl.col("val_loss").min().alias("lowest")),
                        on=["seed", "fraction"])
            .select((pl.col("val_loss") == pl.col("lowest")).all()).item())
    clean = rec.filter(pl.col("condition") == "clean").sort("seed", "fraction")
    assert chosen.sort("seed", "fraction")["l2"].to_list() == clean["l2"].to_list()
    # the subsets as drawn: nested prefixes of each seed's order, the sizes the records give
    drawn = pl.read_parquet(tmp_path / "subsets" / "demo_cxr.parquet")
    assert drawn.height == 2 * len(table.rows("train"))
    for s in (0, 1):
        mine = drawn.filter(pl.col("seed") == s)
        assert sorted(mine["position"].to_list()) == list(range(len(table.rows("train"))))
        quarter = mine.filter(pl.col("first_fraction") <= 0.25)
        assert quarter.height == n_train_by_fraction[0.25]
        assert quarter["position"].max() == quarter.height - 1
    # same seed, same records
    again = probe(store, "demo-stats", "demo_cxr",
                  ProbeOptions(seeds=(0, 1), fractions=(0.25, 1.0), l2=(1e-2, 1.0)),
                  results=tmp_path / "again")
    assert pl.read_parquet(again.records).equals(rec)


def test_probe_refuses_an_incomplete_perturbed_array(cxr_store, tmp_path):
    store = cxr_store
    g = store.root["datasets/demo_cxr/embeddings/demo-stats/gaussian_noise@1"]
    g["done"][0] = False
    g.attrs["complete"] = False
    try:
        with pytest.raises(StoreError, match="incomplete.*crs extract --encoder demo-stats --dataset demo_cxr"):
            probe(store, "demo-stats", "demo_cxr",
                  ProbeOptions(seeds=(0,), fractions=(1.0,), l2=(1.0,)),
                  results=Path(tmp_path))
    finally:
        g["done"][0] = True
        g.attrs["complete"] = True


def test_l2_can_be_chosen_by_validation_auroc(cxr_store, tmp_path):
    summary = probe(cxr_store, "demo-stats", "demo_cxr",
                    ProbeOptions(seeds=(0,), fractions=(0.5, 1.0), l2=(1e-3, 1e-1, 10.0), select_by="auroc"),
                    results=tmp_path)
    grid = pl.read_parquet(tmp_path / "probe_selection" / Path(summary.records).name)
    best = grid.group_by("seed", "fraction").agg(pl.col("val_auroc").max().alias("best"))
    chosen = grid.filter(pl.col("chosen")).join(best, on=["seed", "fraction"])
    assert chosen.height == 2 and (chosen["val_auroc"] == chosen["best"]).all()
    with pytest.raises(ValueError, match="select_by"):
        probe(cxr_store, "demo-stats", "demo_cxr", ProbeOptions(select_by="accuracy"), results=tmp_path)


def test_images_extract_could_not_decode_never_train_a_probe(cxr_store, tmp_path, monkeypatch):
    table = cxr_store.dataset("demo_cxr")
    failed = np.concatenate([table.rows("train")[:7], table.rows("val")[:2]])
    monkeypatch.setattr(cxr_store, "excluded_rows", lambda dataset: failed)
    summary = probe(cxr_store, "demo-stats", "demo_cxr",
                    ProbeOptions(seeds=(0,), fractions=(1.0,), l2=(1e-1,)),
                    results=tmp_path)
    rec = pl.read_parquet(summary.records)
    assert rec["n_train"].unique().to_list() == [len(table.rows("train")) - 7]
    val, _ = cxr_store.read_predictions("demo_cxr", "demo-stats", VALIDATION)
    assert val.shape[2] == len(table.rows("val"))  # predictions stay aligned with the split
    drawn = pl.read_parquet(tmp_path / "subsets" / "demo_cxr.parquet")
    assert not set(drawn["image_id"].to_list()) & set(table.ids[failed].astype(str).tolist())


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_split_whose_every_image_failed_to_decode_is_refused_by_name(cxr_store, tmp_path, monkeypatch, split):
    """Nothing to fit on, or nothing to choose the L2 on: a clear refusal, not an internal error."""
    monkeypatch.setattr(cxr_store, "excluded_rows", lambda dataset: cxr_store.dataset(dataset).rows(split))
    with pytest.raises(StoreError, match=f"every {split} image of dataset 'demo_cxr' is one extract could not"):
        probe(cxr_store, "demo-stats", "demo_cxr",
              ProbeOptions(seeds=(0,), fractions=(1.0,), l2=(1e-1,)),
              results=tmp_path)


def test_images_extract_could_not_decode_are_not_scored(cxr_store, tmp_path, monkeypatch):
    """Failed test images keep their rows in the stored probabilities, but neither the run records'
    metrics nor the scoring stage's targets and probabilities count them (clean, perturbed, shift)."""
    from crs.scoring.predictions import Predictions, split_targets

    test = cxr_store.dataset("demo_cxr").rows("test")
    s_test = cxr_store.dataset("demo_cxr_site2").rows("test")
    failed = {"demo_cxr": test[[0, 3, 5]], "demo_cxr_site2": s_test[[1, 2]]}
    monkeypatch.setattr(cxr_store, "excluded_rows", lambda dataset: failed.get(dataset, np.zeros(0, np.int64)))
    summary = probe(cxr_store, "demo-stats", "demo_cxr",
                    ProbeOptions(seeds=(0,), fractions=(1.0,), l2=(1e-1,)),
                    results=tmp_path)
    rec = pl.read_parquet(summary.records)
    shift = rec["condition"] == "shift:demo_cxr_site2"
    assert rec.filter(~shift)["n_eval"].unique().to_list() == [len(test) - 3]
    assert rec.filter(shift)["n_eval"].unique().to_list() == [len(s_test) - 2]
    probs, _ = cxr_store.read_predictions("demo_cxr", "demo-stats", "clean")
    assert probs.shape[2] == len(test)  # aligned with the split
    keep = np.ones(len(test), bool)
    keep[[0, 3, 5]] = False
    labels = cxr_store.dataset("demo_cxr").labels[test][keep]
    expected = np.mean([roc_auc_score(labels[labels[:, k] >= 0, k], probs[0, 0, keep][labels[:, k] >= 0, k])
                        for k in range(4)])
    assert rec.filter(pl.col("condition") == "clean")["auroc"].item() == pytest.approx(expected, abs=1e-5)
    # scoring reads the same rows
    target, known, _, _ = split_targets(cxr_store, "demo_cxr")
    assert target.shape[0] == len(test) - 3
    assert np.array_equal(known, labels >= 0)
    assert Predictions(cxr_store, "demo_cxr", "demo-stats", "clean").select([0], [1.0]).shape[2] == len(test) - 3
    assert Predictions(cxr_store, "demo_cxr", "demo-stats", "shift:demo_cxr_site2").probs.shape[2] == len(s_test) - 2
    assert split_targets(cxr_store, "demo_cxr_site2")[0].shape[0] == len(s_test) - 2


def test_every_compiled_program_is_kept_however_quickly_it_compiles(tmp_path):
    """A re-run loads even the small programs (prediction, metrics, data staging), not only the solver
    loops: at the default threshold of 0.5 s a warm crs demo probe stage recompiled 174 of 180."""
    import subprocess
    import sys

    code = ("import jax, jax.numpy as jnp\n"
            "from crs.probe.run import compile_cache\n"
            "compile_cache()\n"
            "jax.jit(lambda x: x * 2.0 + 1.0)(jnp.ones(3)).block_until_ready()\n")
    env = {**os.environ, "CRS_JAX_CACHE": str(tmp_path / "jax")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert [p.name for p in (tmp_path / "jax").iterdir() if "lambda" in p.name], list((tmp_path / "jax").iterdir())


def test_compiled_programs_are_cached_in_the_folder_the_environment_names(tmp_path):
    import os

    import jax

    from crs.probe.run import compile_cache

    where = compile_cache()  # the session's folder (tests/conftest.py), never the user's home
    assert where == jax.config.jax_compilation_cache_dir
    assert where == os.environ["CRS_JAX_CACHE"]
    assert os.path.isdir(where)
