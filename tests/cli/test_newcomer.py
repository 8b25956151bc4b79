"""A new user's path: help that shows every character, `crs probe/score/report` after `crs demo` in the same
folder, and a leaderboard that says what its numbers mean (the reference, ties, the gap to the leader)."""

import re
import shlex
from pathlib import Path

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from crs.cli import app
from crs.commands import outputs, run, tables
from crs.foundations.errors import BadInput

runner = CliRunner()


def _commands(cmd=None, prefix=()):
    cmd = cmd or typer.main.get_command(app)
    yield prefix, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*prefix, name))


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)  # the help is wrapped to the width: compare the characters, not the breaks


def test_every_help_text_shows_verbatim_and_flags_show_no_type():
    checked = 0
    for prefix, cmd in _commands():
        r = runner.invoke(app, [*prefix, "--help"])
        assert r.exit_code == 0, (prefix, r.output)
        shown = _squash(r.output)
        for p in cmd.params:
            if getattr(p, "help", None):
                assert _squash(p.help) in shown, f"crs {' '.join(prefix)}: {p.help!r} not shown as written"
                checked += 1
        assert "<bool>" not in r.output, prefix
    assert checked > 50
    r = runner.invoke(app, ["extract", "--help"])
    assert "([[encoder]]tables)" in _squash(r.output)  # rich markup ate these brackets before


def _demo_folder(root: Path, name: str = "crs-demo", store: bool = True, records: bool = True) -> Path:
    folder = root / name
    if store:
        (folder / "store.zarr").mkdir(parents=True)
        (folder / "store.zarr" / "zarr.json").write_text("{}")
    if records:
        (folder / "results" / "run_records").mkdir(parents=True)
        pl.DataFrame({"x": [1]}).write_parquet(folder / "results" / "run_records" / "a__b.parquet")
    return folder


def test_score_and_probe_use_the_demo_folder_when_the_defaults_hold_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _demo_folder(tmp_path)
    given = {}
    note = outputs.locate_outputs(given, "results")
    assert given == {("results",): "crs-demo/results", ("store",): "crs-demo/store.zarr"}
    assert "crs-demo" in note and "./crs-results" in note
    given = {("store",): "elsewhere.zarr"}  # what the user names stands
    outputs.locate_outputs(given, "results")
    assert given == {("store",): "elsewhere.zarr", ("results",): "crs-demo/results"}
    given = {}
    assert "./crs-store.zarr" in outputs.locate_outputs(given, "store")
    assert given[("store",)] == "crs-demo/store.zarr"
    given = {("results",): "mine"}
    assert outputs.locate_outputs(given, "results") is None and given == {("results",): "mine"}


def test_the_defaults_win_and_two_demo_folders_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _demo_folder(tmp_path, "crs-demo")
    _demo_folder(tmp_path, "other", store=False)
    with pytest.raises(BadInput, match="several folders here hold the outputs of `crs demo`: crs-demo, other"):
        outputs.locate_outputs({}, "results")
    assert outputs.locate_outputs(given := {}, "store") is not None and given[("store",)] == "crs-demo/store.zarr"
    _demo_folder(tmp_path, "crs-results", store=False)  # not a demo layout: ./crs-results/results is absent
    (tmp_path / "crs-results" / "run_records").mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "crs-results" / "run_records" / "a__b.parquet")
    assert outputs.locate_outputs(given := {}, "results") is None and given == {}


