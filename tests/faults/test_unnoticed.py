"""Damage that no read notices by itself: a whole prediction array deleted, dataset arrays
rewritten through zarr (valid bytes, other values), a damaged root ``zarr.json``, a prediction folder that
is a symbolic link, and an embedding chunk re-encoded with its values kept.

Each ends by the rule of ``settle``, or is followed through `crs store verify` and the commands it names
until the store verifies and the score equals the uninterrupted run's.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import zarr
from faultlib import (
    DATASET,
    STORE,
    assert_same,
    case,
    crs_here,
    followed_literally,
    settle,
    stage_args,
)

pytestmark = pytest.mark.slow  # started first (tests/conftest.py): each case runs a probe or an extract

SCORED = ("results/scores", "store/")


def dataset_dir(folder):
    return folder / STORE / "datasets" / DATASET


def test_a_deleted_prediction_array_is_found_by_verify_and_refused_by_score(baseline, tmp_path, monkeypatch):
    """One encoder's predictions under one condition deleted: score refuses to resample around it (falling back to
    seeds could turn 'cannot be separated' into 'ahead'), and verify, told by the probe's commit record
    what the run wrote, names it with the probe that writes it again."""
    folder = case(baseline, tmp_path)
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(dataset_dir(folder) / "predictions" / "demo-resnet" / "jpeg@1")
    found = crs_here("store", "verify", str(folder / STORE))
    assert found.rc == 2 and "predictions/demo-resnet/jpeg@1" in found.message and "missing" in found.message, \
        found.message[-1500:]
    assert "crs probe --encoder demo-resnet" in found.message, found.message[-1500:]
    cmd = stage_args("score", folder)
    first = crs_here(*cmd)
    assert first.rc == 2 and "fell back" not in first.message, first.message[-1500:]
    assert settle(first, cmd, folder, baseline.outputs, "predictions demo-resnet/jpeg@1 deleted, then crs score",
                  names=("demo-resnet", "jpeg@1")) == "b"
    assert crs_here("store", "verify", str(folder / STORE)).rc == 0


def shuffle(array_dir) -> None:
    """Rewrite a dataset array through zarr with its values permuted: valid zstd with its checksum."""
    arr = zarr.open_array(str(array_dir), mode="r+")
    values = np.asarray(arr[...])
    order = np.random.default_rng(0).permutation(values.shape[0])
    assert not np.array_equal(values[order], values), "the permutation left the values as they were"
    arr[...] = values[order]


# (the dataset array rewritten, the stage that then reads it)
TABLE = [("label", "probe"), ("label", "score"), ("split", "score"), ("image_id", "probe")]


@pytest.mark.parametrize("key, reader", TABLE, ids=[f"{k}-{r}" for k, r in TABLE])
def test_a_dataset_array_rewritten_through_zarr_is_refused_by_verify_and_every_reader(baseline, tmp_path, key,
                                                                                      reader):
    """Labels shuffled and written back as valid Zarr once passed verify, scored with a wrong C and re-probed to
    an AUROC near 0.5: the commit record of the dataset's arrays tells their values apart."""
    folder = case(baseline, tmp_path)
    shuffle(dataset_dir(folder) / key)
    found = crs_here("store", "verify", str(folder / STORE))
    assert found.rc == 2 and f"datasets/{DATASET}/{key}" in found.message and "not as committed" in found.message, \
        found.message[-1500:]
    cmd = stage_args(reader, folder)
    assert settle(crs_here(*cmd), cmd, folder, baseline.outputs, f"{key} rewritten through zarr, then crs {reader}",
                  names=(key, "not as committed")) == "b"


