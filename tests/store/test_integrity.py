"""Stored data is verified, not assumed: chunks and metadata of every array kind deleted, truncated or
altered are refused naming the array, the chunk and the repair; the commit record makes `crs extract`
redo exactly the lost chunks; `verify` lists each damage and `verify(repair=True)` plus the named
commands restore the store to equality."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from crs.store import EmbeddingShape, Store, StoreError, format_findings, verify
from tests.store.test_store import table

X = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
P = np.random.default_rng(1).random((2, 1, 3, 3)).astype(np.float32)

# (what is read, the array's store key, one of its chunk keys)
KINDS = {
    "x": ("datasets/toy/embeddings/enc/clean/x", "c/1/0"),
    "label": ("datasets/toy/label", "c/0"),
    "split": ("datasets/toy/split", "c/0"),
    "image_id": ("datasets/toy/image_id", "c/0"),
    "group": ("datasets/toy/group", "c/0"),
    "failures": ("datasets/toy/failures/reason", "c/0"),
    "predictions": ("datasets/toy/predictions/enc/clean", "c/0/0/0/0"),  # one chunk: prediction_chunks
}


def write_embeddings(store: Store, values=X) -> bool:
    arr = store.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=4, chunk=4))
    for j in arr.pending():
        arr.write_chunk(j, values[arr.chunk_rows(j)])
    return arr.finalize()


def build(path) -> Store:
    """A tiny store with every array kind: dataset arrays, failures, one embedding array, predictions."""
    s = Store(str(path))
    s.write_dataset(table())
    assert write_embeddings(s)
    s.add_failures("toy", ["img3"], ["img3.png"], ["truncated file"])
    s.write_predictions("toy", "enc", "clean", P, {"seeds": [0, 1]})
    s.commit_predictions("toy", "enc", "g1", ["clean"])  # what a probe run records once it wrote them all
    return s


def read(path, kind):
    s = Store(str(path), mode="r")
    if kind == "x":
        return s.read_embedding("toy", "enc", "clean")
    if kind == "failures":
        return s.failures("toy")
    if kind == "predictions":
        return s.read_predictions("toy", "enc", "clean")
    return s.dataset("toy")


def damage(file: Path, how: str) -> None:
    data = file.read_bytes()
    if how == "delete":
        file.unlink()
    elif how == "truncate":
        file.write_bytes(data[: len(data) // 2])
    else:  # one bit flipped, same length
        i = len(data) // 2
        file.write_bytes(data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :])


def snapshot(path) -> dict:
    s = Store(str(path), mode="r")
    t = s.dataset("toy")
    return {"ids": t.ids.tolist(), "labels": t.labels.tolist(), "split": t.split.tolist(), "group": t.group.tolist(),
            "x": s.read_embedding("toy", "enc", "clean").tolist(), "failures": s.failures("toy")["reason"].tolist(),
            "p": s.read_predictions("toy", "enc", "clean")[0].tolist(), "digest": s.content_digest("toy", "enc")}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("pristine") / "s.zarr"
    build(path)
    return path, snapshot(path)


@pytest.fixture
def store_copy(pristine, tmp_path):
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine[0], path)
    return path


@pytest.mark.parametrize("how", ["delete", "truncate", "alter"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_damaged_chunk_is_refused_naming_array_chunk_and_repair(store_copy, kind, how):
    array, chunk = KINDS[kind]
    damage(store_copy / array / chunk, how)
    with pytest.raises(StoreError) as err:
        read(store_copy, kind)
    msg = str(err.value)
    assert f"chunk {chunk} of array {array!r}" in msg and "To repair: run" in msg
    assert ("crs probe" if kind == "predictions" else "crs extract") in msg


@pytest.mark.parametrize("kind", ["x", "label", "failures", "predictions", "dataset group"])
def test_damaged_metadata_is_refused_naming_the_file(store_copy, kind):
    node = "datasets/toy" if kind == "dataset group" else KINDS[kind][0]
    (store_copy / node / "zarr.json").write_text('{"zarr_format": 3, "node_ty')
    with pytest.raises(StoreError, match=f"damaged Zarr metadata in .*{node}/zarr.json.*To repair: run"):
        read(store_copy, "label" if kind == "dataset group" else kind)
    assert any(f.array == node and f.chunk == "zarr.json" for f in verify(str(store_copy)))


@pytest.mark.parametrize("url", [False, True])
def test_pending_lists_lost_chunks_and_rewriting_them_restores_the_array(pristine, tmp_path, url):
    path, before = pristine
    if url:  # the same through an fsspec URL (the object-store code path)
        loc = f"memory://crs-integrity-{tmp_path.name}/s.zarr"
        before = {**before, "digest": build(loc).content_digest("toy", "enc")}  # another store, another id
        import fsspec

        fs = fsspec.filesystem("memory")
        base = f"/crs-integrity-{tmp_path.name}/s.zarr/datasets/toy/embeddings/enc/clean/x/c"
        fs.rm(f"{base}/1/0")
        fs.pipe_file(f"{base}/2/0", fs.cat_file(f"{base}/2/0")[:-3])
    else:
        loc = str(tmp_path / "s.zarr")
        shutil.copytree(path, loc)
        damage(Path(loc) / KINDS["x"][0] / "c/1/0", "delete")
        damage(Path(loc) / KINDS["x"][0] / "c/2/0", "truncate")
    s = Store(loc)
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=4, chunk=4))
    assert arr.pending().tolist() == [1, 2]  # what `crs extract` re-does: exactly the lost chunks
    assert write_embeddings(s) and arr.pending().tolist() == []
    assert s.read_embedding("toy", "enc", "clean").tolist() == before["x"]
    assert s.content_digest("toy", "enc") == before["digest"]


def test_verify_finds_each_damage_and_repair_then_the_commands_restore_equality(store_copy, pristine):
    assert verify(str(store_copy)) == []
    damage(store_copy / KINDS["x"][0] / "c/0/0", "alter")  # same size: only a decode finds it
    damage(store_copy / KINDS["x"][0] / "c/2/0", "delete")
    damage(store_copy / "datasets/toy/embeddings/enc/clean/commit/c/1/0", "truncate")
    damage(store_copy / KINDS["label"][0] / "c/0", "truncate")
    damage(store_copy / KINDS["predictions"][0] / "c/0/0/0/0", "delete")
    (store_copy / "datasets/toy/split/zarr.json").write_text("{")
    (store_copy / "datasets/toy/embeddings/zarr.json").write_text("")
    found = verify(str(store_copy))
    assert {(f.array, f.chunk) for f in found} == {
        ("datasets/toy/embeddings", "zarr.json"),  # what lies below it is listed once it is rewritten
        ("datasets/toy/split", "zarr.json"),
        ("datasets/toy/label", "c/0"),
        ("datasets/toy/predictions/enc/clean", "c/0/0/0/0"),
    }
    assert all("crs " in f.repair for f in found)
    assert "4 problems found" in format_findings(found)

    left = verify(str(store_copy), repair=True)
    assert {f.array for f in left} == {"datasets/toy/split", "datasets/toy/label",
                                       "datasets/toy/embeddings/enc/clean/x", "datasets/toy/predictions/enc/clean"}
    assert all(f.repair.startswith("run `crs ") and "crs store verify" not in f.repair for f in left), \
        format_findings(left)
    x_left = next(f for f in left if f.array.endswith("/x"))
    assert x_left.problem.startswith("3 of 3 chunks not written")  # c/0 altered, c/1 record lost, c/2 deleted

    s = Store(str(store_copy))  # what the named commands do
    s.write_dataset(table())
    assert write_embeddings(s)
    s.write_predictions("toy", "enc", "clean", P, {"seeds": [0, 1]})
    assert verify(str(store_copy)) == [] and format_findings([]).startswith("store verified")
    assert snapshot(store_copy) == pristine[1]


def test_extract_alone_rewrites_a_damaged_dataset_array(store_copy, pristine):
    damage(store_copy / KINDS["label"][0] / "c/0", "delete")
    (store_copy / "datasets/toy/group/zarr.json").write_text("[]")
    Store(str(store_copy)).write_dataset(table())  # what `crs extract` does first
    assert snapshot(store_copy) == pristine[1]
    t = table()
    other = dataclasses.replace(t, labels=(t.labels + 1) % 3)
    damage(store_copy / KINDS["group"][0] / "c/0", "delete")
    with pytest.raises(StoreError, match="Splits never change"):  # a damaged array is no licence to change data
        Store(str(store_copy)).write_dataset(other)


def test_a_dataset_from_other_files_is_refused_saying_what_differs(tmp_path):
    t = table()
    ident = {"image_root": "/data/a", "csv_sha256": "1" * 64}
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(dataclasses.replace(t, attrs={**t.attrs, "identity": ident}))
    s.write_dataset(dataclasses.replace(t, attrs={**t.attrs, "identity": dict(ident)}))
    moved = {**ident, "image_root": "/data/b"}
    with pytest.raises(StoreError, match=r"image_root: stored '/data/a', now '/data/b'.*--store with a new path"):
        s.write_dataset(dataclasses.replace(t, attrs={**t.attrs, "identity": moved}))
    s.write_dataset(t)  # no identity given (a synthetic dataset): nothing more to compare
    old = Store(str(tmp_path / "old.zarr"))
    old.write_dataset(t)  # stored without identity (as a synthetic dataset is)
    old.write_dataset(dataclasses.replace(t, attrs={**t.attrs, "identity": moved}))


def test_content_digest_follows_committed_content_not_the_path(store_copy, pristine, monkeypatch):
    monkeypatch.chdir(store_copy.parent)
    digest = pristine[1]["digest"]
    assert Store("s.zarr", mode="r").content_digest("toy", "enc") == digest
    assert Store(str(store_copy) + "/", mode="r").content_digest("toy", "enc") == digest
    s = Store("s.zarr")
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=4, chunk=4))
    arr.write_chunk(1, X[arr.chunk_rows(1)] + 1)  # one committed chunk with other values
    changed = s.content_digest("toy", "enc")
    assert changed != digest
    arr.write_chunk(1, X[arr.chunk_rows(1)])
    assert s.content_digest("toy", "enc") == digest


def test_a_damaged_root_is_a_finding_the_arrays_below_are_checked_and_repair_rewrites_it(tmp_path):
    with pytest.raises(StoreError, match="run `crs extract` first"):
        verify(str(tmp_path / "nothing.zarr"))
    path = tmp_path / "s.zarr"
    build(path)
    (path / "zarr.json").write_text("{")
    damage(path / KINDS["label"][0] / "c/0", "truncate")
    with pytest.raises(StoreError, match=r"damaged root metadata.*To repair: run `crs store verify --repair"):
        Store(str(path), mode="r")
    found = verify(str(path))
    assert [(f.array, f.chunk) for f in found] == [("", "zarr.json"), ("datasets/toy/label", "c/0")]
    assert "crs store verify --repair" in found[0].repair
    changed: list[str] = []
    left = verify(str(path), repair=True, changed=changed)
    assert any("root metadata" in c for c in changed) and any("datasets/toy/label" in c for c in changed), changed
    assert [f.array for f in left] == ["datasets/toy/label"]  # removed: `crs extract` writes it again
    s = Store(str(path))
    s.write_dataset(table())
    assert verify(str(path)) == []


@pytest.mark.parametrize("key", ["label", "split", "group"])  # image_id: tests/faults (a real row order)
def test_a_dataset_array_rewritten_through_zarr_is_refused_and_extract_restores_it(store_copy, pristine, key):
    """Valid Zarr with its checksums right and other values (labels shuffled by hand): only the commit record
    tells it apart, on every read and in verify."""
    arr = zarr.open_array(str(store_copy / f"datasets/toy/{key}"), mode="r+")
    values = np.asarray(arr[...])
    assert not np.array_equal(values[::-1], values)
    arr[...] = values[::-1]
    with pytest.raises(StoreError, match=f"array 'datasets/toy/{key}'.* is not as committed.*To repair: run"):
        read(store_copy, key)
    found = verify(str(store_copy))
    assert [(f.array, f.problem.split(" (")[0]) for f in found] == [(f"datasets/toy/{key}", "not as committed")]
    Store(str(store_copy)).write_dataset(table())  # what `crs extract` does first
    assert snapshot(store_copy) == pristine[1]


@pytest.mark.parametrize("kind", ["label", "predictions", "x"])
def test_a_chunk_reencoded_with_its_values_is_kept_by_repair_and_reads_again(store_copy, pristine, kind):
    """Another zstd level: the file differs from its record, its values do not. Reads refuse it by its size;
    verify says so, and --repair keeps the chunk and records its new size instead of discarding it."""
    from numcodecs import Zstd

    array, chunk = KINDS[kind]
    file = store_copy / array / chunk
    data = file.read_bytes()
    reencoded = Zstd(level=19, checksum=True).encode(Zstd().decode(data))
    if len(reencoded) == len(data):  # random values do not compress: the frame without its checksum instead
        reencoded = Zstd(level=19, checksum=False).encode(Zstd().decode(data))
    assert len(reencoded) != len(data)
    file.write_bytes(reencoded)
    with pytest.raises(StoreError, match="not as committed"):
        read(store_copy, kind)
    (f,) = verify(str(store_copy))
    assert (f.array, f.chunk) == (array, chunk)
    assert f.problem.startswith("re-encoded") and "crs store verify --repair" in f.repair
    changed: list[str] = []
    assert verify(str(store_copy), repair=True, changed=changed) == []
    assert len(changed) == 1 and changed[0].startswith(f"kept chunk {chunk}"), changed
    assert file.read_bytes() == reencoded and verify(str(store_copy)) == []
    assert snapshot(store_copy) == pristine[1]  # the values, and the digest of what was committed


def test_a_store_folder_that_is_a_symlink_is_refused_on_read(store_copy, tmp_path):
    node = store_copy / KINDS["predictions"][0]
    shutil.move(node, tmp_path / "elsewhere")
    node.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(StoreError, match=r"is a symbolic link .*crs store verify --repair.*then run `crs probe"):
        read(store_copy, "predictions")
    changed: list[str] = []
    left = verify(str(store_copy), repair=True, changed=changed)
    assert changed and "symbolic link" in changed[0] and not node.exists()
    (f,) = left  # what the link stood for is gone: the probe run's record names it
    assert f.array == KINDS["predictions"][0] and "missing" in f.problem and "crs probe" in f.repair


def test_every_array_the_store_writes_carries_a_checksum(store_copy):
    root = zarr.open_group(str(store_copy), mode="r")
    arrays = []

    def walk(g):
        for _, a in g.arrays():
            arrays.append(a)
        for _, sub in g.groups():
            walk(sub)

    walk(root)
    assert len(arrays) == 11  # 4 dataset arrays, 3 failure columns, x + done + commit, predictions
    assert all(any(isinstance(c, ZstdCodec) and c.checksum for c in a.compressors) for a in arrays)


def test_lost_array_metadata_is_refused_and_extract_recreates_the_array(store_copy, pristine):
    (store_copy / KINDS["x"][0] / "zarr.json").unlink()
    with pytest.raises(StoreError, match=r"lack their array's metadata .*crs extract --encoder enc --dataset toy"):
        read(store_copy, "x")
    s = Store(str(store_copy))
    assert write_embeddings(s)  # what `crs extract` does: the half-gone array is made anew, every chunk redone
    assert snapshot(store_copy) == pristine[1]


def test_extract_redoes_exactly_the_lost_chunks_of_a_real_extraction(tmp_path):
    """Through the extract stage itself: a deleted chunk and a truncated one are what the next run writes."""
    from crs.extract.run import extract

    store = Store(str(tmp_path / "s.zarr"))
    first = extract(store, "demo-stats", "demo_derm", size=0.1, chunk=32, perturbations=False)
    assert first.complete
    before = store.read_embedding("demo_derm", "demo-stats", "clean")
    x = tmp_path / "s.zarr/datasets/demo_derm/embeddings/demo-stats/clean/x"
    damage(x / "c/0/0", "delete")
    damage(x / "c/1/0", "truncate")
    with pytest.raises(StoreError, match="chunk c/0/0 of array .* is missing"):
        Store(str(tmp_path / "s.zarr"), mode="r").read_embedding("demo_derm", "demo-stats", "clean")
    again = extract(Store(str(tmp_path / "s.zarr")), "demo-stats", "demo_derm", size=0.1, chunk=32,
                    perturbations=False)
    assert again.complete and again.chunks_written == 2
    np.testing.assert_array_equal(Store(str(tmp_path / "s.zarr"), mode="r").read_embedding(
        "demo_derm", "demo-stats", "clean"), before)


def test_a_torn_failures_table_is_refused_and_verify_repair_resets_the_dataset(tmp_path):
    """A kill between the failures table's column rewrites is refused on read (never a shorter list of
    failures); verify names it and --repair removes it and resets the dataset's chunks for `crs extract`."""
    s = build(tmp_path / "s.zarr")
    g = s.root["datasets"]["toy"]["failures"]
    g.attrs["writing"] = True  # what a kill after the first column's rewrite leaves
    with pytest.raises(StoreError, match="being rewritten.*crs store verify --repair"):
        Store(str(tmp_path / "s.zarr"), mode="r").failures("toy")
    found = verify(str(tmp_path / "s.zarr"))
    assert any(f.array == "datasets/toy/failures" and "torn" in f.problem for f in found), format_findings(found)
    verify(str(tmp_path / "s.zarr"), repair=True)
    s = Store(str(tmp_path / "s.zarr"))
    assert s.failures("toy")["image_id"].size == 0
    arr = s.open_embedding("toy", "enc", "clean")
    assert arr.pending().tolist() == list(range(arr.n_chunks))  # every chunk is extracted anew


def test_finalize_unmarks_an_array_whose_chunk_was_lost(tmp_path):
    build(tmp_path / "s.zarr")
    before = snapshot(tmp_path / "s.zarr")["x"]
    (tmp_path / "s.zarr" / "datasets/toy/embeddings/enc/clean/x/c/1/0").unlink()
    arr = Store(str(tmp_path / "s.zarr")).open_embedding("toy", "enc", "clean")
    assert arr.pending().tolist() == [1] and not arr.finalize() and not arr.complete
    assert write_embeddings(Store(str(tmp_path / "s.zarr")))  # rewriting the lost chunk completes it again
    assert snapshot(tmp_path / "s.zarr")["x"] == before
