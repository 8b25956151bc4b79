"""Bad image files: converted where possible, recorded in the store's failures table otherwise; --strict stops.

The dataset here is a tiny file-based one of the test's own, with the ``load_image`` contract
of the real adapters (uint8 [S, S, 3] or ``ImageError(path, reason)``)."""

import io

import numpy as np
import pytest
from PIL import Image

from crs.extract.images import ImageError
from crs.extract.run import extract
from crs.extract.table import Table
from crs.extract.units import StrictFailure
from crs.foundations.errors import UserError
from crs.store import Store

SIZE = 16


def decode(path) -> np.ndarray:
    """A small PIL decoder: any mode to 8-bit RGB at SIZE x SIZE, or ImageError."""
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16/32-bit grey: scale to 8 bits, not clip
                arr = np.asarray(im, dtype=np.float64)
                im = Image.fromarray(np.round(arr / max(arr.max(), 1) * 255).astype(np.uint8))
            im = im.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(path, f"{type(exc).__name__}: {exc}") from None


class FileDataset:
    name = "files"
    task = "multiclass"
    classes = ("a", "b")
    ordinal = False
    shift_target = None
    description = "tiny file dataset of the tests"
    image_size = SIZE
    modality = "dermatology"
    source = "test files"
    shift_spec = None
    size = 1.0
    seed = 0
    provenance = None

    def __init__(self, paths):
        self.paths = paths

    def table(self):
        n = len(self.paths)
        split = np.array([2, 0, 1] * (n // 3) + [0] * (n % 3), dtype=np.int8)
        return Table(ids=np.array([f"img{i:02d}" for i in range(n)]), labels=np.arange(n) % 2, split=split,
                     group=np.array([f"g{i}" for i in range(n)]))

    def load_image(self, row):
        return decode(self.paths[row])


def make_files(folder):
    rng = np.random.default_rng(0)
    rgb = lambda: Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8))  # noqa: E731
    files = {}
    for i in range(6):
        rgb().save(folder / f"ok{i}.png")
        files[f"ok{i}"] = folder / f"ok{i}.png"
    (folder / "empty.png").write_bytes(b"")
    buf = io.BytesIO()
    rgb().save(buf, "JPEG")
    (folder / "truncated.jpg").write_bytes(buf.getvalue()[:200])
    (folder / "text.jpg").write_text("this is not an image")
    rgb().convert("CMYK").save(folder / "cmyk.jpg")
    Image.fromarray((rng.integers(0, 65535, (20, 20))).astype(np.uint16)).save(folder / "deep.png")
    rgb().convert("P").save(folder / "palette.png")
    rgb().convert("L").save(folder / "grey.png")
    for name in ("empty.png", "truncated.jpg", "text.jpg", "cmyk.jpg", "deep.png", "palette.png", "grey.png"):
        files[name] = folder / name
    return list(files.values())


BROKEN = {"empty.png", "truncated.jpg", "text.jpg"}


def test_the_test_decoder_converts_what_can_be_converted(tmp_path):
    for p in make_files(tmp_path):
        if p.name in BROKEN:
            with pytest.raises(ImageError) as info:
                decode(p)
            assert info.value.path == str(p) and info.value.reason
        else:
            img = decode(p)
            assert img.shape == (SIZE, SIZE, 3) and img.dtype == np.uint8
    assert decode(tmp_path / "deep.png").max() > 128  # 16-bit scaled, not clipped to white or black


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_images_are_recorded_and_the_run_finishes(tmp_path, workers):
    paths = make_files(tmp_path)
    ds = FileDataset(paths)
    store = Store(str(tmp_path / "s.zarr"))
    run = extract(store, "demo-stats", "files", ds=ds, chunk=4, severities=(1,), workers=workers)
    assert run.complete and run.failures == 3 and run.decodes == len(paths)
    f = store.failures("files")
    ids = ds.table().ids
    broken_ids = {ids[i] for i, p in enumerate(paths) if p.name in BROKEN}
    assert set(f["image_id"]) == broken_ids
    assert {p.split("/")[-1] for p in f["file"]} == BROKEN
    assert all(r for r in f["reason"])
    # later stages leave those rows out: the store names them in row order
    table = store.dataset("files")
    assert set(table.ids[store.excluded_rows("files")]) == broken_ids
    # a second encoder adds nothing new to the table
    extract(store, "demo-vit", "files", ds=ds, chunk=4, severities=(1,), workers=workers)
    assert len(store.failures("files")["image_id"]) == 3


