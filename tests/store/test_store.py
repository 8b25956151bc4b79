import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs.foundations.errors import UserError
from crs.foundations.names import PERTURBATION_GENERATORS
from crs.store import (
    SCHEMA_VERSION,
    DatasetTable,
    EmbeddingShape,
    LockHeld,
    Store,
    StoreError,
    dataset_lock,
    extraction_lock,
    generators,
    store_key,
    store_order,
)


def table(name="toy", n=10, task="multiclass"):
    split = np.array([0, 0, 1, 2, 0, 2, 0, 1, 2, 0][:n], dtype=np.int8)
    order = store_order(split)
    labels = np.arange(n) % 3
    return DatasetTable(
        name=name,
        ids=np.array([f"img{i}" for i in range(n)])[order],
        labels=labels[order],
        split=split[order],
        group=np.array([f"g{i // 2}" for i in range(n)])[order],
        attrs={"task": task, "classes": ["a", "b", "c"], "ordinal": False, "shift_target": None},
    )


def test_round_trip(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    t = table()
    s.write_dataset(t)
    back = Store(str(tmp_path / "s.zarr"), mode="r").dataset("toy")
    assert back.ids.tolist() == t.ids.tolist()
    assert back.labels.tolist() == t.labels.tolist()
    assert back.split.tolist() == t.split.tolist()
    assert back.group.tolist() == t.group.tolist()
    assert back.task == "multiclass" and back.classes == ["a", "b", "c"]
    assert back.rows("test").tolist() == [0, 1, 2]  # test first

    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=4, chunk=4),
                      attrs={"encoder_spec": {"name": "enc"}})
    x = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    assert arr.pending().tolist() == [0, 1, 2]
    for j in arr.pending():
        arr.write_chunk(j, x[arr.chunk_rows(j)])
    assert arr.finalize()
    got = Store(str(tmp_path / "s.zarr"), mode="r").read_embedding("toy", "enc", "clean")
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, x.astype(np.float16))
    attrs = s.embedding_attrs("toy", "enc", "clean")
    assert attrs["complete"] and attrs["encoder_spec"] == {"name": "enc"} and attrs["rows"] == "all"
    assert list(s.embeddings()) == [("toy", "enc", "clean", True)]
    s.embedding("toy", "other", "blur@1", EmbeddingShape(rows="test", n_rows=10, width=4, chunk=4),
                attrs={})  # not finalized
    assert list(s.embeddings("toy")) == [("toy", "enc", "clean", True), ("toy", "other", "blur@1", False)]
    assert list(s.embeddings("toy", "other")) == [("toy", "other", "blur@1", False)]
    assert list(s.embeddings(encoder="enc")) == [("toy", "enc", "clean", True)]
    assert list(s.embeddings("toy", "nobody")) == [] and list(s.embeddings("no_such_dataset")) == []


def test_incomplete_array_is_refused_with_resume_hint(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    drawn = {generators.ATTR: PERTURBATION_GENERATORS[-1]}
    arr = s.embedding("toy", "enc", "gaussian_noise@2", EmbeddingShape(rows="test", n_rows=3, width=2, chunk=2),
                      attrs=drawn)
    arr.write_chunk(0, np.ones((2, 2)))
    assert not arr.finalize()
    assert arr.pending().tolist() == [1]
    with pytest.raises(StoreError, match=r"incomplete \(1 of 2 chunks missing\).*crs extract --encoder enc"):
        s.read_embedding("toy", "enc", "gaussian_noise@2")
    # re-opening the same array continues where it stopped
    again = s.embedding("toy", "enc", "gaussian_noise@2", EmbeddingShape(rows="test", n_rows=3, width=2, chunk=2),
                        attrs=drawn)
    assert again.pending().tolist() == [1]
    again.write_chunk(1, np.full((1, 2), 2.0))
    assert again.finalize()
    np.testing.assert_array_equal(s.read_embedding("toy", "enc", "gaussian_noise@2"), [[1, 1], [1, 1], [2, 2]])


def test_mismatched_array_settings_are_refused(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    shape = EmbeddingShape(rows="all", n_rows=10, width=4, chunk=4)
    s.embedding("toy", "enc", "clean", shape, attrs={"encoder_spec": {"a": 1}})
    with pytest.raises(StoreError, match="shape"):
        s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=5, chunk=4))
    with pytest.raises(StoreError, match="different encoder spec"):
        s.embedding("toy", "enc", "clean", shape, attrs={"encoder_spec": {"a": 2}})


