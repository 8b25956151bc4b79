"""``crs score`` refuses a pair whose run records and stored probabilities come from different probe runs.

The probe defines one run (``crs.foundations.records.check_pair``, generation ids in every piece);
scoring hands it the attributes of every prediction array it may read, validation
included. The first test checks that hand-over with a stand-in for ``check_pair``; the
second uses the probe's own definition.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from crs.foundations import records as run_records
from crs.foundations.errors import UserError
from crs.scoring.options import ScoreOptions
from crs.scoring.run import score

CONDITIONS = ["clean", "gaussian_noise@1", "shift:d1_site2", "validation"]


def _setup(tmp_path, make_store):
    store, recs = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7}, seeds=(0, 1), n_test=20, n_val=15)
    return store, recs, tmp_path / "results"


def _restamp(store, encoder, condition, generation):
    probs, attrs = store.read_predictions("d1", encoder, condition)
    store.write_predictions("d1", encoder, condition, probs, {**attrs, "generation": generation})


def test_score_hands_every_prediction_array_of_a_pair_to_the_probe_check(tmp_path, make_store, monkeypatch,
                                                                         save_records):
    store, recs, results = _setup(tmp_path, make_store)
    save_records(results, recs)
    calls = []

    def check_pair(res, encoder, dataset, predictions=None):
        calls.append((res, encoder, dataset, sorted(predictions)))
        if len({a.get("generation") for a in predictions.values()}) > 1:
            raise UserError(f"{encoder} x {dataset} mixed")

    monkeypatch.setattr(run_records, "check_pair", check_pair, raising=False)
    for e in ("a", "b"):
        for c in CONDITIONS:
            _restamp(store, e, c, f"g-{e}")
    score(recs, ScoreOptions(bootstrap=5), store=store, results=results)
    assert calls == [(results, e, "d1", CONDITIONS) for e in ("a", "b")]
    _restamp(store, "b", "validation", "g-later")  # a probe stopped after its validation probabilities
    with pytest.raises(UserError, match="b x d1 mixed"):
        score(recs, ScoreOptions(bootstrap=5), store=store, results=results)
    score(recs, ScoreOptions(bootstrap=5), store=store)  # without the results folder nothing is checked (library use)


def test_score_refuses_validation_probabilities_of_another_probe_run(tmp_path, make_store):
    store, recs, results = _setup(tmp_path, make_store)
    settings = {run_records.PROVENANCE: json.dumps({"created": "2026-12-01", "settings": {"head": "linear"}})}
    for e in ("a", "b"):
        run_records.write_parquet(run_records.path(results, e, "d1"), recs.filter(pl.col("encoder") == e), f"g-{e}",
                                  settings)
        for c in CONDITIONS:
            _restamp(store, e, c, f"g-{e}")
    table = run_records.read(results)
    assert score(table, ScoreOptions(bootstrap=5), store=store, results=results).encoders.height == 2
    _restamp(store, "a", "validation", "g-new")
    with pytest.raises(UserError, match=r"a × d1.*predictions validation \(g-new\).*crs probe --encoder a"):
        score(table, ScoreOptions(bootstrap=5), store=store, results=results)
