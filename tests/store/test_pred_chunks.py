"""Prediction arrays are written as one chunk where they fit in PREDICTION_CHUNK_BYTES (scoring reads each
whole), split by seeds then images where not; each layout reads back exactly, and a damaged chunk is refused
naming the chunk and `crs probe`, and found by `crs store verify`."""

from pathlib import Path

import numpy as np
import pytest

from crs.store import Store, StoreError, predictions, verify
from crs.store.predictions import prediction_chunks
from tests.store.test_store import table

P = np.random.default_rng(3).random((3, 2, 7, 3)).astype(np.float32)
ARRAY = "datasets/toy/predictions/enc/clean"


def written(path, probs=P) -> Store:
    s = Store(str(path))
    s.write_dataset(table())
    s.write_predictions("toy", "enc", "clean", probs, {"seeds": list(range(probs.shape[0]))})
    return s


def chunk_files(path) -> list[str]:
    base = Path(path) / ARRAY / "c"
    return sorted(str(f.relative_to(base.parent)) for f in base.rglob("*") if f.is_file())


@pytest.mark.parametrize("shape, cap", [((5, 7, 5000, 8), 64 << 20), ((3, 2, 7, 3), 1), ((3, 2, 7, 3), 2 * 7 * 3 * 4),
                                        ((3, 2, 7, 3), 2 * 7 * 3 * 4 * 2 + 5), ((3, 2, 7, 3), 2 * 3 * 4 * 3),
                                        ((0, 1, 0, 2), 1 << 20), ((2, 7, 200_000, 20), 64 << 20)])
def test_chunks_cover_whole_seeds_or_images_and_never_exceed_the_cap(shape, cap):
    c = prediction_chunks(shape, cap)
    assert len(c) == 4 and all(v >= 1 for v in c) and c[1] == max(shape[1], 1) and c[3] == max(shape[3], 1)
    nbytes = int(np.prod(c)) * 4
    assert nbytes <= cap or c[0] == c[2] == 1  # over the cap only where one image of one seed is over it
    if int(np.prod([max(d, 1) for d in shape])) * 4 <= cap:
        assert c == tuple(max(d, 1) for d in shape)  # whole array, one chunk
    if c[2] < shape[2]:
        assert c[0] == 1  # images split only once a seed alone does not fit


def test_paper_scale_array_is_one_chunk():
    assert prediction_chunks((5, 7, 5000, 8)) == (5, 7, 5000, 8)


@pytest.mark.parametrize("cap, files", [(None, ["c/0/0/0/0"]), (2 * 7 * 3 * 4, ["c/0/0/0/0", "c/1/0/0/0", "c/2/0/0/0"]),
                                        (2 * 3 * 3 * 4, [f"c/{s}/0/{i}/0" for s in range(3) for i in range(3)])])
def test_written_layout_reads_back_exactly(tmp_path, monkeypatch, cap, files):
    if cap is not None:
        monkeypatch.setattr(predictions, "PREDICTION_CHUNK_BYTES", cap)
    s = written(tmp_path / "s.zarr")
    assert chunk_files(tmp_path / "s.zarr") == files
    got, attrs = Store(str(tmp_path / "s.zarr"), mode="r").read_predictions("toy", "enc", "clean")
    assert got.dtype == np.float32 and np.array_equal(got, P) and attrs["seeds"] == [0, 1, 2]
    assert verify(s.path) == []


@pytest.mark.parametrize("how", ["delete", "truncate", "alter"])
def test_a_damaged_single_chunk_is_refused_found_and_repaired(tmp_path, how):
    path = tmp_path / "s.zarr"
    written(path)
    f = path / ARRAY / "c/0/0/0/0"
    data = f.read_bytes()
    if how == "delete":
        f.unlink()
    elif how == "truncate":
        f.write_bytes(data[: len(data) // 2])
    else:
        i = len(data) // 2
        f.write_bytes(data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:])
    with pytest.raises(StoreError, match=r"chunk c/0/0/0/0 of array .*To repair: run .*crs probe"):
        Store(str(path), mode="r").read_predictions("toy", "enc", "clean")
    assert {(x.array, x.chunk) for x in verify(str(path))} == {(ARRAY, "c/0/0/0/0")}
    verify(str(path), repair=True)
    written(path)  # what `crs probe` does
    assert verify(str(path)) == []
    assert np.array_equal(Store(str(path), mode="r").read_predictions("toy", "enc", "clean")[0], P)
