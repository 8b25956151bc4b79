"""The probe stage on a multi-label dataset with unknown labels and a shift target."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from crs.extract.run import extract
from crs.probe.run import pairs_in_store, probe
from crs.store import Store, StoreError


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
    summary = probe(store, "demo-stats", "demo_cxr", results=tmp_path, seeds=(0, 1), fractions=(0.25, 1.0),
                    l2_grid=(1e-2, 1.0))
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
    # the shift rows are evaluated on the target's test split
    shift = rec.filter(pl.col("condition") == "shift:demo_cxr_site2")
    assert shift["n_eval"].unique().to_list() == [len(store.dataset("demo_cxr_site2").rows("test"))]
    shifted, _ = store.read_predictions("demo_cxr", "demo-stats", "shift:demo_cxr_site2")
    assert shifted.shape[2] == shift["n_eval"][0]
    # every label subset holds every finding; fewer labels at 25 %
    assert rec["classes_missing"].max() == 0
    n_train = rec.filter(pl.col("condition") == "clean").group_by("fraction").agg(pl.col("n_train").first())
    assert dict(n_train.iter_rows()) == {0.25: int(np.ceil(0.25 * len(table.rows("train")))),
                                         1.0: len(table.rows("train"))}
    # same seed, same records
    again = probe(store, "demo-stats", "demo_cxr", results=tmp_path / "again", seeds=(0, 1), fractions=(0.25, 1.0),
                  l2_grid=(1e-2, 1.0))
    assert pl.read_parquet(again.records).equals(rec)


def test_probe_refuses_an_incomplete_perturbed_array(cxr_store, tmp_path):
    store = cxr_store
    g = store.root["datasets/demo_cxr/embeddings/demo-stats/gaussian_noise@1"]
    g["done"][0] = False
    g.attrs["complete"] = False
    try:
        with pytest.raises(StoreError, match="incomplete.*crs extract --encoder demo-stats --dataset demo_cxr"):
            probe(store, "demo-stats", "demo_cxr", results=Path(tmp_path), seeds=(0,), fractions=(1.0,),
                  l2_grid=(1.0,))
    finally:
        g["done"][0] = True
        g.attrs["complete"] = True