def test_non_finite_float16_is_refused(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=1, chunk=10))
    with pytest.raises(StoreError, match="--dtype float32"):
        arr.write_chunk(0, np.full((10, 1), 1e6))
    assert arr.pending().tolist() == [0]


def test_dataset_must_not_change(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    s.write_dataset(table())  # same: fine
    t = table()
    changed = dataclasses.replace(t, labels=(t.labels + 1) % 3)
    with pytest.raises(StoreError, match="Splits never change"):
        s.write_dataset(changed)


def test_missing_things_name_the_command(tmp_path):
    with pytest.raises(StoreError, match="run `crs extract` first"):
        Store(str(tmp_path / "nothing.zarr"), mode="r")
    s = Store(str(tmp_path / "s.zarr"))
    with pytest.raises(StoreError, match="crs extract --dataset toy"):
        s.dataset("toy")
    s.write_dataset(table())
    with pytest.raises(StoreError, match="crs extract --encoder enc --dataset toy"):
        s.read_embedding("toy", "enc", "clean")


def test_the_root_records_the_tool_version_and_a_store_naming_it_crs_version_still_opens(tmp_path):
    from crs import __version__

    path = tmp_path / "s.zarr"
    Store(str(path)).write_dataset(table())
    meta_file = path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    assert meta["attributes"]["crs_store"]["tool_version"] == __version__
    assert "crs_version" not in meta["attributes"]["crs_store"]  # the CRS version is a score setting, not this
    assert Store(str(path), mode="r").tool_version == __version__
    meta["attributes"]["crs_store"]["crs_version"] = meta["attributes"]["crs_store"].pop("tool_version")
    meta_file.write_text(json.dumps(meta))  # as stores created before the attribute's rename have it
    for mode in ("r", "a"):
        old = Store(str(path), mode=mode)
        assert old.tool_version == __version__ and old.dataset("toy") is not None


def test_other_schema_version_is_refused_and_untouched(tmp_path):
    path = tmp_path / "s.zarr"
    Store(str(path)).write_dataset(table())
    meta_file = path / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["crs_store"]["schema_version"] = SCHEMA_VERSION + 1
    meta_file.write_text(json.dumps(meta))
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    for mode in ("r", "a"):
        with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
            Store(str(path), mode=mode)
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before
    assert json.loads(meta_file.read_text()) == meta


def test_paths_that_are_not_stores_are_refused(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("hello")
    with pytest.raises(StoreError, match="is a file"):
        Store(str(f))
    d = tmp_path / "photos"
    d.mkdir()
    (d / "a.jpg").write_bytes(b"x")
    with pytest.raises(StoreError, match="not a Zarr store"):
        Store(str(d))
    assert sorted(p.name for p in d.iterdir()) == ["a.jpg"]
    import zarr

    zarr.open_group(str(tmp_path / "other.zarr"), mode="w").create_group("stuff")
    with pytest.raises(StoreError, match="not a CRS store"):
        Store(str(tmp_path / "other.zarr"))


def test_predictions_round_trip(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    p = np.random.default_rng(1).random((2, 3, 3, 3)).astype(np.float32)
    s.write_predictions("toy", "enc", "shift:other", p, {"seeds": [0, 1]})
    got, attrs = s.read_predictions("toy", "enc", "shift:other")
    np.testing.assert_array_equal(got, p)
    assert attrs["condition"] == "shift:other" and attrs["seeds"] == [0, 1]
    assert (Path(s.path) / "datasets/toy/predictions/enc/shift~other").exists()


@given(st.lists(st.integers(0, 2), min_size=0, max_size=50))
def test_store_order_is_a_stable_permutation(split):
    split = np.array(split, dtype=np.int8)
    order = store_order(split)
    assert sorted(order.tolist()) == list(range(len(split)))
    ordered = split[order]
    key = np.array([2, 1, 0])[ordered]
    assert np.all(np.diff(key) >= 0)  # test, then val, then train
    for code in (0, 1, 2):  # stable inside a split
        rows = order[ordered == code]
        assert np.all(np.diff(rows) > 0)


def test_a_dataset_killed_while_being_written_is_rewritten(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.root.require_group("datasets").create_group("toy")  # killed before anything else was written
    s.write_dataset(table())
    assert s.dataset("toy").ids.tolist() == table().ids.tolist()


def test_an_array_killed_while_being_created_is_recreated(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    g = s.root["datasets/toy"].require_group("embeddings").require_group("enc").create_group("clean")
    g.create_array("x", shape=(10, 2), dtype="float16", chunks=(4, 2))  # no 'done', no attrs yet
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=2, chunk=4))
    assert arr.pending().tolist() == [0, 1, 2]


# one embedding condition's arrays (``crs.store.embeddings``), 10 rows of width 2 in chunks of 4
CONDITION_SPECS = {"x": dict(shape=(10, 2), dtype="float16", chunks=(4, 2), fill_value=0),
                   "done": dict(shape=(3,), dtype=bool, chunks=(1,), fill_value=False),
                   "commit": dict(shape=(3, 2), dtype=np.uint64, chunks=(1, 2), fill_value=0)}


def _store_with_encoder_group(tmp_path):
    """A store holding the toy dataset and the empty group of encoder 'enc''s embeddings of it."""
    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    return s, s.root["datasets/toy"].require_group("embeddings").require_group("enc")


@pytest.mark.parametrize("made", [(), ("x", "commit"), ("x", "done", "commit")])
def test_a_condition_killed_between_its_metadata_writes_is_recreated(tmp_path, made):
    """A new condition is its group, then its three arrays side by side (``create_arrays``), then its attributes:
    a kill after any of those writes leaves something a re-run deletes and creates again."""
    from crs.store.nodes import create_arrays

    s, enc = _store_with_encoder_group(tmp_path)
    specs = CONDITION_SPECS
    create_arrays(enc, {k: v for k, v in specs.items() if k in made}, group="clean")
    arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=2, chunk=4))
    assert arr.pending().tolist() == [0, 1, 2] and arr.commit is not None
    for j in range(3):
        arr.write_chunk(j, np.ones((len(range(10)[arr.chunk_rows(j)]), 2)))
    assert arr.finalize() and Store(s.path, mode="r").read_embedding("toy", "enc", "clean").shape == (10, 2)


def test_a_condition_whose_group_metadata_is_gone_is_made_afresh(tmp_path):
    """A condition folder whose group ``zarr.json`` is gone (deleted, or lost to a fault) holds arrays that zarr
    refuses to create over; with the group's attributes gone nothing in it can be trusted, so it is removed
    and made afresh, every chunk pending (`crs store verify` names it "created but never written")."""
    s, _ = _store_with_encoder_group(tmp_path)
    shape = EmbeddingShape(rows="all", n_rows=10, width=2, chunk=4)
    arr = s.embedding("toy", "enc", "clean", shape)
    for j in range(3):
        arr.write_chunk(j, np.ones((len(range(10)[arr.chunk_rows(j)]), 2)))
    assert arr.finalize()
    (tmp_path / "s.zarr/datasets/toy/embeddings/enc/clean/zarr.json").unlink()
    again = s.embedding("toy", "enc", "clean", shape)
    assert again.pending().tolist() == [0, 1, 2]
    assert not (tmp_path / "s.zarr/datasets/toy/embeddings/enc/clean/x/c").exists()  # the old chunks are gone


def test_a_new_condition_writes_its_group_then_its_arrays_then_its_attributes(tmp_path, monkeypatch):
    """The order that makes the kills above recoverable: arrays whose group was never written would block the
    re-run's creating it, and attributes written before an array would mark a partial condition whole."""
    import zarr

    s = Store(str(tmp_path / "s.zarr"))
    s.write_dataset(table())
    written, original = [], zarr.storage.LocalStore.set

    async def recorded(self, key, value, *args, **kwargs):
        written.append(key)
        return await original(self, key, value, *args, **kwargs)

    monkeypatch.setattr(zarr.storage.LocalStore, "set", recorded)
    s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=2, chunk=4))
    mine = [k for k in written if k.startswith("datasets/toy/embeddings/enc/clean/") and k.endswith("zarr.json")]
    group = "datasets/toy/embeddings/enc/clean/zarr.json"
    assert mine[0] == group and mine[-1] == group and len(mine) == 5, mine
    assert sorted(k.split("/")[-2] for k in mine[1:4]) == ["commit", "done", "x"]


