"""Damaged store files of every array kind: deleted, truncated or altered chunks and zarr.json.

Each case copies the baseline, damages one file, runs the stage that reads it (probe for the
embeddings and dataset arrays, score for the predictions) and applies the rule (``settle``):
exit 0 with outputs equal to the uninterrupted run's, or exit 2 naming the array and a repair
that then restores them.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultlib import (
    CSV_NAME,
    DATASET,
    REPAIR,
    STORE,
    assert_same,
    case,
    crs_here,
    csv_case,
    followed_literally,
    settle,
    stage_args,
)

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# the session fixtures of faultlib.py (baseline, probe_ref, score_ref, csv_baseline) once per worker
pytestmark = pytest.mark.slow

EMB = "embeddings/demo-stats/clean/x"
PRED = "predictions/demo-stats/clean"


def delete(path: Path) -> None:
    path.unlink()


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def alter(path: Path) -> None:
    """Flip four bytes in the middle (what a bad disk or a stray write does); JSON stays JSON: a smaller shape."""
    if path.name == "zarr.json":
        meta = json.loads(path.read_text())
        meta["shape"] = [max(1, meta["shape"][0] - 26)] + meta["shape"][1:]
        path.write_text(json.dumps(meta, indent=2))
        return
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(mid, min(mid + 4, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


OPS = {"delete": delete, "truncate": truncate, "alter": alter}

# (array kind, file under store.zarr/datasets/demo_derm, damage, the stage that reads it, words the refusal names)
CASES = [
    ("embeddings", f"{EMB}/c/1/0", "delete", "probe", ("demo-stats", "clean")),
    ("embeddings", f"{EMB}/c/1/0", "truncate", "probe", ("demo-stats", "clean")),
    ("embeddings", f"{EMB}/c/2/0", "alter", "probe", ("demo-stats", "clean")),
    ("embeddings", f"{EMB}/zarr.json", "truncate", "probe", ("demo-stats", "clean")),
    ("embeddings", f"{EMB}/zarr.json", "delete", "probe", ("demo-stats", "clean")),
    ("embeddings", f"{EMB}/zarr.json", "alter", "probe", ("demo-stats", "clean")),
    ("labels", "label/c/0", "delete", "probe", ("label",)),
    ("labels", "label/c/0", "alter", "probe", ("label",)),
    ("dataset arrays", "split/c/0", "truncate", "probe", ("split",)),
    ("dataset arrays", "image_id/c/0", "alter", "probe", ("image_id",)),
    ("dataset arrays", "zarr.json", "truncate", "probe", (DATASET,)),
    ("predictions", f"{PRED}/c/0/0/0/0", "delete", "score", ("demo-stats", "clean")),
    ("predictions", f"{PRED}/c/0/0/0/0", "alter", "score", ("demo-stats", "clean")),
    ("predictions", f"{PRED}/zarr.json", "truncate", "score", ("demo-stats", "clean")),
]


@pytest.mark.parametrize("kind, rel, op, reader, names", CASES,
                         ids=[f"{k.replace(' ', '_')}-{r.replace('/', '.')}-{o}" for k, r, o, _, _ in CASES])
def test_damaged_store_file_is_refused_and_repaired_or_read_correctly(baseline, tmp_path, kind, rel, op, reader,
                                                                    names):
    folder = case(baseline, tmp_path)
    target = folder / STORE / "datasets" / DATASET / rel
    assert target.is_file(), f"the baseline has no {rel}: the store layout changed, update CASES"
    OPS[op](target)
    cmd = stage_args(reader, folder)
    settle(crs_here(*cmd), cmd, folder, baseline.outputs, f"{kind} {rel} {op}d, then crs {reader}", names=names)


def copy_from_other_condition(path: Path) -> None:
    """Valid bytes of the same array kind and shape, from the gaussian_noise@1 node: decodes cleanly."""
    other = Path(str(path).replace("/clean/", "/gaussian_noise@1/"))
    path.write_bytes(other.read_bytes())


def reencode_shuffled(path: Path) -> None:
    """Decode the chunk, reverse its rows, write it back through zarr: valid zstd with its checksum."""
    import zarr

    parts = path.parts
    x_dir = Path(*parts[: parts.index("c")])
    j = int(parts[parts.index("c") + 1])
    arr = zarr.open_array(str(x_dir), mode="r+")
    rows = slice(j * arr.chunks[0], min((j + 1) * arr.chunks[0], arr.shape[0]))
    before = path.stat().st_size
    arr[rows] = np.asarray(arr[rows])[::-1]
    assert path.stat().st_size != before, "the re-encoded chunk kept its size: pick another alteration"


# copies of valid bytes: every chunk decodes, only the commit record tells them apart
SWAPS = [
    ("predictions", f"{PRED}/c/0/0/0/0", copy_from_other_condition, "score"),
    ("embeddings", f"{EMB}/c/2/0", reencode_shuffled, "probe"),
]


@pytest.mark.parametrize("kind, rel, damage, reader", SWAPS, ids=[k for k, *_ in SWAPS])
def test_valid_bytes_that_were_not_committed_are_refused_by_verify_and_the_reader(baseline, tmp_path, kind, rel,
                                                                                damage, reader):
    folder = case(baseline, tmp_path)
    damage(folder / STORE / "datasets" / DATASET / rel)
    found = crs_here("store", "verify", str(folder / STORE))
    assert found.rc == 2 and "not as committed" in found.message, found.message[-1500:]
    cmd = stage_args(reader, folder)
    settle(crs_here(*cmd), cmd, folder, baseline.outputs, f"{kind} {rel} replaced by valid bytes, then crs {reader}",
           names=("demo-stats", "clean", "not as committed"))


# Each case damages one or more files under the dataset and follows verify's hint. Files of different
# encoders are damaged together: the repair of one encoder's files (extract or probe of that encoder,
# nothing wider) never writes the other's, so each file's hint must restore its own file for verify to
# pass and the store to equal the baseline again; folded, the four damaged files take three runs.
# (files, damage): an embedding chunk with another encoder's prediction chunk, a metadata file, the
# dataset's metadata (read by every array, so it stays alone)
EMB_RESNET, PRED_RESNET = EMB.replace("demo-stats", "demo-resnet"), PRED.replace("demo-stats", "demo-resnet")
LITERAL = [((f"{EMB}/c/1/0", f"{PRED_RESNET}/c/0/0/0/0"), "alter"), ((f"{EMB}/zarr.json",), "truncate"),
           (("zarr.json",), "truncate")]


@pytest.mark.parametrize("rels, op", LITERAL, ids=["+".join(r.replace("/", ".") for r in rels) + f"-{o}"
                                                   for rels, o in LITERAL])
def test_verify_hint_followed_literally_restores_the_run(baseline, tmp_path, monkeypatch, rels, op):
    folder = case(baseline, tmp_path)
    monkeypatch.chdir(tmp_path)  # a command that falls back on ./crs-results or ./crs-store.zarr shows here
    for rel in rels:
        OPS[op](folder / STORE / "datasets" / DATASET / rel)
    commands = followed_literally(folder / STORE)
    again = crs_here("store", "verify", str(folder / STORE))
    assert again.rc == 0, f"after {commands}, verify still finds:\n{again.message[-1500:]}"
    assert not [p.name for p in tmp_path.iterdir() if p.name != "run"], f"{commands} wrote outside the run's folder"
    assert crs_here(*stage_args("score", folder)).rc == 0
    assert_same(folder, baseline.outputs, f"{rels} {op}d, then {commands}", only=("results/scores", "store/"))


CSV_LITERAL = [("embeddings/demo-stats/clean/x/c/1/0", "alter"),
               ("embeddings/demo-stats/clean/x/zarr.json", "truncate"), ("zarr.json", "truncate")]


@pytest.mark.parametrize("rel, op", CSV_LITERAL, ids=[f"{r.replace('/', '.')}-{o}" for r, o in CSV_LITERAL])
def test_verify_hint_followed_literally_restores_a_csv_dataset(csv_baseline, tmp_path, monkeypatch, rel, op):
    folder = csv_case(csv_baseline, tmp_path)
    monkeypatch.chdir(tmp_path)
    OPS[op](folder / STORE / "datasets" / CSV_NAME / rel)
    commands = followed_literally(folder / STORE)
    again = crs_here("store", "verify", str(folder / STORE))
    assert again.rc == 0, f"after {commands}, verify still finds:\n{again.message[-1500:]}"
    assert_same(folder, csv_baseline.outputs, f"csv {rel} {op}d, then {commands}", only="store/",
                roots=(csv_baseline.folder,))


# store files replaced by symbolic links to copies of them outside the store: every byte reads as committed
# (a chunk of one array and the metadata of another: verify walks chunks and metadata alike for both). The
# two are of different encoders, whose repairs are independent (see LITERAL), so one run checks both.
LINKED = (f"{EMB}/c/1/0", f"{PRED_RESNET}/zarr.json")


def test_store_files_that_are_symlinks_are_refused_by_verify_and_repaired(baseline, tmp_path, monkeypatch):
    folder = case(baseline, tmp_path)
    monkeypatch.chdir(tmp_path)
    targets = [folder / STORE / "datasets" / DATASET / rel for rel in LINKED]
    for i, target in enumerate(targets):
        copy = tmp_path / f"elsewhere{i}" / target.name
        copy.parent.mkdir()
        shutil.copy(target, copy)
        target.unlink()
        target.symlink_to(copy)
    found = crs_here("store", "verify", str(folder / STORE))
    assert found.rc == 2, found.message[-1500:]
    for rel in LINKED:  # each link named on a line of its own
        lines = found.message.splitlines()
        assert any("symbolic link" in line and rel.rsplit("/c/", 1)[0] in line for line in lines), \
            (rel, found.message[-1500:])
    commands = followed_literally(folder / STORE)
    again = crs_here("store", "verify", str(folder / STORE))
    assert again.rc == 0, f"after {commands}, verify still finds:\n{again.message[-1500:]}"
    assert not [t for t in targets if t.is_symlink()], f"{commands} left a symbolic link"
    assert crs_here(*stage_args("score", folder)).rc == 0
    assert_same(folder, baseline.outputs, f"{LINKED} linked, then {commands}", only=("results/scores", "store/"))


@pytest.mark.parametrize("digest", ["kept", "removed"])
def test_run_records_whose_values_were_altered_are_refused_and_repaired(baseline, tmp_path, digest):
    """Valid Parquet with its metadata kept (generation, settings) and one AUROC changed: only the
    records' digest tells it apart. With the digest removed too, the file was read unchecked and the
    ranking changed with exit 0: a file without a digest is now refused as well."""
    import polars as pl

    from crs.foundations.records import DIGEST

    folder = case(baseline, tmp_path)
    target = folder / "results" / "run_records" / f"demo-stats__{DATASET}.parquet"
    meta = pl.read_parquet_metadata(target)
    if digest == "removed":
        meta.pop(DIGEST)
    frame = pl.read_parquet(target)
    frame.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(0.99).otherwise(pl.col("auroc")).alias("auroc")) \
        .write_parquet(target, metadata=meta)
    cmd = stage_args("score", folder)
    r = crs_here(*cmd)
    said = "not those" if digest == "kept" else f"lacks {DIGEST}"
    assert r.rc == 2 and said in r.message and target.name in r.message, r.message[-1500:]
    for text in dict.fromkeys(REPAIR.findall(r.message)):  # followed literally
        fix = crs_here(*shlex.split(text)[1:])
        assert fix.rc == 0, f"the repair `{text}` exited {fix.rc}:\n{fix.message[-1500:]}"
    assert crs_here(*cmd).rc == 0
    assert_same(folder, baseline.outputs, "run records with an altered AUROC, then the named repair")