def test_strict_stops_at_the_first_bad_image(tmp_path):
    ds = FileDataset(make_files(tmp_path))
    store = Store(str(tmp_path / "s.zarr"))
    with pytest.raises(StrictFailure, match=r"(empty\.png|truncated\.jpg|text\.jpg).*--strict"):
        extract(store, "demo-stats", "files", ds=ds, chunk=4, severities=(1,), strict=True)


def test_image_and_strict_errors_are_user_errors():
    assert issubclass(ImageError, UserError) and issubclass(ImageError, ValueError)
    assert issubclass(StrictFailure, UserError)


# ------------------------------------------------------------------ failures survive a kill
KILL_RUN = """
import sys
from crs.extract import datasets
from crs.extract.run import extract
from crs.store import Store
ds = datasets.get("csv:" + sys.argv[1], modality="ophthalmology", image_size=16)
extract(Store(sys.argv[2]), "demo-stats", ds, chunk=4, severities=(1,))
"""


def csv_with_broken_images(folder):
    """12 images, 3 of them undecodable (in the first, second and third unit of 4), as a csv: dataset."""
    import csv

    rng = np.random.default_rng(0)
    rows = []
    for i in range(12):
        p = folder / f"im{i:02d}.png"
        if i in (1, 6, 10):
            p.write_bytes(b"" if i == 1 else b"not an image")
        else:
            Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(p)
        split = ("test", "train", "val")[(i // 2) % 3] if i < 6 else ("test", "train")[i % 2]
        rows.append([p.name, "ab"[i % 2], f"P{i}", split])
    with open(folder / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label", "group", "split"])
        w.writerows(rows)
    return folder / "data.csv"


def store_contents(path):
    """What later stages read: every embedding array, its done flags, and the failures table."""
    s = Store(str(path), mode="r")
    out = {("failures", k): v for k, v in s.failures("data").items()}
    for d, e, c, complete in s.embeddings():
        assert complete, (d, e, c)
        out[(e, c)] = s.read_embedding(d, e, c)
    return out


def partial_files(path):
    return sorted(str(p) for p in path.rglob("*") if p.name.endswith((".partial", ".tmp")))


def test_a_kill_at_any_commit_keeps_the_failures_table_of_an_uninterrupted_run(tmp_path):
    import os
    import signal

    import forkrun  # tests/forkrun.py
    from crs.extract import datasets

    (tmp_path / "img").mkdir()
    table = csv_with_broken_images(tmp_path / "img")
    ref = tmp_path / "ref.zarr"
    extract(Store(str(ref)), "demo-stats", datasets.get(f"csv:{table}", modality="ophthalmology", image_size=16),
            chunk=4, severities=(1,))
    expected = store_contents(ref)
    assert len(expected["failures", "image_id"]) == 3
    killed = tmp_path / "killed.zarr"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    # commit 1: the first unit's failures alone, none of its 1 + 8 chunks done; 10 (counted afresh
    # by the second process): the first unit's failures again, its 8 chunks left, the second unit's
    # failures and its clean chunk
    for k in (1, 10):
        p = forkrun.run(["-c", KILL_RUN, table, killed], timeout=300,
                        env={**env, "CRS_TEST_KILL_AFTER_COMMITS": str(k)})
        assert p.returncode == -signal.SIGKILL, k
        assert len(Store(str(killed), mode="r").failures("data")["image_id"]) >= 1
    # a half-written chunk file, as a kill inside Zarr's write leaves it: removed by the next run
    stray = killed / "datasets" / "data" / "embeddings" / "demo-stats" / "clean" / "x" / "c" / "0" / "0.0123.partial"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"half")
    forkrun.run(["-c", KILL_RUN, table, killed], timeout=300, env=env, check=True)
    got = store_contents(killed)
    assert got.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=str(key))
    assert partial_files(killed) == []
