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


# ------------------------------------------------------------------ item 3: a task no probe can measure
def _words(text: str) -> str:
    return " ".join(text.split())


def _own_class_rows(rows):
    """Each image its own class: the test split's classes never appear in training."""
    return [[p, f"c{i:02d}", s] for i, (p, _, s) in enumerate(rows)]


def _check_reason(csv_path: Path, data: Path) -> str:
    """The first fatal problem `crs datasets check` gives (its text after 'FILE: ')."""
    r = crs_here("datasets", "check", f"csv:{csv_path}", "--image-root", data, "--modality", "dermatology", "--quiet")
    assert r.rc == 2, f"crs datasets check: exit {r.rc}:\n{r.message[-1500:]}"
    errors = [line for line in r.message.splitlines() if line.startswith("error: ")]
    assert errors, r.message
    return _words(errors[0].split(": ", 2)[2])


@pytest.fixture(scope="module")
def unmeasurable(csv_baseline, tmp_path_factory):
    """A store and run records of the each-image-its-own-class CSV, written through the library (which
    checks nothing, as another crs might have): what probe and score meet when they did not make it."""
    from crs.extract import datasets as dsreg
    from crs.extract.run import extract
    from crs.probe.run import ProbeOptions, probe
    from crs.store import Store

    folder = tmp_path_factory.mktemp("unmeasurable")
    data, rows = _data(csv_baseline, folder)
    csv_path = write_csv(data / "own.csv", _own_class_rows(rows))
    ds = dsreg.get(f"csv:{csv_path}", modality="dermatology", image_root=str(data))
    extract(Store(str(folder / STORE)), "demo-stats", ds, perturbations=False)
    probe(Store(str(folder / STORE)), "demo-stats", "own", results=folder / "results",
          options=ProbeOptions(seeds=(0,), fractions=(1.0,), l2=(1.0,)))
    return folder, data, csv_path


def test_a_csv_no_probe_can_measure_is_refused_by_every_stage_for_the_reason_check_gives(unmeasurable, tmp_path):
    folder, data, csv_path = unmeasurable
    reason = _check_reason(csv_path, data)
    assert "train split has no image of class" in reason, reason
    r = crs_here(*csv_extract_args(data, tmp_path / STORE, csv_path))
    outcomes = {"extract": r}
    outcomes["probe"] = crs_here("probe", "--all", "--store", folder / STORE, "--results", tmp_path / "results",
                                 "--quiet")
    outcomes["score"] = crs_here("score", "--store", folder / STORE, "--results", folder / "results",
                                 "--bootstrap", "5", "--quiet")
    config = tmp_path / "bench.toml"
    config.write_text(f'store = "{tmp_path / "run.zarr"}"\nresults = "{tmp_path / "run"}"\n[encoders]\n'
                      f'names = ["demo-stats", "demo-resnet"]\n[datasets]\nnames = ["csv:{csv_path}"]\n'
                      'modality = "dermatology"\n'
                      f'image_root = "{data}"\n[extract]\nperturb = false\n')
    outcomes["run"] = crs_here("run", config)
    for stage, r in outcomes.items():
        assert r.rc == 2, f"crs {stage}: exit {r.rc}:\n{r.message[-1500:]}"
        assert reason in _words(r.message), f"crs {stage} does not give check's reason {reason!r}:\n{r.message}"
        assert "`crs datasets check csv:" in r.message and "--modality dermatology" in r.message, r.message
    assert not (tmp_path / STORE).exists() and not (tmp_path / "run.zarr").exists()
    assert not (folder / "results" / "scores").exists()


def test_a_csv_of_two_training_images_is_refused_by_extract_as_by_check(csv_baseline, tmp_path):
    data, rows = _data(csv_baseline, tmp_path)
    csv_path = write_csv(data / "two.csv", [rows[0], rows[1]])  # two classes, both in train: no val, no test
    reason = _check_reason(csv_path, data)
    r = crs_here(*csv_extract_args(data, tmp_path / STORE, csv_path))
    assert r.rc == 2 and reason in _words(r.message), f"exit {r.rc}, check said {reason!r}:\n{r.message}"
    assert not (tmp_path / STORE).exists()


@pytest.mark.parametrize("target", ["one class in its test rows", "a class missing from its train rows only"])
def test_a_shift_target_is_checked_on_the_rows_extraction_takes_by_check_and_extract_alike(csv_baseline, tmp_path,
                                                                                          target):
    data, rows = _data(csv_baseline, tmp_path)
    source = write_csv(data / f"{CSV_NAME}.csv", rows)
    if target.startswith("one class"):
        shifted = [[p, "a" if s == "test" else lab, s] for p, lab, s in rows]
    else:  # only its test rows are the shift condition: its train rows need not hold every class
        shifted = [[p, "a" if s == "train" else lab, s] for p, lab, s in rows]
    shift = write_csv(data / "shift.csv", shifted)
    check = crs_here("datasets", "check", f"csv:{source}", "--image-root", data, "--modality", "dermatology",
                     "--shift-target", f"csv:{shift}", "--quiet")
    r = crs_here(*csv_extract_args(data, tmp_path / STORE, source), "--shift-target", f"csv:{shift}")
    if target.startswith("one class"):
        assert check.rc == 2 and r.rc == 2, f"check: exit {check.rc}, extract: exit {r.rc}:\n{r.message[-1500:]}"
        reason = "dataset shift cannot be measured: one class only (a)"  # the target's rows: all test, all 'a'
        assert reason in _words(check.message) and reason in _words(r.message), check.message + r.message
        assert not (tmp_path / STORE).exists()
    else:
        assert check.rc == 0 and r.rc == 0, f"check: exit {check.rc}:\n{check.message}\nextract:\n{r.message}"