def test_fsspec_urls_use_the_same_code(tmp_path):
    """Any fsspec URL works as --store: here fsspec's in-memory filesystem and a file:// URL."""
    for url in (f"memory://crs-test-{tmp_path.name}/s.zarr", f"file://{tmp_path}/f.zarr"):
        s = Store(url)
        s.write_dataset(table())
        arr = s.embedding("toy", "enc", "clean", EmbeddingShape(rows="all", n_rows=10, width=3, chunk=4))
        for j in arr.pending():
            arr.write_chunk(j, np.full((arr.chunk_rows(j).stop - arr.chunk_rows(j).start, 3), float(j)))
        assert arr.finalize()
        back = Store(url, mode="r")
        assert back.dataset("toy").ids.tolist() == table().ids.tolist()
        np.testing.assert_array_equal(back.read_embedding("toy", "enc", "clean")[:, 0], [0] * 4 + [1] * 4 + [2] * 2)


# ------------------------------------------------------------------ locks
def test_the_extraction_lock_refuses_a_second_holder_and_frees_on_exit(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    with extraction_lock(store, "toy", "hf:org/M") as stale:
        assert stale is None
        (lock,) = (tmp_path / "s.zarr" / ".crs-locks").iterdir()
        assert lock.name == store_key("toy|hf:org/M") + ".lock"
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        with pytest.raises(LockHeld, match=r"toy × hf:org/M is being extracted by another run \(pid "):
            with extraction_lock(store, "toy", "hf:org/M"):
                pass
        with extraction_lock(store, "toy", "other"), dataset_lock(store, "toy"):
            pass  # other keys are other locks
    assert lock.read_text() == ""
    with extraction_lock(store, "toy", "hf:org/M") as stale:
        assert stale is None  # a lock freed on a clean exit names no holder


def test_store_errors_are_user_errors():
    assert issubclass(StoreError, UserError) and issubclass(LockHeld, StoreError)


def _open_while_another_writer_creates(monkeypatch, path: str, where: str) -> tuple[object, list[str]]:
    """Open a new store (writer A) while writer B opens it too, B's whole open landing at ``where`` in A's:

    ``"create"``: between zarr's look for the root group and its create of it (A's create then finds B's
    group: ContainsGroupError); ``"stamp"``: after A opened the new empty root and before it read the root's
    attributes (B stamps the store and adds a group). A's open, held at that point until B's has ended,
    returns the store; the events along the way."""
    import asyncio
    import threading

    import zarr
    import zarr.api.asynchronous as zasync

    import crs.store.zarr_store as zs

    events, b_done, held = [], threading.Event(), {"A": True}

    def writer_b():
        store = Store(path, mode="a")
        store.tables.datasets_group()
        events.append("B opened and stamped")
        b_done.set()

    real_from_store = zasync.AsyncGroup.from_store.__func__

    async def from_store(cls, *args, **kwargs):
        if where == "create" and held.pop("A", False):
            threading.Thread(target=writer_b).start()
            while not b_done.is_set():  # on zarr's event loop, which B's open needs too
                await asyncio.sleep(0.001)
            try:
                return await real_from_store(cls, *args, **kwargs)
            except zarr.errors.ContainsGroupError:
                events.append("A's create found B's group")
                raise
        return await real_from_store(cls, *args, **kwargs)

    real_open_root = zs.open_root

    def open_root(*args, **kwargs):
        root = real_open_root(*args, **kwargs)
        if where == "stamp" and held.pop("A", False):
            b = threading.Thread(target=writer_b)
            b.start()
            b.join()
            events.append("A holds the root opened before B's stamp")
        return root

    monkeypatch.setattr(zasync.AsyncGroup, "from_store", classmethod(from_store))
    monkeypatch.setattr(zs, "open_root", open_root)
    return Store(path, mode="a"), events


@pytest.mark.parametrize("where, race", [
    ("create", ["B opened and stamped", "A's create found B's group"]),
    ("stamp", ["B opened and stamped", "A holds the root opened before B's stamp"]),
])
def test_processes_that_create_one_new_store_at_once_all_open_it(tmp_path, monkeypatch, where, race):
    """Two `crs extract` runs started together on a new store race to create it: each must open it, the
    one stamp kept. The second writer's open is forced into each window of the first's (the events
    say it landed there), so the race happens on every run; lost, it ends in "A group exists in
    store" or "a Zarr group but not a CRS store" for the first."""
    path = str(tmp_path / "s.zarr")
    store, events = _open_while_another_writer_creates(monkeypatch, path, where)
    assert events == race
    meta = Store(path, mode="r").root.attrs["crs_store"]
    assert meta["schema_version"] == SCHEMA_VERSION
    assert store.root.attrs["crs_store"]["store_id"] == meta["store_id"]  # A did not stamp it again


def _metadata_writes(monkeypatch) -> list[str]:
    """The zarr.json files written from now on, one entry per write."""
    import zarr.storage

    seen: list[str] = []
    real = zarr.storage.LocalStore.set

    async def counting(self, key, value):
        if key.endswith("zarr.json"):
            seen.append(key)
        return await real(self, key, value)

    monkeypatch.setattr(zarr.storage.LocalStore, "set", counting)
    return seen


def test_set_attrs_writes_the_metadata_once_where_attrs_update_writes_it_per_key(tmp_path, monkeypatch):
    from crs.store.nodes import set_attrs

    s = Store(str(tmp_path / "s.zarr"))
    g = s.root.require_group("g")
    seen = _metadata_writes(monkeypatch)
    g.attrs.update({"a": 1, "b": 2, "c": 3})  # zarr's own: why a kill could leave a half-written dataset
    assert len(seen) == 3
    seen.clear()
    set_attrs(g, {"d": 4, "e": 5, "f": 6})
    assert seen == ["g/zarr.json"]
    assert dict(s.root["g"].attrs) == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}


