"""``planned_loops`` counts a pair's solver loops from shapes, without reading its embeddings."""

import numpy as np
import pytest

from crs.foundations.names import SPLIT_CODE
from crs.probe import core, subsets
from crs.probe.run import embedding_width, load_split, planned_loops
from crs.store import DatasetTable, EmbeddingShape, Store, store_order


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """60 images (40 training, 2 of them failed) with 7 features, one of them dead."""
    rng = np.random.default_rng(0)
    n = 60
    split = np.full(n, SPLIT_CODE["train"], np.int8)
    split[:10], split[10:20] = SPLIT_CODE["test"], SPLIT_CODE["val"]
    order = store_order(split)
    labels = (np.arange(n) % 3)[order]
    s = Store(str(tmp_path_factory.mktemp("loops") / "s.zarr"))
    ids = np.array([f"i{i}" for i in range(n)])[order]
    s.write_dataset(DatasetTable(name="toy", ids=ids, labels=labels, split=split[order],
                                 group=np.array([f"g{i}" for i in range(n)]),
                                 attrs={"task": "multiclass", "classes": ["a", "b", "c"], "ordinal": False}))
    X = rng.normal(size=(n, 7)).astype(np.float32)
    X[:, 4] = 1.0  # dead: the probe leaves it out
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=n, width=7, chunk=32, dtype="float32"))
    for j in arr.pending():
        arr.write_chunk(j, X[arr.chunk_rows(j)])
    assert arr.finalize()
    train = s.dataset("toy").rows("train")
    s.add_failures("toy", ids[train[:2]], ["a.png", "b.png"], ["unreadable", "unreadable"])
    return s


@pytest.mark.parametrize("fractions", [(0.25, 1.0), (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)])
@pytest.mark.parametrize("metadata", ["encoder record", "none"])
def test_planned_loops_reads_no_embeddings_and_counts_what_probe_runs(store, monkeypatch, fractions, metadata):
    if len(fractions) > 2:  # thresholds this tiny set crosses: a loop per larger fraction, the small ones sharing one
        monkeypatch.setattr("crs.probe.schedule.FRACTION_SCHEDULE_FROM", 200)
        monkeypatch.setattr("crs.probe.schedule.SHARED_LOOP_BELOW", 50)
    split = load_split(store, "enc", "toy")
    n = len(split.train)
    assert n == 38 and split.left_out == 1
    runs = core.loop_count(subsets.sizes(list(fractions), n), n, int(split.keep.sum()))
    assert runs == (4 if len(fractions) > 2 else 1)

    def refuse(*a, **k):
        raise AssertionError("planned_loops read the embeddings")

    if metadata == "encoder record":  # what extract writes: the width without reading the array
        monkeypatch.setattr(Store, "embedding_attrs", lambda self, *a: {"encoder_spec": {"width": 7}})
        monkeypatch.setattr(Store, "read_embedding", refuse)
    assert embedding_width(store, "enc", "toy") == 7  # the record's width, else the array's as read
    assert planned_loops(store, "enc", "toy", fractions) == runs
