"""``crs.records.check_same_settings``: the encoders compared on a dataset share one probe protocol."""

from __future__ import annotations

import json

import polars as pl
import pytest

from crs import records

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


def test_heads_datasets_and_unrecorded_files_are_not_compared(tmp_path):
    pairs = [_write(tmp_path, "a", "x", BASE), _write(tmp_path, "a+mlp", "x", {**BASE, "head": "mlp", "l2": [1e-4]}),
             _write(tmp_path, "a", "y", {**BASE, "seeds": [0]}), _write(tmp_path, "b", "y", {**BASE, "seeds": [0]}),
             _write(tmp_path, "old", "x", None)]
    records.check_same_settings(tmp_path, pairs)


def test_unreadable_provenance_is_refused_with_the_pairs_repair(tmp_path):
    frame = pl.DataFrame({"encoder": ["a"]})
    records.write_parquet(records.path(tmp_path, "a", "x"), frame, "g", {records.PROVENANCE: "{not json"})
    with pytest.raises(records.UserError, match=r"crs probe --encoder a --dataset x"):
        records.check_same_settings(tmp_path, [("a", "x")])