def _half_written(s: Store, keys: int) -> None:
    """The dataset as a run killed while zarr wrote its attributes one key at a time left it."""
    t = table()
    s.write_dataset(t)
    g = s.root["datasets/toy"]
    whole = dict(g.attrs)
    g.attrs.put({k: whole[k] for k in list(whole)[:keys]})


@pytest.mark.parametrize("keys", [1, 4, 6])
def test_a_dataset_killed_between_two_of_its_attributes_is_refused_then_rewritten(tmp_path, keys):
    s = Store(str(tmp_path / "s.zarr"))
    _half_written(s, keys)
    assert "task" in s.root["datasets/toy"].attrs  # a test of one attribute's presence would pass it
    with pytest.raises(StoreError, match=r"not fully written.*crs extract --dataset toy"):
        s.dataset("toy")
    s.write_dataset(table())  # what the resumed `crs extract` does first
    got = s.dataset("toy")
    assert got.ids.tolist() == table().ids.tolist() and got.attrs["row_order"] == "test, val, train"


def test_a_half_written_dataset_holding_embeddings_is_refused_not_deleted(tmp_path):
    s = Store(str(tmp_path / "s.zarr"))
    _half_written(s, 2)
    s.root["datasets/toy"].require_group("embeddings").require_group("enc")
    with pytest.raises(StoreError, match=r"holds embeddings.*--store NEW_PATH"):
        s.write_dataset(table())
    assert "embeddings" in s.root["datasets/toy"]


