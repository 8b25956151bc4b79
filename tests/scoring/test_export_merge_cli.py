"""`crs export` and `crs merge` through typer's CliRunner: end to end with `crs score`, and what they refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from crs.cli import app
from crs.stages import bundles, merge
from tests.scoring.test_export_merge import SETTINGS, _site

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def site(tmp_path_factory, build_store_fn, save_records_fn) -> Path:
    return _site(tmp_path_factory.mktemp("cli-site"), build_store_fn, save_records_fn)


@pytest.fixture(scope="module")
def bundle(site, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli-bundles") / "a"
    r = invoke("export", site, "--out", out, "--site", "site-a", "--quiet")
    assert r.exit_code == 0, r.output
    return out


def _copy(src: Path, target: Path) -> Path:
    shutil.copytree(src, target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def test_export_merge_score_end_to_end(site, bundle, tmp_path):
    r = invoke("export", site, "--out", tmp_path / "b", "--site", "site-b")
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and (tmp_path / "b" / bundles.MANIFEST).is_file()
    r = invoke("merge", bundle, tmp_path / "b", "--out", tmp_path / "merged")
    assert r.exit_code == 0, r.output
    assert "merged 2 sites (site-a, site-b) on 3 encoders" in r.output
    r = invoke("score", "--results", tmp_path / "merged", "--bootstrap", SETTINGS.bootstrap, "--seed", SETTINGS.seed,
               "--quiet")
    assert r.exit_code == 0, r.output
    scored = json.loads((tmp_path / "merged" / "scores" / "scores.json").read_text())
    assert scored["settings"]["datasets"] == ["site-a.d1", "site-b.d1"]
    assert {e["encoder"] for e in scored["encoders"]} == {"enc-a", "enc-b", "enc-c"}


def test_a_damaged_bundle_file_exits_2_naming_it(bundle, tmp_path):
    copy = _copy(bundle, tmp_path / "copy")
    target = copy / "datasets" / "d1" / "label.npy"
    labels = np.load(target)
    np.save(target, labels[::-1].copy())
    r = invoke("merge", copy, "--out", tmp_path / "merged")
    assert r.exit_code == 2, r.output
    assert "label.npy" in r.output and "sha256" in r.output
    assert not (tmp_path / "merged").exists()


def test_a_missing_bundle_file_exits_2_naming_it(bundle, tmp_path):
    copy = _copy(bundle, tmp_path / "copy")
    (copy / "predictions" / "d1" / "enc-b" / "clean.npy").unlink()
    r = invoke("merge", copy, "--out", tmp_path / "merged")
    assert r.exit_code == 2, r.output
    assert "clean.npy" in r.output and "missing" in r.output
    assert not (tmp_path / "merged").exists()


def test_a_missing_manifest_exits_2_naming_it(bundle, tmp_path):
    copy = _copy(bundle, tmp_path / "copy")
    (copy / bundles.MANIFEST).unlink()
    r = invoke("merge", copy, "--out", tmp_path / "merged")
    assert r.exit_code == 2, r.output
    assert bundles.MANIFEST in r.output


@pytest.mark.parametrize("command", ["export", "merge"])
def test_an_existing_non_empty_out_is_refused(site, bundle, tmp_path, command):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    args = (site, "--site", "site-a") if command == "export" else (bundle,)
    r = invoke(command, *args, "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "not an empty folder" in r.output
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_a_dry_run_lists_arrays_with_sizes_and_writes_nothing(site, tmp_path):
    salt = (site / bundles.SALT_FILE).read_text()
    r = invoke("export", site, "--out", tmp_path / "b", "--site", "site-a", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "would write" in r.output and "predictions/d1/enc-a/clean.npy" in r.output
    assert list(tmp_path.iterdir()) == []
    assert (site / bundles.SALT_FILE).read_text() == salt


def test_the_same_bundle_twice_is_refused(bundle, tmp_path):
    r = invoke("merge", bundle, bundle, "--out", tmp_path / "merged")
    assert r.exit_code == 2, r.output
    assert "two bundles are of site 'site-a'" in r.output
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("signal", [KeyboardInterrupt, RuntimeError])
def test_a_kill_during_export_leaves_no_half_bundle(site, tmp_path, monkeypatch, signal):
    def killed(*_args, **_kwargs):
        raise signal("killed while writing the datasets")

    monkeypatch.setattr(bundles, "_write_datasets", killed)
    r = invoke("export", site, "--out", tmp_path / "b", "--site", "site-a")
    assert r.exit_code == (130 if signal is KeyboardInterrupt else 1), r.output
    assert list(tmp_path.iterdir()) == []


def test_a_kill_during_merge_leaves_no_half_results(bundle, tmp_path, monkeypatch):
    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(merge, "_write_site_records", killed)
    r = invoke("merge", bundle, "--out", tmp_path / "merged")
    assert r.exit_code == 130, r.output
    assert list(tmp_path.iterdir()) == []
