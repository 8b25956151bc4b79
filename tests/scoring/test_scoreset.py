"""``crs score`` writes its outputs as one set and ``crs report`` reads one set (crs.scoring.scoreset).

A score killed (SIGKILL, through the test-only hook ``CRS_TEST_KILL_SCORES_AT``) at any
point of its write leaves the old set or the new one for the report, never a mix; tables
of two runs side by side are refused with exit 2 naming the files and `crs score`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal

import polars as pl
import pytest
from typer.testing import CliRunner

import forkrun  # tests/forkrun.py
from crs.cli import app
from crs.foundations.errors import UserError
from crs.foundations.records import read as read_records
from crs.scoring import report, scoreset
from crs.scoring.options import ScoreOptions
from crs.scoring.run import score

OLD_B, NEW_B = 5, 7  # bootstrap sizes that tell the old set from the new one


def _results(tmp_path, make_records, save_records):
    results = tmp_path / "results"
    save_records(results, make_records({"a": 0.9, "b": 0.8, "c": 0.7}))
    return results


def _score_cli(results, bootstrap, kill_at=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop(scoreset.KILL_ENV, None)
    if kill_at:
        env[scoreset.KILL_ENV] = kill_at
    return forkrun.run(["-m", "crs.cli", "score", "--results", results, "--bootstrap", bootstrap, "--reference",
                        "median", "--crs-version", "1", "--quiet"], env=env, timeout=120)


def _leftovers(results):
    return sorted(p.name for p in results.iterdir() if p.name.startswith(".scores.") and p.is_dir())


@pytest.mark.parametrize("kill_at", ["file:1", "staged", "old-moved", "new-moved"])
def test_a_score_killed_while_writing_leaves_the_old_set_or_the_new_one(kill_at, tmp_path, make_records, save_records):
    results = _results(tmp_path, make_records, save_records)
    records = read_records(results)
    old = score(records, ScoreOptions(reference="median", bootstrap=OLD_B, crs_version="1"))
    old.write(results / "scores")
    killed = _score_cli(results, NEW_B, kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    inputs = report.load(results)  # refuses a mix (MixedScores) by itself
    expect_new = kill_at in ("old-moved", "new-moved")
    assert inputs.settings["bootstrap"]["n"] == (NEW_B if expect_new else OLD_B)
    if not expect_new:
        assert inputs.generation == old.generation and inputs.table("encoders").equals(old.encoders)
    if kill_at == "old-moved":  # RESULTS/scores is gone: the report reads the complete new set beside it
        assert not (results / "scores").exists()
        summary = report.write_report(results, tmp_path / "report", quiet=True)
        assert summary["scores_generation"] == inputs.generation
        assert report.page_generation(tmp_path / "report" / "report.html") == inputs.generation
        assert scoreset.generation_of(tmp_path / "report" / "tables" / "leaderboard.parquet") == inputs.generation
    # the next score settles what the kill left: one complete set, no hidden folders, no .tmp files
    old.write(results / "scores")
    assert _leftovers(results) == [] and not list(results.rglob("*.tmp"))
    assert report.load(results).generation == old.generation


def test_tables_of_two_runs_are_refused_naming_them(tmp_path, make_records, save_records):
    results = _results(tmp_path, make_records, save_records)
    records = read_records(results)
    first = score(records, ScoreOptions(bootstrap=OLD_B, crs_version="1"))
    first.write(tmp_path / "other")
    score(records, ScoreOptions(bootstrap=NEW_B, crs_version="1")).write(results / "scores")
    shutil.copy(tmp_path / "other" / "pareto.parquet", results / "scores" / "pareto.parquet")
    r = CliRunner().invoke(app, ["report", "--results", str(results), "--out", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "pareto.parquet" in text and first.generation in text and "crs score --results" in text
    assert not (tmp_path / "r" / "report.html").exists()


def test_a_missing_table_and_an_unmarked_set_are_refused(tmp_path, make_records, save_records):
    results = _results(tmp_path, make_records, save_records)
    scores = score(read_records(results),
                   ScoreOptions(bootstrap=OLD_B, crs_version="1"))
    scores.write(results / "scores")
    (results / "scores" / "rank_distribution.parquet").unlink()
    with pytest.raises(scoreset.MixedScores, match=r"rank_distribution.parquet \(listed in scores.json, missing\)"):
        report.load(results)
    scores.write(results / "scores")
    meta = results / "scores" / "scores.json"
    doc = json.loads(meta.read_text())
    meta.write_text(json.dumps({k: v for k, v in doc.items() if k != "digest"}))  # values then unchecked: refused
    with pytest.raises(UserError, match=r"scores.json records no digest.*re-run `crs score"):
        report.load(results)
    del doc["generation"]
    meta.write_text(json.dumps({**doc, "digest": scoreset.doc_digest(doc)}))
    with pytest.raises(scoreset.MixedScores, match="no generation id.*re-run `crs score"):
        report.load(results)
    meta.write_text("{not json")
    with pytest.raises(UserError, match="scores.json is damaged.*crs score"):
        report.load(results)


def test_a_score_without_the_store_leaves_no_table_of_the_run_with_it(tmp_path, make_store):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7, "c": 0.4})
    out = tmp_path / "results" / "scores"
    with_store = score(records, ScoreOptions(bootstrap=OLD_B, crs_version="1"), store=store)
    with_store.write(out)
    assert (out / "reliability.parquet").is_file()
    score(records, ScoreOptions(bootstrap=OLD_B, crs_version="1"), store=None).write(out)
    names = {p.name for p in out.iterdir()}
    assert "reliability.parquet" not in names and "probe_metrics.csv" not in names
    assert scoreset.generation_of(out / "encoders.parquet") == json.loads((out / "scores.json").read_text())[
        "generation"]


def test_the_metric_table_beside_the_records_carries_the_generation(tmp_path, make_store):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7})
    scores = score(records, ScoreOptions(bootstrap=OLD_B), store=store)
    scores.write(tmp_path / "scores", metric_table=tmp_path / "metric_table.parquet")
    assert scoreset.generation_of(tmp_path / "metric_table.parquet") == scores.generation


def test_a_value_changed_by_hand_in_a_score_table_or_scores_json_is_refused(tmp_path):
    """The report's numbers come from these files: one changed by hand (valid Parquet, same generation;
    valid JSON) is refused naming the file and `crs score`, never shown."""
    import json

    from crs.scoring import scoreset

    out = tmp_path / "results" / "scores"
    table = pl.DataFrame({"encoder": ["a", "b"], "crs": [61.0, 40.0]})
    scoreset.write_set(out, {"encoders": table}, {"generation": "g1", "tables": ["encoders"]}, "g1")
    doc = scoreset.read_scores_json(out, tmp_path / "results")
    assert scoreset.read_tables(out, doc, ["encoders"], tmp_path / "results")["encoders"].equals(table)
    meta = pl.read_parquet_metadata(out / "encoders.parquet")  # rewritten keeping its metadata: only a value moves
    table.with_columns(crs=pl.Series([40.0, 61.0])).write_parquet(out / "encoders.parquet", metadata=meta)
    with pytest.raises(scoreset.MixedScores, match="encoders.parquet .its values are not those crs score wrote"):
        scoreset.read_tables(out, doc, ["encoders"], tmp_path / "results")
    del meta[scoreset.DIGEST_KEY]  # without its digest the changed value is refused too
    table.with_columns(crs=pl.Series([40.0, 61.0])).write_parquet(out / "encoders.parquet", metadata=meta)
    with pytest.raises(scoreset.MixedScores, match="encoders.parquet .its values are not those crs score wrote, or "
                                                   "it records no digest"):
        scoreset.read_tables(out, doc, ["encoders"], tmp_path / "results")
    text = json.loads((out / "scores.json").read_text())
    (out / "scores.json").write_text(json.dumps({**text, "tables": ["encoders", "x"]}))
    with pytest.raises(UserError, match="scores.json: its values are not those crs score wrote.*crs score"):
        scoreset.read_scores_json(out, tmp_path / "results")