@pytest.mark.parametrize("out", [Path("crs-demo"), Path("runs/demo 2")])
def test_the_commands_the_demo_prints_next_parse(out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = run.demo_next(out)
    assert f"store {out / 'store.zarr'}" in text and f"results {out / 'results'}" in text
    commands = [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("  crs ")]
    assert len(commands) == 4
    for c in commands:
        args = shlex.split(c.split(">")[0])[1:]
        if out != Path("crs-demo") and "--results" in args:  # another folder is named, as one argument
            assert args[args.index("--results") + 1] == str(out / "results")
        r = runner.invoke(app, [*args, "--help"])  # click parses every option before --help answers
        assert r.exit_code == 0, (c, r.output)
    (tmp_path / "crs-results").mkdir()  # the defaults would win over the demo's folder: the paths are named
    assert "crs score --results crs-demo/results --store crs-demo/store.zarr" in run.demo_next(Path("crs-demo"))


def _row(encoder, crs, rank, **kw):
    base = {"encoder": encoder, "crs": crs, "crs_rank": rank, "crs_low": crs - 1, "crs_high": crs + 1, "tier": False,
            "auroc": 0.8, "auroc_rank": rank, "calibration": 0.9, "label_efficiency": 0.5, "robustness": 0.7}
    return {**base, **kw}


def test_the_leaderboard_marks_the_reference_ties_and_the_gap_to_the_leader():
    rows = tables.leaderboard_rows(pl.DataFrame([
        _row("a", 53.2, 1, tier=True, tie_group="tied 1st-2nd", crs_diff=0.0, crs_diff_low=0.0, crs_diff_high=0.0),
        _row("ref", 50.0, 2, tier=True, reference=True, crs_low=None, crs_high=None, tie_group="tied 1st-2nd",
             crs_diff=-3.2, crs_diff_low=-6.5, crs_diff_high=0.4, gflops=4.1, images_per_s=512.3),
        _row("c", 41.0, 3, tie_group="3rd", crs_diff=-12.2, crs_diff_low=-15.0, crs_diff_high=-9.1),
    ]), reference="ref")
    assert [r["rank"] for r in rows] == ["tied 1st-2nd", "tied 1st-2nd", "3rd"]
    assert rows[1]["CRS [95% interval]"] == "50.0 (reference)"
    assert rows[0]["CRS [95% interval]"] == "53.2 [52.2, 54.2]"
    assert [r["vs leader"] for r in rows] == ["leader", "-3.2 [-6.5, +0.4]", "-12.2 [-15.0, -9.1]"]
    assert [r["tier"] for r in rows] == ["★", "★", ""]
    cost = tables.cost_rows([_row("a", 53.2, 1, gflops=None), _row("ref", 50, 2, gflops=4.1, images_per_s=512.3,
                                                                 parameters=25_557_032)])
    assert cost == [{"encoder": "a", "parameters": "", "GFLOPs/image": "", "images/s": ""},
                    {"encoder": "ref", "parameters": "25.6 M", "GFLOPs/image": "4.1", "images/s": "512"}]
    assert tables.cost_rows([_row("a", 53.2, 1, gflops=None, width=768)]) == []  # no cost recorded: no table


def test_scores_of_before_the_new_columns_still_show():
    """No reference column (the settings name it), no tie groups, no differences: ranks and plain cells."""
    rows = tables.leaderboard_rows(pl.DataFrame([_row("ref", 50.0, 1, tier=True),
                                                 _row("b", 49.0, 2, crs_low=float("nan"))]), reference="ref")
    assert rows[0]["CRS [95% interval]"] == "50.0 (reference)" and rows[0]["rank"] == "1"
    assert rows[1]["CRS [95% interval]"] == "49.0 n/a" and rows[1]["vs leader"] == ""
    rows = tables.leaderboard_rows(pl.DataFrame([
        _row("a", 52.0, 1, crs_diff=0.0, crs_diff_low=None, crs_diff_high=float("nan")),
        _row("b", 49.0, 2, crs_diff=-3.0, crs_diff_low=None, crs_diff_high=None)]), "median")
    assert [r["vs leader"] for r in rows] == ["leader", "-3.0 n/a"]  # a bootstrap without intervals


def test_the_verdict_sentences_come_from_the_scoring():
    from crs.scoring import verdict

    v = {"leader": "a", "crs": 61.0, "p_rank1": 0.6, "intervals": True, "confidence": 0.95, "reference": "r",
         "members": [{"encoder": "b", "crs_diff": -1.0, "crs_diff_low": -2.5, "crs_diff_high": 0.4,
                      "in_best_set": True, "deciding_axes": []}], "behind": [], "weight_margin": None,
         "weight_shares": [], "n_seeds": 5,
         "settle": [{"encoder": "b", "images": None, "image_factor": None, "seeds": 30, "power": 0.8,
                     "min_difference": 2.0, "current_power": 0.2, "only_seeds": True}]}
    lines = tables.verdict_lines({"verdict": v})
    assert lines == verdict.sentences(v)
    assert any(s.startswith("With 95 % confidence the best encoder is one of a and b") for s in lines)
    assert "No number of test images settles b against a at 5 seeds: about 30 seeds would" in " ".join(lines)
