"""Faults of the machine and of the invocation: a full disk (or quota, read-only file system, refused
permission) met by a writer whose library gave no file name, an empty or header-only CSV, `verify
--repair` on a path that holds no store, and a reader that closes stdout early.

Each ends in exit 2 with one line naming the path and the repair, or (the closed pipe) exit 0 without
a word. The full disk is simulated: the write call raises OSError(errno, strerror) with no file name, as
zarr's local store and polars raise it."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from faultlib import RESULTS, STORE, case, cli_env, crs_here, outputs, stage_args

pytestmark = pytest.mark.slow

FAULTS = [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES]


def _no_name(code: int) -> OSError:
    return OSError(code, os.strerror(code))  # as a library raises it: no filename


def _refuse_zarr_writes(monkeypatch, code: int, where: str = "") -> None:
    """Every chunk or metadata write of zarr's local store whose path holds ``where`` raises ``code``."""
    import zarr.storage._local as local

    real = local._put

    def put(path, value, exclusive=False):
        if where in str(path):
            raise _no_name(code)
        return real(path, value, exclusive)
    monkeypatch.setattr(local, "_put", put)


def _assert_named(r, path, what: str) -> None:
    assert r.rc == 2, f"{what}: exit {r.rc}:\n{r.message[-1500:]}"
    assert str(path) in r.message, f"{what}: the message does not name {path}:\n{r.message[-1500:]}"
    assert "internal error" not in r.message and "bug" not in r.message, r.message[-1500:]


@pytest.mark.parametrize("code", FAULTS, ids=[errno.errorcode[c] for c in FAULTS])
def test_a_store_writer_names_the_store_for_a_nameless_os_error(monkeypatch, tmp_path, code):
    from crs.foundations.errors import UserError
    from crs.store.zarr_store import DatasetTable, EmbeddingShape, Store

    store = Store(str(tmp_path / "s.zarr"))
    n = 8
    store.write_dataset(DatasetTable(np.array([f"i{k}" for k in range(n)]), np.zeros(n, dtype=np.int64),
                                     np.zeros(n, dtype=np.int8), np.array([f"g{k}" for k in range(n)]),
                                     name="d", attrs={"task": "multiclass", "classes": ["a", "b"]}))
    emb = store.embedding("d", "e", "clean", EmbeddingShape(rows="all", n_rows=n, width=4, chunk=4))
    _refuse_zarr_writes(monkeypatch, code)
    for write in (lambda: emb.write_chunk(0, np.ones((4, 4))),
                  lambda: store.write_predictions("d", "e", "clean", np.zeros((1, 1, n, 2)), {})):
        with pytest.raises(UserError) as got:
            write()
        assert str(got.value).startswith(f"{tmp_path / 's.zarr'}: "), got.value


def test_a_full_disk_while_probing_exits_2_naming_the_store(baseline, tmp_path, monkeypatch):
    folder = case(baseline, tmp_path)
    _refuse_zarr_writes(monkeypatch, errno.ENOSPC, "/predictions/")
    r = crs_here(*stage_args("probe", folder, l2="0.01"))  # another L2: every prediction is written anew
    _assert_named(r, folder / STORE, "probe on a full disk")
    assert "no space left" in r.message


def _refuse_parquet(monkeypatch, code: int) -> None:
    import polars as pl

    def write_parquet(self, *a, **k):
        raise _no_name(code)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)


def test_a_full_disk_while_scoring_exits_2_naming_the_results(baseline, tmp_path, monkeypatch):
    folder = case(baseline, tmp_path)
    _refuse_parquet(monkeypatch, errno.EDQUOT)
    r = crs_here(*stage_args("score", folder, bootstrap="7"))
    _assert_named(r, folder / RESULTS, "score over quota")
    assert "quota" in r.message


SCORE_ON_FULL_DISK = textwrap.dedent("""
    import errno, os, sys
    import polars as pl

    def write_parquet(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    pl.DataFrame.write_parquet = write_parquet
    from crs import cli
    sys.argv = ["crs", *sys.argv[1:]]
    cli.main()
""")