def test_a_damaged_root_metadata_is_named_and_verify_still_checks_below_it(baseline, tmp_path, monkeypatch):
    folder = case(baseline, tmp_path)
    monkeypatch.chdir(tmp_path)
    root = folder / STORE / "zarr.json"
    root.write_text(root.read_text()[:30])
    cmd = stage_args("score", folder)
    first = crs_here(*cmd)  # it said "no store was given" (v2's C needs one), as if --store had not been passed
    assert first.rc == 2 and "root metadata" in first.message and "no store was given" not in first.message, \
        first.message[-1500:]
    chunk = dataset_dir(folder) / "embeddings" / "demo-stats" / "clean" / "x" / "c" / "1" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    found = crs_here("store", "verify", str(folder / STORE))
    lines = found.message.splitlines()
    assert any("(store root)/zarr.json" in line for line in lines), found.message[-1500:]
    assert any("demo-stats/clean/x chunk c/1/0" in line for line in lines), found.message[-1500:]
    commands = followed_literally(folder / STORE)
    again = crs_here("store", "verify", str(folder / STORE))
    assert again.rc == 0, f"after {commands}, verify still finds:\n{again.message[-1500:]}"
    assert crs_here(*cmd).rc == 0
    assert_same(folder, baseline.outputs, f"root metadata and a chunk damaged, then {commands}", only=SCORED)


def test_a_prediction_folder_that_is_a_symlink_is_refused_and_its_removal_is_found(baseline, tmp_path, monkeypatch):
    """docs/pipeline.md: a store file or folder that is a symbolic link is refused. The score refuses to read
    through one; once the link is removed by hand, `verify --repair` finds what is missing."""
    folder = case(baseline, tmp_path)
    monkeypatch.chdir(tmp_path)
    node = dataset_dir(folder) / "predictions" / "demo-stats" / "clean"

    def link_it(name: str):
        shutil.move(node, tmp_path / name)
        node.symlink_to(tmp_path / name, target_is_directory=True)

    link_it("elsewhere")
    cmd = stage_args("score", folder)
    first = crs_here(*cmd)
    assert first.rc == 2 and "symbolic link" in first.message and "crs store verify" in first.message, \
        first.message[-1500:]
    fixed = crs_here("store", "verify", str(folder / STORE), "--repair")  # the repair says what it removed
    assert fixed.rc == 2 and "repaired: removed" in fixed.message and "symbolic link" in fixed.message, \
        fixed.message[-1500:]
    assert settle(crs_here(*cmd), cmd, folder, baseline.outputs, "prediction folder's link removed, then crs score",
                  names=("demo-stats", "clean")) == "b"
    link_it("elsewhere-again")
    node.unlink()  # by hand: what is left is a committed array that is gone
    fixed = crs_here("store", "verify", str(folder / STORE), "--repair")
    assert fixed.rc == 2 and "nothing to repair" not in fixed.message, fixed.message[-1500:]
    assert "predictions/demo-stats/clean" in fixed.message and "missing" in fixed.message, fixed.message[-1500:]
    commands = followed_literally(folder / STORE)
    assert crs_here("store", "verify", str(folder / STORE)).rc == 0, commands
    assert crs_here(*cmd).rc == 0
    assert_same(folder, baseline.outputs, f"prediction folder linked, link removed, then {commands}", only=SCORED)


def test_a_chunk_reencoded_with_its_values_is_kept_by_repair(baseline, tmp_path):
    """Another zstd level, the same values: the repair keeps the chunk, and says so."""
    from numcodecs import Zstd

    from crs.store import Store

    folder = case(baseline, tmp_path)
    chunk = dataset_dir(folder) / "embeddings" / "demo-stats" / "clean" / "x" / "c" / "1" / "0"
    data = chunk.read_bytes()
    reencoded = Zstd(level=19, checksum=True).encode(Zstd().decode(data))
    assert len(reencoded) != len(data), "level 19 gave the same size: pick another re-encoding"
    chunk.write_bytes(reencoded)
    found = crs_here("store", "verify", str(folder / STORE))
    assert found.rc == 2 and "re-encoded" in found.message and "c/1/0" in found.message, found.message[-1500:]
    fixed = crs_here("store", "verify", str(folder / STORE), "--repair")
    assert fixed.rc == 0 and "kept chunk c/1/0" in fixed.message, fixed.message[-1500:]
    assert chunk.read_bytes() == reencoded  # kept as it is
    assert crs_here("store", "verify", str(folder / STORE)).rc == 0
    read = Store(str(folder / STORE), mode="r").read_embedding(DATASET, "demo-stats", "clean")
    want = Store(str(baseline.folder / STORE), mode="r").read_embedding(DATASET, "demo-stats", "clean")
    assert np.array_equal(read, want)