def test_a_folder_holding_only_zarrs_temporary_file_is_a_store_being_made(tmp_path):
    """What a second process sees while the first one's zarr.json is still being written: the
    folder holds zarr's temporary 'zarr.<hex>.partial' alone. That is a store being created (it
    opens), where another stray file still makes the folder a stranger's (refused)."""
    import uuid

    making = tmp_path / "making.zarr"
    making.mkdir()
    (making / f"zarr.{uuid.uuid4().hex}.partial").write_bytes(b"{")
    Store(str(making), mode="a")
    assert Store(str(making), mode="r").root.attrs["crs_store"]["schema_version"] == SCHEMA_VERSION
    stranger = tmp_path / "stranger.zarr"
    stranger.mkdir()
    (stranger / "notes.partial").write_text("mine")
    with pytest.raises(StoreError, match="non-empty directory that is not a Zarr store"):
        Store(str(stranger), mode="a")


def test_create_arrays_writes_what_zarrs_own_calls_write(tmp_path):
    """``create_arrays`` (one metadata write per node) leaves the files zarr's create_group and create_array
    leave, its arrays store every chunk (a fill-valued one too), and ``overwrite`` drops the old chunks."""
    import zarr

    from crs.store.nodes import CHECKED, create_arrays

    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    specs = {"x": dict(shape=(5, 3), dtype="float16", chunks=(2, 3), fill_value=0),
             "done": dict(shape=(3,), dtype=bool, chunks=(1,), fill_value=False)}
    old = root.create_group("old")
    for name, kw in specs.items():
        old.create_array(name, **kw, **CHECKED)
    group, arrays = create_arrays(root, specs, group="new")
    assert group.path == "new" and sorted(arrays) == ["done", "x"]
    for node in ("", "/x", "/done"):
        assert (tmp_path / f"s.zarr/new{node}/zarr.json").read_bytes() == \
            (tmp_path / f"s.zarr/old{node}/zarr.json").read_bytes()
    arrays["x"][:] = 0  # equal to the fill value, and stored all the same
    assert sorted(os.listdir(tmp_path / "s.zarr/new/x/c")) == ["0", "1", "2"]
    _, again = create_arrays(group, {"x": dict(shape=(2, 3), dtype="float32", chunks=(2, 3), fill_value=0)},
                             overwrite=True)
    assert again["x"].shape == (2, 3) and not (tmp_path / "s.zarr/new/x/c").exists()
    with pytest.raises((zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError)):  # never over a group
        create_arrays(root, specs, group="new")


