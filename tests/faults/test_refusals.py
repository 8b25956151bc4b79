"""Inputs a careless user gives, each refused (exit 2, the bad value and a fix that works as printed) or
read right: an unknown or misplaced --shift-target, a ``csv:`` dataset no probe can measure, repair and
probe hints that must run as printed, a model that cannot be had without the network.

The data is the csv baseline's (faultlib.py): 24 tiny PNGs in two classes with explicit splits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from faultlib import BROKEN, CSV_NAME, STORE, crs_here, csv_extract_args, write_csv

pytestmark = pytest.mark.slow


def _data(base, tmp_path: Path, name: str = "data") -> tuple[Path, list[list[str]]]:
    """A copy of the csv baseline's images (the broken one made readable) and its clean rows."""
    import csv

    data = tmp_path / name
    shutil.copytree(base.folder / "imgs", data / "imgs")
    with open(base.folder / f"{CSV_NAME}.csv", newline="", encoding="utf-8") as f:
        rows = [list(r) for r in csv.reader(f)][1:]
    shutil.copy(data / rows[BROKEN - 1][0], data / rows[BROKEN][0])
    return data, rows


# ------------------------------------------------------------------ item 9: --shift-target
@pytest.mark.parametrize("dataset", ["csv", "demo_derm"])
def test_an_unknown_shift_target_is_refused_naming_it_and_the_valid_ones(csv_baseline, tmp_path, dataset):
    data, rows = _data(csv_baseline, tmp_path)
    args = csv_extract_args(data, tmp_path / STORE, write_csv(data / f"{CSV_NAME}.csv", rows))
    if dataset != "csv":
        args[args.index("--dataset") + 1] = dataset
        args += ["--size", "0.05"]
    r = crs_here(*args, "--shift-target", "no-such-set")
    assert r.rc == 2, f"exit {r.rc}:\n{r.message[-1500:]}"
    for word in ("'no-such-set'", "demo_cxr_site2", "csv:PATH"):
        assert word in r.message, f"the refusal does not name {word}:\n{r.message[-1500:]}"
    assert not (tmp_path / STORE).exists()


def test_a_shift_target_without_a_csv_dataset_is_refused_not_ignored(tmp_path):
    r = crs_here("extract", "--encoder", "demo-stats", "--dataset", "demo_derm", "--size", "0.05", "--no-perturb",
                 "--shift-target", "demo_cxr_site2", "--store", tmp_path / STORE, "--quiet")
    assert r.rc == 2 and "csv:PATH datasets only" in r.message and "drop --shift-target" in r.message, r.message
    assert not (tmp_path / STORE).exists()