# ------------------------------------------------------------------ item 5: a csv: shift target in a repair
def _printed(message: str, stage: str) -> list[list[str]]:
    """Each backquoted `crs STAGE ...` command of ``message`` with arguments (a bare `crs probe` names the
    command, not a repair), split as a shell would (without 'crs')."""
    import re
    import shlex

    return [shlex.split(c)[1:] for c in re.findall(r"`(crs [^`]+)`", message)
            if shlex.split(c)[1:2] == [stage] and len(shlex.split(c)) > 2]


@pytest.mark.parametrize("roots", ["each CSV's folder", "one --image-root"])
def test_the_repair_of_a_csv_with_a_csv_shift_target_runs_as_printed(csv_baseline, tmp_path, roots):
    data, rows = _data(csv_baseline, tmp_path)
    source = write_csv(data / f"{CSV_NAME}.csv", rows)
    (tmp_path / "target").mkdir()
    if roots == "one --image-root":  # both CSVs name images under data/
        target = write_csv(tmp_path / "target" / "shift.csv", rows)
    else:  # the target's images beside its own CSV
        shutil.copytree(data / "imgs", tmp_path / "target" / "imgs")
        target = write_csv(tmp_path / "target" / "shift.csv", rows)
    store = tmp_path / STORE
    args = csv_extract_args(data, store, source) + ["--shift-target", f"csv:{target}"]
    if roots != "one --image-root":
        i = args.index("--image-root")
        del args[i:i + 2]
    r = crs_here(*args)
    assert r.rc == 0, r.message
    chunk = store / "datasets" / CSV_NAME / "embeddings" / "demo-stats" / "clean" / "x" / "c" / "0" / "0"
    chunk.write_bytes(b"damaged")
    r = crs_here("probe", "--all", "--store", store, "--results", tmp_path / "results", "--quiet")
    assert r.rc == 2, r.message
    hints = _printed(r.message, "extract")
    assert hints and f"csv:{target}" in hints[0], f"the hint does not name the target's CSV:\n{r.message}"
    assert crs_here("store", "verify", store, "--repair").rc in (0, 2)
    fix = crs_here(*hints[0], "--quiet")
    assert fix.rc == 0, f"the printed repair `crs {' '.join(hints[0])}` exited {fix.rc}:\n{fix.message[-1500:]}"
    r = crs_here("probe", "--all", "--store", store, "--results", tmp_path / "results", "--quiet")
    assert r.rc == 0, r.message


