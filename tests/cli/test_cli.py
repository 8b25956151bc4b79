"""The command line through typer's CliRunner: bad input, and a small run end to end."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from crs.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_help_is_instant_and_lists_commands():
    r = invoke("--help")
    assert r.exit_code == 0
    for cmd in ("extract", "probe", "score", "demo"):
        assert cmd in r.output


@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("active", "active")])
def test_the_command_line_lets_openmp_threads_sleep_unless_the_user_says_otherwise(given, expected):
    """``crs`` sets OMP_WAIT_POLICY before torch loads OpenMP, leaving a value the user set."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | ({} if given is None else
                                                                            {"OMP_WAIT_POLICY": given})
    code = ("import os, sys; from crs.cli import main; sys.argv = ['crs', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint(os.environ.get('OMP_WAIT_POLICY'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == expected


ENTRY = """
import atexit, sys, threading, time
from pathlib import Path
import typer
from crs import cli

out = Path(sys.argv[1])

@cli.app.command("late")
def late(code: int):
    def finish():  # not a daemon: the process must wait for it, as Python's own exit does
        time.sleep(0.3)
        (out / "thread").write_text("done")
    threading.Thread(target=finish).start()
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    print("no newline at the end", end="")  # left in stdout's buffer until the exit flushes it
    print("warned", end="", file=sys.stderr)
    raise typer.Exit(code)

sys.argv = ["crs", "late", sys.argv[2]]
cli.entry()
print("never reached")
"""


@pytest.mark.parametrize("code", [0, 3])
def test_the_program_ends_with_the_command_code_after_threads_atexit_and_flushed_output(tmp_path, code):
    """``crs`` (``crs.cli.entry``) skips Python's teardown, and nothing a command leaves for the exit is lost."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ENTRY, str(tmp_path), str(code)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == code, done.stderr
    assert done.stdout == "no newline at the end" and done.stderr == "warned"
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_unknown_encoder_exits_2_and_lists_valid_names(tmp_path):
    r = invoke("extract", "--encoder", "medgemmaa", "--dataset", "demo_derm", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2
    assert "unknown encoder 'medgemmaa'" in r.output
    assert "demo-resnet" in r.output and "demo-stats" in r.output
    assert not (tmp_path / "s.zarr").exists()


def test_unknown_dataset_exits_2_and_lists_valid_names(tmp_path):
    r = invoke("extract", "--encoder", "demo-stats", "--dataset", "isic", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2
    assert "unknown dataset 'isic'" in r.output and "demo_derm" in r.output


def test_probe_without_extract_says_what_to_run(tmp_path):
    store = tmp_path / "s.zarr"
    r = invoke("probe", "--encoder", "demo-stats", "--dataset", "demo_derm", "--store", store)
    assert r.exit_code == 2
    assert "crs extract" in r.output


def test_path_that_is_not_a_store_is_left_alone(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    r = invoke("extract", "--encoder", "demo-stats", "--dataset", "demo_derm", "--store", d)
    assert r.exit_code == 2 and "not a Zarr store" in r.output
    assert [p.name for p in d.iterdir()] == ["keep.txt"]


def test_demo_into_a_folder_made_at_another_size_says_to_use_a_new_out(tmp_path):
    # one severity: the refusal is about the dataset's images and splits, not the perturbations
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_derm", "--size", "0.1", "--severities", "1",
               "--store", tmp_path / "store.zarr")
    assert r.exit_code == 0, r.output
    r = invoke("demo", "--out", tmp_path, "--size", "0.2", "--no-report")  # the store error, before any report
    assert r.exit_code == 2
    assert "Splits never change" in r.output and "pass a new --out folder" in r.output


def test_score_without_records_says_what_to_run(tmp_path, monkeypatch):
    r = invoke("score", "--results", tmp_path / "nothing")
    assert r.exit_code == 2 and "crs probe --all" in r.output
    monkeypatch.chdir(tmp_path)  # nothing here: the defaults stand, and the message says where the demo keeps its own
    for cmd in ("score", "report"):
        r = invoke(cmd)
        assert r.exit_code == 2 and "crs-results" in r.output and "crs-demo/results" in r.output, r.output


def test_bad_size_leaves_no_store_behind(tmp_path):
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_derm", "--size", "0", "--store", tmp_path / "new.zarr")
    assert r.exit_code == 2 and "--size must be positive" in r.output
    assert not (tmp_path / "new.zarr").exists()


@pytest.mark.parametrize("args, message", [
    (["--weights", "1/0,0,1"], "three numbers"),
    (["--weights", "1,2"], "three numbers"),
    (["--weights", "a,b,c"], "three numbers"),
    (["--bootstrap", "0"], "at least 1"),
])
def test_bad_score_options(tmp_path, args, message):
    r = invoke("score", "--results", tmp_path, *args)
    assert r.exit_code == 2 and message in r.output


@pytest.mark.slow  # started first (tests/conftest.py)
def test_small_pipeline_end_to_end(tmp_path, monkeypatch):
    """extract -> probe -> score on a small built-in benchmark, two encoders, laid out as `crs demo` lays out its
    folder (crs-demo/store.zarr, crs-demo/results), so the last step can run `crs score` there without paths."""
    store, results = tmp_path / "crs-demo" / "store.zarr", tmp_path / "crs-demo" / "results"
    r = invoke("extract", "-e", "demo-stats", "-e", "demo-vit", "-d", "demo_derm", "--size", "0.1",
               "--store", store, "--chunk", "64", "--severities", "1,5", "--json")
    assert r.exit_code == 0, r.output
    ext = json.loads(r.output)
    assert {run["encoder"] for run in ext["runs"]} == {"demo-stats", "demo-vit"}
    assert all(run["complete"] for run in ext["runs"])
    # a re-run finds everything complete and writes nothing
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_derm", "--size", "0.1", "--store", store,
               "--chunk", "64", "--severities", "1,5", "--json")
    again = json.loads(r.output)["runs"][0]
    assert again["chunks_written"] == 0 and again["chunks_skipped"] > 0

    r = invoke("probe", "--all", "--store", store, "--results", results, "--seeds", "2",
               "--fractions", "0.1,0.5,1", "--l2", "1e-2,1", "--json")
    assert r.exit_code == 0, r.output
    pr = json.loads(r.output)
    assert len(pr["runs"]) == 2 and all(run["conditions"] == 31 for run in pr["runs"])

    import polars as pl

    rec = pl.read_parquet(results / "run_records" / "demo-stats__demo_derm.parquet")
    assert rec.height == 2 * 3 * 31  # seeds x fractions x conditions (clean + 15 dermatology families x 2)
    assert set(rec["condition"].unique()) >= {"clean", "gaussian_noise@1", "jpeg@5"}
    assert rec.filter(pl.col("condition") == "clean")["auroc"].min() > 0.5

    r = invoke("score", "--results", results, "--bootstrap", "50", "--json")
    assert r.exit_code == 0, r.output
    sc = json.loads(r.output)
    s = sc["settings"]
    for key in ("crs_version", "reference", "weights", "bootstrap", "seeds", "fractions"):
        assert key in s
    assert s["reference"] == "median"  # demo-resnet (the registry's reference) is not in this run
    assert set(sc["rank_comparison"]) >= {"pairs", "discordant_pairs", "mean_abs_rank_shift", "kendall_tau_b"}
    names = {e["encoder"] for e in sc["encoders"]}
    assert names == {"demo-stats", "demo-vit"}
    for e in sc["encoders"]:
        for key in ("encoder", "auroc", "crs", "crs_low", "crs_high", "tier", "discrimination", "calibration",
                    "label_efficiency", "robustness", "q_discrimination", "q_calibration", "q_label_efficiency",
                    "q_robustness", "dominance", "balance", "worst_axis"):
            assert key in e
        # v2's C sits at its bound (1) where the debiased error is below 0, so the point may lie outside the
        # percentile interval of its replicates (docs/crs-v2.md section 1); the interval is still ordered
        assert e["crs_low"] <= e["crs_high"] or np.isclose(e["crs_low"], e["crs_high"])
        assert 0 <= e["crs"] <= 100
    assert any(e["tier"] for e in sc["encoders"])
    assert (results / "scores" / "encoders.parquet").exists() and (results / "scores" / "encoders.csv").exists()
    # --json prints what scores.json holds: every top-level key (verdict and provenance where the scoring has them),
    # but the file's digest of itself, which only the file needs
    written = json.loads((results / "scores" / "scores.json").read_text())
    assert set(sc) == set(written) - {"digest"} and sc["encoders"] == written["encoders"]

    # probing what the store lacks names the command to run; bad options exit 2
    r = invoke("probe", "-e", "demo-resnet", "-d", "demo_derm", "--store", store, "--results", results)
    assert r.exit_code == 2
    assert f"crs extract --encoder demo-resnet --dataset demo_derm --store {store}" in r.output
    assert "demo-stats × demo_derm" in r.output  # and what the store does hold
    r = invoke("probe", "-e", "demo-statz", "-d", "demo_derm", "--store", store)
    assert r.exit_code == 2 and "unknown encoder 'demo-statz'" in r.output
    r = invoke("probe", "--all", "--store", store, "--l2", "-1,1")
    assert r.exit_code == 2 and "--l2 values must be positive" in r.output

    # the table view prints a leaderboard; in the folder above crs-demo, `crs score` alone finds it (a newcomer
    # after `crs demo`), says so, and ends with its time
    monkeypatch.chdir(tmp_path)
    r = invoke("score", "--bootstrap", "20")
    assert r.exit_code == 0, r.output
    assert "CRS leaderboard" in r.output and "demo-vit" in r.output
    assert "using the `crs demo` outputs in crs-demo" in r.output and "scored in" in r.output
    joined = " ".join(r.output.split())  # rich wraps lines
    assert "CRS 50 is the level of the per-axis median encoder on every axis" in joined  # the scale note


@pytest.mark.parametrize("args, message", [
    (["--executor", "spark"], "--executor must be local or ray"),
    (["--address", "auto"], "apply to --executor ray only"),
    (["--executor", "ray", "--actors", "0"], "--actors must be 1 or more"),
])
def test_bad_executor_options_exit_2(tmp_path, args, message):
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_derm", "--store", tmp_path / "s.zarr", *args)
    assert r.exit_code == 2 and message in r.output
    assert not (tmp_path / "s.zarr").exists()