def test_a_new_condition_reads_no_group_above_it_and_writes_what_create_hierarchy_writes(tmp_path, monkeypatch):
    """Creating a condition (a group and its arrays, five levels down) looks for each of its own nodes once and
    reads nothing else (zarr's create_hierarchy reads every group above, about 50 requests on object storage);
    the files are those create_hierarchy writes, and an existing node is still refused."""
    import zarr

    from crs.store import nodes

    s, enc = _store_with_encoder_group(tmp_path)
    specs = CONDITION_SPECS
    asked = []

    def counting(method: str):
        original = getattr(zarr.storage.LocalStore, method)

        def counted(self, key, *args, **kw):
            asked.append((method, key))
            return original(self, key, *args, **kw)
        return counted

    for method in ("get", "exists"):
        monkeypatch.setattr(zarr.storage.LocalStore, method, counting(method))
    nodes.create_arrays(enc, specs, group="clean")
    here = "datasets/toy/embeddings/enc/clean"
    assert sorted(asked) == sorted([("get", f"{here}/zarr.json")] + [("get", f"{here}/{k}/zarr.json") for k in specs])
    monkeypatch.setattr(nodes, "_write_nodes", lambda parent, new: dict(parent.create_hierarchy(new)))
    nodes.create_arrays(enc, specs, group="other")  # zarr's own way
    assert len(asked) > 20  # what it reads
    folder = tmp_path / "s.zarr" / "datasets/toy/embeddings/enc"
    for node in ("", "/x", "/done", "/commit"):
        assert (folder / f"clean{node}/zarr.json").read_bytes() == (folder / f"other{node}/zarr.json").read_bytes()
    monkeypatch.undo()
    with pytest.raises(zarr.errors.ContainsArrayError):  # an array whose group's metadata is gone
        (folder / "clean/zarr.json").unlink()
        nodes.create_arrays(enc, specs, group="clean")
