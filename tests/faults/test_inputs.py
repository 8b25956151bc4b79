"""Bad inputs of a ``csv:`` dataset (labels, ids, paths, a FIFO, a 2000 x 1 PNG) and a damaged failures table.

The dataset is the csv baseline's: 24 tiny PNGs, one broken (so a failures table), two classes,
explicit splits. A bad CSV is extracted into a new store: exit 0 is allowed only where the store
equals the clean CSV's (the bad value was read as what it means); otherwise exit 2 naming the CSV
line, and the repair (the clean CSV) gives the clean store.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faultlib import (
    BROKEN,
    CSV_NAME,
    STORE,
    assert_same,
    cli_env,
    crs_here,
    csv_case,
    csv_extract_args,
    settle,
    write_csv,
)

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# the session fixtures of faultlib.py (baseline, probe_ref, score_ref, csv_baseline) once per worker
pytestmark = pytest.mark.slow

LINE = 7  # rows[5] is on line 7 of the CSV (line 1 is the header)


def data_copy(base, tmp_path: Path) -> tuple[Path, list[list[str]]]:
    """A folder with the csv baseline's images; the clean rows as lists."""
    import csv

    data = tmp_path / "data"
    shutil.copytree(base.folder / "imgs", data / "imgs")
    with open(base.folder / f"{CSV_NAME}.csv", newline="", encoding="utf-8") as f:
        rows = [list(r) for r in csv.reader(f)][1:]
    return data, rows


def with_ids(rows):
    return [r + [f"id{i:02d}"] for i, r in enumerate(rows)]


def _set(col, value, ids=False):
    def edit(rows, data):
        rows = with_ids(rows) if ids else [list(r) for r in rows]
        rows[5][col] = value
        return rows, ("path", "label", "split", "id") if ids else ("path", "label", "split")
    return edit


def _duplicate_id(rows, data):
    rows = with_ids(rows)
    rows[5][3] = rows[4][3]
    return rows, ("path", "label", "split", "id")


def _outside_root(rows, data):
    rows = [list(r) for r in rows]
    outside = data.parent / "outside"
    outside.mkdir()
    shutil.copy(data / rows[5][0], outside / "im05.png")
    rows[5][0] = "../outside/im05.png"
    return rows, ("path", "label", "split")


BAD_CSVS = {
    "label NaN": _set(1, "NaN"),
    "label NA": _set(1, "NA"),
    "label empty": _set(1, ""),
    "label whitespace-padded": _set(1, " b"),
    "blank id": _set(3, "", ids=True),
    "duplicate id": _duplicate_id,
    "path outside the image root": _outside_root,
}


@pytest.mark.parametrize("name", list(BAD_CSVS))
def test_bad_csv_is_refused_naming_its_line_or_read_as_meant(csv_baseline, tmp_path, name):
    data, rows = data_copy(csv_baseline, tmp_path)
    bad, header = BAD_CSVS[name](rows, data)
    csv_path = write_csv(data / f"{CSV_NAME}.csv", bad, header)
    args = csv_extract_args(data, tmp_path / STORE, csv_path)
    r = crs_here(*args)
    what = f"csv with a {name} on line {LINE}"
    if r.rc == 0:
        assert_same(tmp_path, csv_baseline.outputs, f"{what}: exit 0", only="store/", roots=(data,))
        return
    assert r.rc == 2, f"{what}: exit {r.rc}:\n{r.message[-1500:]}"
    assert re.search(rf"{CSV_NAME}\.csv:{LINE}\b|line {LINE}\b", r.message), \
        f"{what}: the refusal does not name {CSV_NAME}.csv:{LINE}:\n{r.message[-1500:]}"
    write_csv(csv_path, rows)  # the repair: the clean CSV
    r = crs_here(*args)
    assert r.rc == 0, f"{what}: the clean CSV after the refusal: exit {r.rc}:\n{r.message[-1500:]}"
    assert_same(tmp_path, csv_baseline.outputs, f"{what}: after the clean CSV", only="store/", roots=(data,))