# ------------------------------------------------------------------ item 6: probe hints runnable as printed
def _spaced(baseline, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the baseline run in a folder whose name has spaces, the commands run from another folder
    (where no default store is: a hint without --store fails there)."""
    folder = tmp_path / "my run"
    shutil.copytree(baseline.folder, folder, symlinks=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return folder


def _run_printed(message: str, stage: str) -> None:
    hints = _printed(message, stage)
    assert hints, f"no `crs {stage} ...` hint in:\n{message}"
    for words in hints[:1]:
        r = crs_here(*words, "--quiet")
        assert r.rc == 0, f"the hint `crs {' '.join(words)}` as printed: exit {r.rc}:\n{r.message[-1500:]}"


def _rewrite_records(results: Path, generation: str | None = None, alter: bool = False) -> None:
    """Rewrite the first run-record file: under another generation (its digest made anew), or with one value
    altered under the old digest (a damaged file)."""
    import polars as pl

    from crs.foundations import records

    target = sorted((results / "run_records").glob("*.parquet"))[0]
    meta = records.metadata(target)
    frame = pl.read_parquet(target)
    if alter:
        frame = frame.with_columns(pl.col("auroc") * 0.5)
        frame.write_parquet(target, metadata=meta)
    else:
        keep = {k: v for k, v in meta.items() if k not in (records.GENERATION, records.DIGEST)}
        records.write_parquet(target, frame, generation, keep)


@pytest.mark.parametrize("fault", ["another generation", "altered values"])
def test_probe_hints_of_score_name_the_store_and_quote_paths(baseline, tmp_path, monkeypatch, fault):
    folder = _spaced(baseline, tmp_path, monkeypatch)
    _rewrite_records(folder / "results", generation="not-the-probes", alter=fault == "altered values")
    score = ("score", "--results", folder / "results", "--store", folder / STORE, "--bootstrap", "5", "--quiet")
    r = crs_here(*score)
    assert r.rc == 2, f"{fault}: exit {r.rc}:\n{r.message[-1500:]}"
    _run_printed(r.message, "probe")
    r = crs_here(*score)
    assert r.rc == 0, f"{fault}: score after the printed probe: exit {r.rc}:\n{r.message[-1500:]}"


def test_the_verify_alternative_quotes_a_store_path_with_spaces(baseline, tmp_path, monkeypatch):
    folder = _spaced(baseline, tmp_path, monkeypatch)
    chunks = sorted((folder / STORE / "datasets").glob("*/embeddings/demo-stats/clean/x/c/*/*"))
    chunks[0].write_bytes(b"damaged")
    r = crs_here("probe", "--all", "--store", folder / STORE, "--results", folder / "results", "--quiet")
    assert r.rc == 2, r.message
    verify = _printed(r.message, "store")
    assert verify and verify[0][-1] == str(folder / STORE), f"the verify hint does not name the store:\n{r.message}"
    fix = crs_here(*verify[0])
    assert fix.rc in (0, 2) and "reset" in fix.message.lower(), fix.message


# ------------------------------------------------------------------ items 11, 12: a model that cannot be had
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: a connection there is refused


def _no_network_env(tmp_path: Path, token: bool) -> dict:
    """The environment of a user without the network: the hub at a closed local port (nothing reaches the real
    one), HF_HUB_OFFLINE not set, an empty hub cache, no proxy, a token or none."""
    import os

    from faultlib import cli_env

    env = {k: v for k, v in cli_env().items()
           if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE")
           and not k.lower().endswith("_proxy")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf"),
               HF_TOKEN_PATH=str(tmp_path / "hf" / "token"), HF_HUB_DISABLE_TELEMETRY="1")
    if token:
        env["HF_TOKEN"] = "hf_not_a_real_token"
    os.makedirs(tmp_path / "hf", exist_ok=True)
    return env


@pytest.mark.parametrize("token", [False, True], ids=["gated without a token", "no connection"])
def test_a_model_that_cannot_be_had_is_refused_at_once_saying_why_and_leaves_no_store(tmp_path, token):
    import subprocess
    import sys

    (tmp_path / "here").mkdir()
    p = subprocess.run([sys.executable, "-m", "crs.cli", "extract", "--encoder", "medgemma", "--dataset", "demo_derm",
                        "--size", "0.05", "--no-perturb", "--quiet"], cwd=tmp_path / "here",
                       env=_no_network_env(tmp_path, token), capture_output=True, text=True, timeout=300)
    said = p.stdout + p.stderr
    assert p.returncode == 2, f"exit {p.returncode}:\n{said[-1500:]}"
    assert "HF_HUB_OFFLINE is set" not in said and "Retrying" not in said, said[-1500:]
    if token:
        assert "cannot be reached" in said and "127.0.0.1" in said and "--weights PATH" in said, said[-1500:]
    else:
        assert "gated" in said and "HF_TOKEN" in said, said[-1500:]
    assert not list((tmp_path / "here").iterdir()), "the failed extract left something behind"


def test_an_empty_default_store_does_not_hide_the_demo_outputs(baseline, tmp_path, monkeypatch):
    from crs.store import Store

    shutil.copytree(baseline.folder, tmp_path / "crs-demo", symlinks=True)
    monkeypatch.chdir(tmp_path)
    Store("crs-store.zarr")  # what a failed extract left before: a store with nothing in it
    r = crs_here("probe", "--all", "--seeds", "1", "--fractions", "0.5,1", "--l2", "1")
    assert r.rc == 0, f"exit {r.rc}:\n{r.message[-1500:]}"
    assert "crs-demo" in r.message and "nothing to probe" not in r.message, r.message[-1500:]


def test_a_model_that_fails_to_load_leaves_no_new_store_and_an_old_one_as_it_was(baseline, tmp_path):
    from faultlib import fp, outputs

    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    failing = ("--encoder", "dinov2", "--weights", tmp_path / "junk.pth", "--dataset", "demo_derm", "--size", "0.1",
               "--no-perturb", "--quiet")
    r = crs_here("extract", *failing, "--store", tmp_path / "new.zarr")
    assert r.rc == 2, f"exit {r.rc}:\n{r.message[-1500:]}"
    assert not (tmp_path / "new.zarr").exists(), "the failed extract left a new store behind"
    folder = tmp_path / "old"
    shutil.copytree(baseline.folder, folder, symlinks=True)
    r = crs_here("extract", *failing, "--store", folder / STORE)
    assert r.rc == 2 and (folder / STORE / "zarr.json").exists(), r.message[-1500:]
    got = outputs(folder)
    changed = [k for k, v in baseline.outputs.items() if k.startswith("store/") and not fp.same(got.get(k), v)]
    assert not changed, f"the failed extract changed the old store's arrays: {changed[:5]}"
