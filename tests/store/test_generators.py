"""One perturbation generator per dataset in a store: recorded with each perturbed array, another refused with
both names and the repair; a perturbed array that records none (drawn by unreleased development's generator) is
refused, by the reader and by a writer into its dataset, naming the array and the repair."""

import numpy as np
import pytest

from crs.extract import perturb
from crs.foundations.errors import UserError
from crs.store import DatasetTable, EmbeddingShape, Store, StoreError, generators

OLD, NEW = generators.NONE, perturb.GENERATOR


def _store(tmp_path) -> Store:
    store = Store(str(tmp_path / "s.zarr"))
    n = 4
    store.write_dataset(DatasetTable(name="d", ids=np.array([f"i{k}" for k in range(n)]), labels=np.zeros(n, int),
                                     split=np.array([2, 2, 0, 0], np.int8), group=np.array(["g"] * n), attrs={}))
    return store


def _array(store, encoder, condition, **attrs):
    arr = store.embedding("d", encoder, condition, EmbeddingShape(rows="test", n_rows=2, width=3, chunk=2), attrs=attrs)
    arr.write_chunk(0, np.ones((2, 3), np.float16))
    arr.finalize()
    return arr


def test_perturbed_arrays_record_the_generator_and_clean_ones_do_not():
    assert perturb.generator_attrs("gaussian_noise@3") == {generators.ATTR: NEW}
    assert perturb.generator_attrs("clean") == {} and perturb.generator_attrs("shift:mimic_cxr") == {}


def test_a_perturbed_array_that_records_no_generator_is_refused_by_reader_and_writer(tmp_path):
    """Such arrays were read as the first generator's (torch-generator-v0) and so kept readable; only
    unreleased development wrote them, so they are refused now (CONTRIBUTING, Compatibility)."""
    store = _store(tmp_path)
    _array(store, "enc", "clean")
    _array(store, "enc", "gaussian_noise@1")  # no attribute, as unreleased development wrote them
    assert store.perturbation_generators("d") == {OLD: ["enc/gaussian_noise@1"]}
    reopened = Store(store.path)
    for encoder in ("enc", "other"):  # the same array, or another encoder's in the same dataset
        with pytest.raises(UserError) as info:
            _array(reopened, encoder, "gaussian_noise@1", **perturb.generator_attrs("gaussian_noise@1"))
        message = str(info.value)
        assert "record no perturbation generator" in message and NEW in message and "--store" in message
        assert "delete" in message
    _array(reopened, "other", "clean", **perturb.generator_attrs("clean"))  # clean embeddings: any generator
    np.testing.assert_array_equal(reopened.read_embedding("d", "enc", "clean"), np.ones((2, 3)))
    with pytest.raises(StoreError, match=r"embeddings d/enc/gaussian_noise@1 in .* record no perturbation generator "
                                         r".*`crs extract --encoder enc --dataset d --store "):
        reopened.read_embedding("d", "enc", "gaussian_noise@1")


def test_the_same_generator_writes_on_and_a_writer_that_names_none_is_not_checked(tmp_path):
    store = _store(tmp_path)
    for encoder in ("a", "b"):
        _array(store, encoder, "speckle_noise@2", **perturb.generator_attrs("speckle_noise@2"))
    reopened = Store(store.path)
    _array(reopened, "a", "speckle_noise@2", **perturb.generator_attrs("speckle_noise@2"))  # resume
    assert reopened.perturbation_generators("d") == {NEW: ["a/speckle_noise@2", "b/speckle_noise@2"]}
    with pytest.raises(UserError, match=f"drawn by the perturbation generator '{NEW}'"):
        _array(Store(store.path), "c", "speckle_noise@2", perturbation_generator="a-later-generator")
    _array(Store(store.path), "c", "speckle_noise@3")  # no generator named: nothing to compare


def test_store_info_says_which_generator_drew_each_dataset(tmp_path):
    import json

    from typer.testing import CliRunner

    from crs.cli import app

    store = _store(tmp_path)
    _array(store, "enc", "clean")
    _array(store, "enc", "gaussian_noise@1")
    r = CliRunner().invoke(app, ["store", "info", store.path, "--json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert row["dataset"] == "d" and row["images"] == 4 and row["encoders"] == ["enc"]
    assert row["arrays"] == row["complete"] == 2 and row["perturbation_generators"] == {OLD: 1}
    r = CliRunner().invoke(app, ["store", "info", store.path])
    assert r.exit_code == 0 and OLD in r.output
    r = CliRunner().invoke(app, ["store", "info", str(tmp_path / "none.zarr")])
    assert r.exit_code == 2


def test_extract_records_the_generator_and_refuses_a_store_of_another(tmp_path):
    import zarr

    from crs.extract.run import extract

    store = Store(str(tmp_path / "e.zarr"))
    kw = dict(size=0.05, chunk=16, severities=(2,))
    extract(store, "demo-stats", "demo_fundus", **kw)
    assert set(store.perturbation_generators("demo_fundus")) == {NEW}
    root = zarr.open_group(store.path, mode="a")
    for enc_cond in store.perturbation_generators("demo_fundus")[NEW]:  # a store whose arrays record no generator
        enc, cond = enc_cond.split("/")
        del root[f"datasets/demo_fundus/embeddings/{enc}/{cond}"].attrs[generators.ATTR]
    with pytest.raises(UserError, match="record no perturbation generator"):
        extract(Store(store.path), "demo-stats", "demo_fundus", **kw)
