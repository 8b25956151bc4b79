"""``crs.foundations.records.check_same_settings``: the encoders compared on a dataset share one probe protocol."""

from __future__ import annotations

import json

import polars as pl
import pytest

from crs.foundations import records

BASE = {"head": "linear", "seeds": [0, 1, 2], "fractions": [0.1, 1.0], "l2": [0.01, 1.0], "select_by": "loss",
        "max_iter": 1000, "tol": 0.0001, "gap": None}


def _write(results, encoder, dataset, settings, created="2026-12-01T10:00:00+00:00"):
    meta = None if settings is None else {records.PROVENANCE: json.dumps({"created": created, "settings": settings})}
    frame = pl.DataFrame({"encoder": [encoder], "dataset": [dataset]})
    records.write_parquet(records.path(results, encoder, dataset), frame, "g", meta)
    return encoder, dataset


def test_one_protocol_passes(tmp_path):
    pairs = [_write(tmp_path, e, d, BASE) for e in ("a", "b") for d in ("x", "y")]
    records.check_same_settings(tmp_path, pairs)


def test_another_l2_grid_is_refused_naming_both_sides_and_the_newest_runs_command(tmp_path):
    pairs = [_write(tmp_path, "a", "x", BASE, created="2026-12-01T09:00:00+00:00"),
             _write(tmp_path, "b", "x", {**BASE, "l2": [0.5]}, created="2026-12-01T11:00:00+00:00")]
    with pytest.raises(records.MixedSettings) as err:
        records.check_same_settings(tmp_path, pairs, store="s.zarr")
    msg = str(err.value)
    assert "a: l2 [0.01, 1.0]" in msg and "b: l2 [0.5]" in msg
    assert (f"`crs probe --all --store s.zarr --results {tmp_path} --head linear --seeds 3 --fractions 0.1,1 "
            "--l2 0.5 --select-by loss --tol 0.0001`") in msg


def test_a_setting_only_a_config_gives_is_named_with_its_value(tmp_path):
    pairs = [_write(tmp_path, "a", "x", BASE, created="1"), _write(tmp_path, "b", "x", {**BASE, "max_iter": 50}, "2")]
    with pytest.raises(records.MixedSettings, match=r"with max_iter 50 as in that run's config"):
        records.check_same_settings(tmp_path, pairs)


def test_heads_and_datasets_are_not_compared(tmp_path):
    pairs = [_write(tmp_path, "a", "x", BASE), _write(tmp_path, "a+mlp", "x", {**BASE, "head": "mlp", "l2": [1e-4]}),
             _write(tmp_path, "a", "y", {**BASE, "seeds": [0]}), _write(tmp_path, "b", "y", {**BASE, "seeds": [0]})]
    records.check_same_settings(tmp_path, pairs)


def test_a_file_that_records_no_settings_is_refused_not_skipped(tmp_path):
    pairs = [_write(tmp_path, "a", "x", BASE), _write(tmp_path, "old", "x", None)]
    with pytest.raises(records.DamagedRecords, match=r"old__x.parquet records no probe settings.*"
                                                     r"`crs probe --encoder old --dataset x --results"):
        records.check_same_settings(tmp_path, pairs)


def _full_records(**change) -> pl.DataFrame:
    row = {name: {"String": "s", "Int64": 1, "Float64": 0.5, "Boolean": True}[dtype]
           for name, (dtype, _) in records.COLUMNS.items()}
    return pl.DataFrame([{**row, **change}])


@pytest.mark.parametrize("lacks", ["digest", "generation", "column"])
def test_a_run_record_file_without_its_digest_generation_or_a_column_is_refused(tmp_path, lacks):
    """Removing crs:digest from a run-record file and editing its AUROCs changed the ranking with exit 0: a
    file without a digest was read unchecked. Now each thing a probe run records is required."""
    target = records.path(tmp_path, "a", "x")
    records.write_parquet(target, _full_records(), "g")
    meta = records.metadata(target)
    frame = pl.read_parquet(target)
    if lacks == "column":
        frame = frame.drop("tie_share")
    else:
        meta.pop(records.DIGEST if lacks == "digest" else records.GENERATION)
        frame = frame.with_columns(auroc=pl.lit(0.99))  # the edit the missing digest would have hidden
    frame.write_parquet(target, metadata=meta)
    missing = {"digest": records.DIGEST, "generation": records.GENERATION, "column": "tie_share"}[lacks]
    with pytest.raises(records.DamagedRecords, match=rf"a__x.parquet lacks {missing}.*`crs probe --encoder a "
                                                     r"--dataset x --results"):
        records.read(tmp_path)


def test_unreadable_provenance_is_refused_with_the_pairs_repair(tmp_path):
    frame = pl.DataFrame({"encoder": ["a"]})
    records.write_parquet(records.path(tmp_path, "a", "x"), frame, "g", {records.PROVENANCE: "{not json"})
    with pytest.raises(records.UserError, match=r"crs probe --encoder a --dataset x"):
        records.check_same_settings(tmp_path, [("a", "x")])