def test_a_full_disk_in_a_real_process_exits_2_with_one_line(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    p = subprocess.run([sys.executable, "-c", SCORE_ON_FULL_DISK, *stage_args("score", folder, bootstrap="7")],
                       capture_output=True, text=True, env=cli_env(), timeout=300)
    assert p.returncode == 2, p.stderr[-1500:]
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and str(folder / RESULTS) in lines[0] and "no space left" in lines[0], p.stderr


@pytest.mark.parametrize("text, words", [("", "empty"), ("\n  \n", "empty"), ("path,label\n", "no images"),
                                         ("path,label:a,label:b\n\n", "no images")],
                         ids=["empty", "blank-lines", "header-only", "multilabel-header-only"])
def test_an_empty_or_header_only_csv_is_refused_in_one_line(tmp_path, text, words):
    csv = tmp_path / "t.csv"
    csv.write_text(text)
    for args in (["datasets", "check", f"csv:{csv}", "--modality", "dermatology"],
                 ["extract", "--encoder", "demo-stats", "--dataset", f"csv:{csv}", "--modality", "dermatology",
                  "--store", str(tmp_path / "s.zarr"), "--quiet"]):
        r = crs_here(*args)
        assert r.rc == 2, f"{args[0]}: exit {r.rc}:\n{r.message[-1500:]}"
        lines = [x for x in r.message.splitlines() if x.strip()]
        assert len(lines) == 1 and str(csv) in lines[0] and words in lines[0], r.message


def test_verify_repair_of_a_path_without_a_store_creates_nothing(tmp_path):
    typo = tmp_path / "nx" / "typo.zarr"
    for args in (["store", "verify", str(typo)], ["store", "verify", "--repair", str(typo)]):
        r = crs_here(*args)
        assert r.rc == 2 and str(typo) in r.message and "no CRS store" in r.message, r.message
        assert not (tmp_path / "nx").exists(), f"`crs {' '.join(args)}` created {tmp_path / 'nx'}"


@pytest.mark.parametrize("args", [["encoders"], ["encoders", "--json"], ["encoders", "-q"]])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(args, tmp_path):
    """`| true` has gone before the command writes a byte (its imports alone take longer): every write
    meets the closed pipe, as with `| head -2` once head has its lines."""
    err = tmp_path / "stderr"
    shell = f"{sys.executable} -m crs.cli {' '.join(args)} 2>{err} | true; exit ${{PIPESTATUS[0]}}"
    env = {k: v for k, v in cli_env().items() if k != "COLUMNS"}
    p = subprocess.run(["bash", "-c", shell], env=env, timeout=120)
    assert p.returncode == 0 and err.read_text() == "", f"exit {p.returncode}: {err.read_text()!r}"


ONE_ENCODER = """\
store = "s.zarr"
results = "res"

[encoders]
names = ["demo-stats"]
"""


def test_run_check_refuses_a_config_with_one_encoder(tmp_path):
    cfg = tmp_path / "bench.toml"
    cfg.write_text(ONE_ENCODER)
    r = crs_here("run", str(cfg), "--check")
    assert r.rc == 2 and "encoders.names" in r.message and "at least 2" in r.message, r.message
    assert not (tmp_path / "s.zarr").exists()


def test_a_listed_file_that_is_not_an_image_is_named_so_not_missing(tmp_path):
    from faultlib import write_csv, write_images

    rows = write_images(tmp_path, 8)
    (tmp_path / "imgs" / "notimg.txt").write_text("notes")
    rows[1] = ("imgs/notimg.txt", rows[1][1], rows[1][2])
    csv = write_csv(tmp_path / "t.csv", rows)
    r = crs_here("datasets", "check", f"csv:{csv}", "--modality", "dermatology", "--image-root", str(tmp_path))
    assert r.rc == 2 and "imgs/notimg.txt is not an image file" in r.message, r.message
    assert "notimg.txt not found" not in r.message


FITS = re.compile(r"the largest count that fits is (\d+)")


def test_a_bootstrap_larger_than_memory_is_refused_naming_the_count_that_fits(baseline, tmp_path, monkeypatch):
    """`crs score --bootstrap 1000000000` met a MemoryError (exit 1). The need is estimated before the draw:
    refused in one line with the largest count that fits, which then runs, and one more does not."""
    from crs.scoring import memory

    folder = case(baseline, tmp_path)
    before = outputs(folder)
    r = crs_here(*stage_args("score", folder, bootstrap="1000000000"))  # this machine's own memory figure
    assert r.rc == 2 and FITS.search(r.message) and "--bootstrap" in r.message, r.message[-1500:]
    assert len([x for x in r.message.splitlines() if x.strip()]) == 1, r.message
    monkeypatch.setattr(memory, "available_bytes", lambda: 64 * 1024)  # a machine with 64 KiB to spare
    r = crs_here(*stage_args("score", folder, bootstrap="1000000000"))
    assert r.rc == 2 and "64.0 KiB is available" in r.message, r.message[-1500:]
    fits = int(FITS.search(r.message).group(1))
    assert 1 <= fits < 1000, r.message
    assert outputs(folder) == before, "a refused score changed the outputs"
    assert crs_here(*stage_args("score", folder, bootstrap=str(fits + 1))).rc == 2
    r = crs_here(*stage_args("score", folder, bootstrap=str(fits)))
    assert r.rc == 0, r.message[-1500:]


SIZE_LIMITED = textwrap.dedent("""
    # no file this process writes may grow past 2048 bytes: the kernel refuses the write (EFBIG, as a full
    # disk refuses one with ENOSPC) instead of sending SIGXFSZ
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    from crs import cli
    sys.argv = ["crs", *sys.argv[1:]]
    cli.main()
""")


@pytest.mark.parametrize("stage", ["score", "report"])
def test_a_write_the_kernel_refuses_ends_in_one_line_and_leaves_the_old_outputs(baseline, tmp_path, stage):
    """A real refused write, not a simulated one: polars writing a file itself reported it as a ComputeError (or an
    OSError without errno), so `crs score` ended in exit 1 "internal error" and a half-written Parquet file
    could be read later ("Invalid thrift"). Tables are now encoded in memory and written by Python: exit 2, one
    line naming the folder and the repair, and the previous outputs stay whole, with nothing half-written."""
    folder = case(baseline, tmp_path)
    before = outputs(folder)
    args = stage_args(stage, folder, bootstrap="7") if stage == "score" else stage_args(stage, folder)
    p = subprocess.run([sys.executable, "-c", SIZE_LIMITED, *args], capture_output=True, text=True, env=cli_env(),
                       timeout=300)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2, p.stderr[-1500:]
    assert len(lines) == 1 and "file too large" in lines[0] and "run the command again" in lines[0], p.stderr
    assert str(folder / (RESULTS if stage == "score" else "report")) in lines[0], p.stderr
    assert outputs(folder) == before, f"`crs {stage}` refused a write and changed or left outputs"
    assert not [q for q in folder.rglob(".*") if q.name.startswith((".scores.next", ".scores.old"))]