@pytest.mark.parametrize("name", ["one class", "a split without a class"])
def test_datasets_check_refuses_a_csv_the_probe_cannot_use(csv_baseline, tmp_path, name):
    data, rows = data_copy(csv_baseline, tmp_path)
    shutil.copy(data / rows[BROKEN - 1][0], data / rows[BROKEN][0])  # every image readable: only the classes are wrong
    if name == "one class":
        rows = [[p, "a", s] for p, _, s in rows]
    else:
        rows = [[p, "a" if s == "test" else lab, s] for p, lab, s in rows]
    csv_path = write_csv(data / f"{CSV_NAME}.csv", rows)
    r = crs_here("datasets", "check", f"csv:{csv_path}", "--image-root", data, "--modality", "dermatology",
                 "--all", "--quiet")
    assert r.rc == 2, f"crs datasets check of a csv with {name}: exit {r.rc}:\n{r.message[-1500:]}"
    assert "class" in r.message.lower(), f"the refusal does not say it is about the classes:\n{r.message[-1500:]}"


def _failed_ids(store: Path) -> list[str]:
    import zarr

    g = zarr.open_group(str(store), mode="r")["datasets"][CSV_NAME]
    if "failures" not in g:
        return []
    return [str(x) for x in g["failures"]["image_id"][...]]


# peak memory bound: an extract of 24 tiny images with demo-stats stays far below it; resizing the
# 2000 x 1 PNG by its shorter side before cropping would need more than this for that one image
MEMORY_MIB = 1536


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _long_png(path: Path) -> None:
    import numpy as np
    from PIL import Image

    Image.fromarray(np.full((1, 2000, 3), 128, np.uint8)).save(path)


@pytest.mark.parametrize("name", ["FIFO", "2000x1 PNG"])
def test_special_image_is_refused_or_recorded_within_bounds(csv_baseline, tmp_path, name):
    data, rows = data_copy(csv_baseline, tmp_path)
    target = data / rows[5][0]
    (_fifo if name == "FIFO" else _long_png)(target)
    args = csv_extract_args(data, tmp_path / STORE, write_csv(data / f"{CSV_NAME}.csv", rows))
    rc, out, rss = _wait_rss(args)
    what = f"an image that is a {name}"
    assert rc in (0, 2), f"{what}: exit {rc}:\n{out[-1500:]}"
    if rc == 2:
        assert target.name in out, f"{what}: the refusal does not name {target.name}:\n{out[-1500:]}"
    elif name == "FIFO":
        assert any("05" in i for i in _failed_ids(tmp_path / STORE)), f"{what}: exit 0 and not in the failures table"
    if name != "FIFO":
        assert 0 < rss < MEMORY_MIB, f"{what}: peak memory {rss} MiB, the bound is {MEMORY_MIB} MiB"


# The child's own peak memory: VmHWM of its address space, printed as it exits. (wait4's ru_maxrss is no
# use here: Linux carries the pre-exec high-water mark over exec, so a child of a large pytest process
# reports the parent's size: 2.6 GiB late in the full suite.)
_PEAK = ("import atexit, runpy, sys\n"
         "def _peak():\n"
         "    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
         "    sys.stderr.write(f'\\nCRS_TEST_VMHWM_KB={hwm[0] if hwm else -1}\\n'); sys.stderr.flush()\n"
         "atexit.register(_peak)\n"
         "sys.argv = ['crs'] + sys.argv[1:]\n"
         "runpy.run_module('crs.cli', run_name='__main__')\n")


def _wait_rss(args):
    p = subprocess.Popen([sys.executable, "-c", _PEAK, *map(str, args)], env=cli_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(p.stdout.read()), daemon=True)
    reader.start()
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            reader.join(10)
            p.returncode = os.waitstatus_to_exitcode(status)
            out = "".join(chunks)
            peak = re.findall(r"CRS_TEST_VMHWM_KB=(-?\d+)", out)
            assert peak and int(peak[-1]) > 0, f"the child did not report its peak memory:\n{out[-1500:]}"
            return p.returncode, out, int(peak[-1]) // 1024
        time.sleep(0.05)
    p.kill()
    os.wait4(p.pid, 0)
    pytest.fail(f"crs {args[0]} was still running after 30 s (waiting on a file that never ends?)")


# ------------------------------------------------------------------ the failures table, damaged
@pytest.mark.parametrize("op", ["delete", "alter"])
def test_damaged_failures_table_is_refused_or_repaired(csv_baseline, tmp_path, op):
    from test_damage import OPS

    folder = csv_case(csv_baseline, tmp_path)
    chunks = sorted(p for p in (folder / STORE / "datasets" / CSV_NAME / "failures").rglob("c/*") if p.is_file())
    assert chunks, "the csv baseline's failures table has no chunk file"
    OPS[op](chunks[0])
    args = csv_extract_args(csv_baseline.folder, folder / STORE)
    settle(crs_here(*args), args, folder, csv_baseline.outputs, f"failures chunk {chunks[0].name} {op}d, then extract",
           names=("failures",), only="store/", defaults={"extract": args}, roots=(csv_baseline.folder,))
    assert any(f"{BROKEN:02d}" in i for i in _failed_ids(folder / STORE))


