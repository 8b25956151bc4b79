"""`crs run CONFIG.toml` end to end, what a re-run skips, and every command's --json/--quiet/--verbose."""

import json

import pytest
from typer.testing import CliRunner

from crs.cli import app
from crs.stages import report as report_stage

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# one small `crs run` (the `first` fixture) for the module once
pytestmark = pytest.mark.slow

runner = CliRunner()

SMALL = """\
store = "s.zarr"
results = "res"

[encoders]
names = ["demo-stats", "demo-resnet"]

[datasets]
names = ["demo_derm"]
size = 0.1

[extract]
severities = [1]
chunk = 32

[probe]
seeds = 2
fractions = [0.5, 1]
l2 = [0.1, 1]

[score]
bootstrap = {bootstrap}

[report]
enabled = {report}
"""


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def write(folder, bootstrap=20, report="false", extra=""):
    path = folder / "bench.toml"
    path.write_text(SMALL.format(bootstrap=bootstrap, report=report) + extra, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """One small benchmark run from a config: (folder, config path, the run's JSON)."""
    folder = tmp_path_factory.mktemp("bench")
    cfg = write(folder)
    r = invoke("run", cfg, "--json")
    assert r.exit_code == 0, r.output
    return folder, cfg, json.loads(r.stdout)


def test_run_does_every_stage_and_says_where_and_how_long(first):
    folder, _, out = first
    st = out["stages"]
    assert sorted(st["extract"]["done"]) == ["demo-resnet × demo_derm", "demo-stats × demo_derm"]
    assert sorted(st["probe"]["done"]) == ["demo-resnet × demo_derm", "demo-stats × demo_derm"]
    assert st["score"]["done"] == ["scores"] and st["report"]["enabled"] is False
    assert out["store"] == str(folder / "s.zarr") and out["results"] == str(folder / "res")  # from the file's folder
    assert set(out["timings_s"]) == {"extract", "probe", "score"}
    assert {e["encoder"] for e in out["encoders"]} == {"demo-stats", "demo-resnet"}
    assert out["settings"]["bootstrap"]["n"] == 20
    assert (folder / "res" / "scores" / "scores.json").exists()


def test_rerun_skips_what_is_current_and_recomputes_what_changed(first, monkeypatch):
    folder, cfg, out = first
    r = invoke("run", cfg, "--json")
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    for stage in ("extract", "probe", "score"):
        assert again["stages"][stage]["done"] == [], stage
    assert len(again["stages"]["probe"]["skipped"]) == 2 and again["stages"]["score"]["skipped"] == ["scores"]
    assert again["encoders"] == out["encoders"]  # read back from scores.json

    # a score setting changed: only the score is recomputed
    write(folder, bootstrap=30)
    r = invoke("run", cfg, "--json")
    assert r.exit_code == 0, r.output
    changed = json.loads(r.stdout)
    assert changed["stages"]["probe"]["done"] == [] and changed["stages"]["score"]["done"] == ["scores"]
    assert changed["settings"]["bootstrap"]["n"] == 30

    # the CRS version changed (and back): the scores are made again, never read back from the other version
    for version in ("1", "2"):
        r = invoke("run", cfg, "--json", "--crs-version", version)
        assert r.exit_code == 0, r.output
        other = json.loads(r.stdout)
        assert other["stages"]["score"]["done"] == ["scores"] and other["settings"]["crs_version"] == version
    assert "crs_constants" in other["settings"] and other["stages"]["probe"]["done"] == []

    # a probe setting changed: both pairs are probed again (the refit itself is stubbed out here)
    asked = []

    def fake_probe(store, results, pairs, **kw):
        asked.extend(pairs)
        raise KeyboardInterrupt

    from crs.stages import probe

    monkeypatch.setattr(probe, "run", fake_probe)
    write(folder, bootstrap=30, extra="")
    cfg.write_text(cfg.read_text().replace("l2 = [0.1, 1]", "l2 = [0.1, 0.5, 1]"))
    r = invoke("run", cfg)
    assert r.exit_code == 130 and "interrupted" in r.output
    assert sorted(asked) == [("demo-resnet", "demo_derm"), ("demo-stats", "demo_derm")]
    write(folder, bootstrap=30)  # back to what the results hold, for the tests below


def _stages(r):
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    return {k: (sorted(v["done"]), sorted(v["skipped"])) for k, v in out["stages"].items()}, out


def test_the_same_store_moved_and_named_by_another_path_recomputes_nothing(first, tmp_path):
    import shutil

    folder, _, _ = first
    cfg = write(folder, bootstrap=20)
    _stages(invoke("run", cfg, "--json"))  # current for these settings, whatever the tests before did
    shutil.copytree(folder / "s.zarr", tmp_path / "store-renamed.zarr")  # both moved, under new names
    shutil.copytree(folder / "res", tmp_path / "results-renamed")
    other = tmp_path / "elsewhere"
    other.mkdir()  # the store named by an absolute path, the results by a relative one with '..'
    (other / "bench.toml").write_text(
        cfg.read_text().replace('"s.zarr"', json.dumps(str(tmp_path / "store-renamed.zarr")))
        .replace('"res"', '"../results-renamed"'))
    st, _ = _stages(invoke("run", other / "bench.toml", "--json"))
    assert st["extract"][0] == [] and st["probe"][0] == [] and st["score"] == ([], ["scores"]), st


def test_a_probe_run_by_hand_makes_run_refit_that_pair_only(first, monkeypatch):
    import polars as pl

    from crs.stages import probe

    folder, _, _ = first
    cfg = write(folder, bootstrap=20)
    _stages(invoke("run", cfg, "--json"))
    records = folder / "res" / "run_records" / "demo-stats__demo_derm.parquet"
    kept = records.read_bytes()
    pl.read_parquet(records).head(5).write_parquet(records)  # what a `crs probe` of this pair alone leaves
    asked = []

    def fake_probe(store, results, pairs, **kw):  # the refit itself is not the point here
        asked.extend(pairs)
        raise KeyboardInterrupt

    monkeypatch.setattr(probe, "run", fake_probe)
    try:
        r = invoke("run", cfg)
        assert r.exit_code == 130, r.output
        assert asked == [("demo-stats", "demo_derm")]
    finally:
        records.write_bytes(kept)


def test_run_prints_a_summary_table_and_quiet_prints_nothing(first):
    _, cfg, _ = first
    r = invoke("run", cfg)
    assert r.exit_code == 0, r.output
    assert "CRS leaderboard" in r.stdout and "already complete" in r.stdout and "extract" in r.stdout
    r = invoke("run", cfg, "--quiet")
    assert r.exit_code == 0 and r.stdout == ""


def test_report_stage_writes_the_page_then_skips_it(first):
    pytest.importorskip("crs.scoring.report")
    folder, cfg, _ = first
    cfg = write(folder, report="true")
    r = invoke("run", cfg, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["stages"]["report"]["done"] == ["report"]
    from pathlib import Path

    assert Path(out["report"]).exists()
    r = invoke("run", cfg, "--json")
    assert json.loads(r.stdout)["stages"]["report"]["skipped"] == ["report"]


def test_a_score_by_hand_is_redone_and_the_report_follows_scores_json(first, monkeypatch):
    pytest.importorskip("crs.scoring.report")
    from crs.stages import report

    folder, _, _ = first
    cfg = write(folder, report="true")
    _stages(invoke("run", cfg, "--json"))
    scores = folder / "res" / "scores" / "scores.json"
    made = []

    def fake_report(results, out, **kw):  # what the report was made from is the point, not the page
        made.append(scores.read_bytes())
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.html").write_text("made from the scores now")
        return {"html": out / "report.html"}

    monkeypatch.setattr(report, "run", fake_report)
    r = invoke("score", "--results", folder / "res", "--store", folder / "s.zarr", "--bootstrap", 10, "--quiet")
    assert r.exit_code == 0, r.output
    assert json.loads(scores.read_text())["settings"]["bootstrap"]["n"] == 10
    # scored again as the config says; every score run is a new generation of scores.json, which the
    # report names, so the report follows it
    st, out = _stages(invoke("run", cfg, "--json"))
    assert st["probe"][0] == [] and st["score"] == (["scores"], []) and st["report"] == (["report"], []), st
    assert out["settings"]["bootstrap"]["n"] == 20 == json.loads(scores.read_text())["settings"]["bootstrap"]["n"]
    assert made == [scores.read_bytes()]  # made from the scores.json there is now
    cfg = write(folder, bootstrap=30, report="true")  # other scores: the report must follow them
    st, _ = _stages(invoke("run", cfg, "--json"))
    assert st["score"] == (["scores"], []) and st["report"] == (["report"], []), st
    assert len(made) == 2 and made[-1] == scores.read_bytes()
    st, _ = _stages(invoke("run", cfg, "--json"))  # nothing changed since: everything is current
    assert st["score"] == ([], ["scores"]) and st["report"] == ([], ["report"]) and len(made) == 2, st
    (folder / "res" / "report" / "report.html").write_text("edited by hand")
    st, _ = _stages(invoke("run", cfg, "--json"))
    assert st["report"] == (["report"], []) and len(made) == 3
    write(folder)


def test_missing_report_module_is_one_clear_line_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(report_stage, "available", lambda: False)
    cfg = write(tmp_path, report="true")
    r = invoke("run", cfg)
    assert r.exit_code == 2
    assert "crs.scoring.report" in r.output and "enabled = false" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "s.zarr").exists()


def test_config_errors_name_the_line_and_exit_2(tmp_path):
    cfg = tmp_path / "bench.toml"
    cfg.write_text('[probe]\nseeds = 2\n\n[encoders]\nnames = ["demo-stats", "medgemmaa"]\n')
    r = invoke("run", cfg)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{cfg} line 5: encoders.names: unknown encoder 'medgemmaa'" in r.output
    cfg.write_text("[probe]\nseeds = 2\nsedes = 3\n")
    r = invoke("run", cfg, "--check")
    assert r.exit_code == 2 and f"{cfg} line 3: probe.sedes: unknown key" in r.output
    assert "valid keys at [probe]: seeds" in r.output  # brackets survive the terminal's markup
    r = invoke("run", tmp_path / "none.toml")
    assert r.exit_code == 2 and "--print-default" in r.output


def test_print_default_writes_a_config_that_checks(tmp_path):
    r = invoke("run", "--print-default")
    assert r.exit_code == 0
    cfg = tmp_path / "bench.toml"
    cfg.write_text(r.stdout)
    r = invoke("run", cfg, "--check", "--json")
    assert r.exit_code == 0, r.output
    checked = json.loads(r.stdout)
    assert checked["ok"] and checked["settings"]["store"] == str(tmp_path / "crs-demo" / "store.zarr")


# ------------------------------------------------ every command: --json, --quiet, --verbose
FAILING = {  # a cheap invocation that fails on bad input (exit 2)
    "extract": ["extract", "-e", "medgemmaa", "-d", "demo_derm", "--store", "{tmp}/s.zarr"],
    "probe": ["probe", "--all", "--store", "{tmp}/none.zarr"],
    "score": ["score", "--results", "{tmp}/none"],
    "demo": ["demo", "--size", "0", "--out", "{tmp}/demo"],
    "run": ["run", "{tmp}/none.toml"],
    "encoders": ["encoders", "--encoder-file", "{tmp}/none.toml"],
    "datasets check": ["datasets", "check", "isic2019", "--root", "{tmp}/none"],
    "perturbations": ["perturbations", "-d", "nope", "--out", "{tmp}/g.png"],
}
WORKING = {  # a cheap invocation that succeeds
    "encoders": ["encoders"],
    "datasets": ["datasets"],
    "perturbations": ["perturbations", "-d", "demo_derm", "--out", "{tmp}/g.png"],
    "perturbations --table": ["perturbations", "--table"],
    "run --check": ["run", "{tmp}/ok.toml", "--check"],
}


def _args(args, tmp):
    return [a.replace("{tmp}", str(tmp)) for a in args]


@pytest.mark.parametrize("flag", ["--json", "--quiet", "--verbose"])
@pytest.mark.parametrize("name", list(FAILING))
def test_every_command_accepts_the_flags_and_fails_in_one_line(tmp_path, name, flag):
    r = invoke(*_args(FAILING[name], tmp_path), flag)
    assert "No such option" not in r.output
    assert r.exit_code == 2, r.output
    assert "error" in r.output
    if flag == "--verbose":
        assert "Traceback (most recent call last)" in r.output
    else:
        assert "Traceback" not in r.output
        assert len([ln for ln in r.output.splitlines() if ln.startswith("error")]) == 1


@pytest.mark.parametrize("flag", ["--json", "--quiet", "--verbose"])
@pytest.mark.parametrize("name", list(WORKING))
def test_every_listing_command_accepts_the_flags(tmp_path, name, flag):
    (tmp_path / "ok.toml").write_text(SMALL.format(bootstrap=10, report="false"))
    r = invoke(*_args(WORKING[name], tmp_path), flag)
    assert r.exit_code == 0, r.output
    if flag == "--json":
        if name == "perturbations --table":
            assert isinstance(json.loads(r.stdout), dict)
        else:
            json.loads(r.stdout)  # one JSON document (a list for the registries, an object otherwise)
    if flag == "--quiet" and name in ("perturbations", "run --check"):
        assert r.stdout == ""


def test_run_says_the_scores_warnings_without_verbose(monkeypatch, capsys):
    """What could mislead a reader of the leaderboard (ties, encoders left out) is printed by `crs run`
    and `crs demo` too, not only with --verbose."""
    from types import SimpleNamespace

    from crs.commands import tables

    monkeypatch.setattr(tables, "print_scores", lambda scores, results: None)
    scores = SimpleNamespace(settings={"warnings": ["demo-stats on demo_cxr: the AUROC rests mostly on ties"]})
    extract = SimpleNamespace(enabled=True, done=[], skipped=[], seconds=0.0, out="s.zarr", detail={})
    result = SimpleNamespace(scores=scores, results="res", probe_summaries=[], stages={"extract": extract},
                             seconds=1.0, report_html=None)
    tables.print_run(result, "cfg.toml", as_json=False, quiet=False, verbose=False)
    assert "rests mostly on ties" in capsys.readouterr().err
