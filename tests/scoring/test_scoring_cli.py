"""``crs score`` with --store and --bootstrap-unit, through typer's CliRunner."""

from __future__ import annotations

import json

import polars as pl
from typer.testing import CliRunner

from crs.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def setup(make_store, tmp_path, save_records):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7, "c": 0.4})
    results = tmp_path / "results"
    save_records(results, records)
    return results


def test_image_bootstrap_from_the_store(make_store, tmp_path, save_records):
    results = setup(make_store, tmp_path, save_records)
    r = invoke("score", "--results", results, "--store", tmp_path / "s.zarr", "--bootstrap", "40",
               "--bootstrap-unit", "both", "--reference", "median", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["settings"]["bootstrap"]["unit"] == "both"
    said = out["settings"]["warnings"]  # this store has 3 seeds: the widening is said, nothing else
    assert len(said) == 1 and said[0].startswith("only 3 seeds"), said
    table = pl.read_parquet(results / "metric_table.parquet")
    assert {"auroc", "aurc", "ece_ts", "kappa_quadratic"} <= set(table["metric"])
    for name in ("pareto", "weight_sensitivity", "reliability", "probe_metrics", "auroc_per_class"):
        assert (results / "scores" / f"{name}.parquet").exists(), name


def test_v2_without_the_store_is_refused_naming_the_fix(make_store, tmp_path, save_records):
    results = setup(make_store, tmp_path, save_records)
    r = invoke("score", "--results", results, "--store", tmp_path / "nowhere.zarr", "--bootstrap", "20")
    assert r.exit_code == 2
    assert "CRS v2 reads its calibration axis" in r.output and "--crs-version 1" in r.output


def test_missing_store_warns_and_falls_back(make_store, tmp_path, save_records):
    results = setup(make_store, tmp_path, save_records)
    r = invoke("score", "--results", results, "--store", tmp_path / "nowhere.zarr", "--bootstrap", "20",
               "--bootstrap-unit", "image", "--reference", "median", "--crs-version", "1")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "no CRS store" in r.output and "fell back to the seed bootstrap" in r.output
    assert "Pareto front" in r.output and "weight simplex" in r.output


def test_bad_unit_exits_2(make_store, tmp_path, save_records):
    results = setup(make_store, tmp_path, save_records)
    r = invoke("score", "--results", results, "--bootstrap-unit", "patient")
    assert r.exit_code == 2
    assert "--bootstrap-unit must be seed, image or both, not 'patient'" in r.output
