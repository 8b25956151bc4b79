"""Each part of ``Store`` built alone from the parts it needs (``crs.store.zarr_store``), on a bare Zarr group in
``tmp_path``: no ``Store``, no CRS stamp."""

import os

import numpy as np
import pytest
import zarr

from crs.store import DatasetTable, EmbeddingShape, StoreError, store_order
from crs.store.commits import Checks, commit_records
from crs.store.datasets import DatasetTables
from crs.store.embeddings import Embeddings
from crs.store.failures import Failures
from crs.store.files import StoredFiles
from crs.store.location import StoreRoot
from crs.store.nodes import create_array, set_attrs
from crs.store.predictions import Predictions


def bare(tmp_path):
    """(root, files, checks) of a new bare Zarr group: the parts every other part is built on."""
    path = str(tmp_path / "s.zarr")
    root = StoreRoot(path, zarr.open_group(path, mode="a"), read_only=False)
    files = StoredFiles(path)
    return root, files, Checks(files, root)


def tables_of(tmp_path):
    root, files, checks = bare(tmp_path)
    return root, files, checks, DatasetTables(root, files, checks)


def toy(n=6):
    split = np.array([0, 1, 2, 0, 2, 0][:n], dtype=np.int8)
    order = store_order(split)
    ids = np.array([f"img{i}" for i in range(n)])[order]
    return DatasetTable(name="toy", ids=ids, labels=(np.arange(n) % 2)[order], split=split[order], group=ids,
                        attrs={"task": "multiclass", "classes": ["a", "b"]})


def test_stored_files_lists_sizes_reads_and_removes(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c").write_bytes(b"12345")
    (tmp_path / "a" / ".hidden").write_bytes(b"x")
    files = StoredFiles(str(tmp_path))
    assert files.local_root() == str(tmp_path)
    assert files.listing("a") == {"b/c": 5}
    assert files.file_size("a/b/c") == 5 and files.file_size("a/nothing") == 0
    assert files.chunk_sizes("a/b", ["c", "d"]) == [5, None]
    assert files.missing_files("a/b", ["c", "d"]) == ["d"]
    assert files.read_bytes("a/b/c") == b"12345"
    os.symlink(tmp_path / "a" / "b" / "c", tmp_path / "a" / "link")
    assert files.linked("a", ["link"]) == [("a/link", str(tmp_path / "a" / "b" / "c"))]
    files.remove("a/b")
    assert files.listing("a") == {}


def test_store_root_reopened_sees_what_another_handle_wrote(tmp_path):
    root, _, _ = bare(tmp_path)
    zarr.open_group(root.path, mode="a").create_group("new")
    root.reopen()
    assert "new" in root.group


def test_checks_refuse_a_chunk_that_is_not_as_committed(tmp_path):
    root, files, checks = bare(tmp_path)
    arr = create_array(root.group, "a", shape=(4,), dtype=np.int32, chunks=(2,))
    values = np.arange(4, dtype=np.int32)
    arr[...] = values
    records = commit_records(files, arr, values)
    checks.committed(arr, records, "array a", values)
    np.testing.assert_array_equal(checks.checked_read(arr, "array a"), values)
    assert checks.node("a").shape == (4,)
    files.remove(f"a/{arr.metadata.encode_chunk_key((1,))}")
    with pytest.raises(StoreError, match=r"array a: chunk c/1 of array 'a' .* is missing"):
        checks.committed(arr, records, "array a")
    with pytest.raises(StoreError, match="missing"):
        checks.checked_read(arr, "array a")


def test_dataset_tables_write_once_and_read_back_checked(tmp_path):
    _, _, _, tables = tables_of(tmp_path)
    assert tables.datasets() == []
    tables.write_dataset(toy())
    back = tables.dataset("toy")
    assert tables.datasets() == ["toy"] and back.ids.tolist() == toy().ids.tolist()
    assert tables.dataset_attrs("toy")["n_images"] == 6
    with pytest.raises(StoreError, match="different images, labels or splits"):
        tables.write_dataset(toy(5))


def test_failures_are_merged_and_their_rows_excluded(tmp_path):
    root, _, checks, tables = tables_of(tmp_path)
    failures = Failures(root, checks, tables)
    tables.write_dataset(toy())
    assert failures.failures("toy")["image_id"].size == 0
    failures.add_failures("toy", ["img3"], ["f3.png"], ["truncated"])
    failures.add_failures("toy", ["img3", "img5"], ["f3.png", "f5.png"], ["bad", "bad"])
    assert failures.failures("toy")["reason"].tolist() == ["bad", "bad"]
    ids = tables.dataset("toy").ids
    assert sorted(ids[failures.excluded_rows("toy")].tolist()) == ["img3", "img5"]


def test_embeddings_written_by_chunk_read_back_whole(tmp_path):
    root, files, checks, tables = tables_of(tmp_path)
    embeddings = Embeddings(root, files, checks, tables)
    tables.write_dataset(toy())
    arr = embeddings.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=6, width=3, chunk=4))
    x = np.arange(18, dtype=np.float16).reshape(6, 3)
    with pytest.raises(StoreError, match="incomplete"):
        embeddings.read_embedding("toy", "enc", "clean")
    for j in arr.pending():
        arr.write_chunk(j, x[arr.chunk_rows(j)])
    assert arr.finalize()
    np.testing.assert_array_equal(embeddings.read_embedding("toy", "enc", "clean"), x)
    assert list(embeddings.embeddings()) == [("toy", "enc", "clean", True)]
    assert embeddings.group("toy", "enc", "clean").attrs["n_chunks"] == 2


def test_predictions_written_whole_and_checked_on_read(tmp_path):
    root, files, checks, tables = tables_of(tmp_path)
    predictions = Predictions(root, files, checks, tables)
    tables.write_dataset(toy())
    probs = np.full((1, 1, 2, 2), 0.5, dtype=np.float32)
    predictions.write_predictions("toy", "enc", "clean", probs, {"seed": 0})
    predictions.commit_predictions("toy", "enc", "g1", ["clean"])
    values, attrs = predictions.read_predictions("toy", "enc", "clean")
    np.testing.assert_array_equal(values, probs)
    assert attrs["seed"] == 0 and predictions.prediction_attrs("toy", "enc", "clean")["condition"] == "clean"
    arr = root.group["datasets/toy/predictions/enc/clean"]
    set_attrs(arr, {"commit": [[1, 0]]})  # a record that no longer matches the stored chunk
    with pytest.raises(StoreError, match="not as committed"):
        predictions.read_predictions("toy", "enc", "clean")