# the shift target a config names: (what its folder holds, words the refusal names); None: `run --check` says valid
TARGETS = [("csv and images", None), ("no csv", ("datasets.shift_target", "no such file")),
           ("csv without images", ("datasets.shift_target", "none of the 24 images", "shift target"))]


@pytest.mark.parametrize("holds, names", TARGETS, ids=[h.replace(" ", "_") for h, _ in TARGETS])
def test_run_check_opens_each_shift_target(csv_baseline, tmp_path, holds, names):
    data, _ = data_copy(csv_baseline, tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    if holds != "no csv":
        shutil.copy(csv_baseline.folder / f"{CSV_NAME}.csv", target / "target.csv")
    if holds == "csv and images":
        shutil.copytree(data / "imgs", target / "imgs")
    shutil.copy(csv_baseline.folder / f"{CSV_NAME}.csv", data / f"{CSV_NAME}.csv")
    config = tmp_path / "bench.toml"
    config.write_text(f'store = "{tmp_path / STORE}"\nresults = "{tmp_path / "results"}"\n[encoders]\n'
                      'names = ["demo-stats", "demo-resnet"]\n[datasets]\n'
                      f'names = ["csv:{data / CSV_NAME}.csv"]\nmodality = "dermatology"\n'
                      f'shift_target = "csv:{target / "target.csv"}"\n')
    r = crs_here("run", str(config), "--check")
    if names is None:
        assert r.rc == 0 and "valid" in r.message, r.message[-1500:]
        return
    assert r.rc == 2, f"run --check of a shift target with {holds}: exit {r.rc}\n{r.message[-1500:]}"
    missing = [w for w in names if w not in r.message]
    assert not missing, f"the refusal does not name {missing}:\n{r.message[-1500:]}"
    assert not (tmp_path / STORE).exists(), "run --check wrote a store"


def _link(data: Path, to: Path, what: str) -> None:
    """Move ``what`` (under ``data``) to folder ``to`` and leave a symbolic link to it in its place."""
    to.mkdir(parents=True, exist_ok=True)
    shutil.move(data / what, to / Path(what).name)
    (data / what).symlink_to(to / Path(what).name)


# where a symbolic link in the image root leads: (what is linked, folder it leads to, relative to tmp_path)
LINKS = {"file out": ("imgs/im05.png", "outside"), "folder out": ("imgs", "outside"),
         "file within": ("imgs/im05.png", "data/moved")}


@pytest.mark.parametrize("name", list(LINKS))
def test_image_path_a_symlink_leads_out_of_the_root_is_refused_unless_followed(csv_baseline, tmp_path, name):
    data, rows = data_copy(csv_baseline, tmp_path)
    what, to = LINKS[name]
    _link(data, tmp_path / to, what)
    args = csv_extract_args(data, tmp_path / STORE, write_csv(data / f"{CSV_NAME}.csv", rows))
    r = crs_here(*args)
    if name.endswith("within"):  # a link that stays under the root is what the root holds
        assert r.rc == 0, f"a symlink within the image root: exit {r.rc}:\n{r.message[-1500:]}"
    else:
        assert r.rc == 2 and "symbolic link" in r.message and "--follow-symlinks" in r.message, \
            f"an image path a symlink ({name}) leads out of the image root: exit {r.rc}:\n{r.message[-1500:]}"
        line = LINE if what.endswith(".png") else 2  # the linked file's row, or the first row under the folder
        assert re.search(rf"{CSV_NAME}\.csv:{line}\b", r.message), r.message[-1500:]
        assert not (tmp_path / STORE / "datasets").exists() or not any((tmp_path / STORE / "datasets").iterdir())
        r = crs_here(*args, "--follow-symlinks")
        assert r.rc == 0, f"{name} with --follow-symlinks: exit {r.rc}:\n{r.message[-1500:]}"
    assert_same(tmp_path, csv_baseline.outputs, f"a symlink ({name})", only="store/", roots=(data,))
