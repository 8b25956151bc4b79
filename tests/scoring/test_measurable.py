"""A dataset whose AUROC no probe can measure is flagged in the scores and decides no leader."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from crs.scoring import ScoreOptions, score
from crs.scoring.measurable import _counted, not_measurable, with_measurable, without_tier
from crs.scoring.verdict import build, sentences

QUALITY = {"enc_a": 0.92, "enc_b": 0.85, "enc_c": 0.78}
TRAIN, VAL, TEST = 0, 1, 2


def _store(path, d2_labels):
    """A store holding only the tables of d1 (two classes in every split) and d2 (``d2_labels``)."""
    from crs.store import DatasetTable, Store

    st = Store(str(path))
    for name, labels in (("d1", [0, 1, 0, 1, 0, 1, 0, 1]), ("d2", d2_labels)):
        ids = np.array([f"i{i}" for i in range(8)])
        st.write_dataset(DatasetTable(name=name, ids=ids, labels=np.array(labels), group=ids,
                                      split=np.array([TEST, TEST, VAL, VAL, TRAIN, TRAIN, TRAIN, TRAIN], np.int8),
                                      attrs={"task": "multiclass", "classes": [f"c{k}" for k in range(max(labels) + 1)],
                                             "ordinal": False}))
    return Store(str(path), mode="r")


def _scored(records):
    """Scores without a store (a store must hold the probe's predictions, which these tables-only stores do not):
    the flag is then applied as ``score`` applies it, from ``not_measurable`` of the store's tables."""
    return score(records, ScoreOptions(bootstrap=20, seed=1, crs_version="1", bootstrap_unit="seed"))


def test_a_dataset_no_probe_can_measure_is_flagged_and_names_no_leader(make_records, tmp_path):
    own = [0, 1, 2, 3, 4, 5, 6, 7]  # each image its own class: the test classes were never trained on
    flagged = not_measurable(_store(tmp_path / "s.zarr", own), ["d1", "d2"])
    assert [u["dataset"] for u in flagged] == ["d2"] and "discrimination" in flagged[0]["axes"]
    assert "AUROC is undefined" in flagged[0]["reason"], flagged
    s = _scored(make_records(QUALITY))
    measurable = dict(with_measurable(s.per_dataset, flagged).group_by("dataset").agg(pl.col("measurable").all())
                      .iter_rows())
    assert measurable == {"d1": True, "d2": False}
    v = build(s.encoders, settings={**s.settings, "not_measurable": flagged}, settle=[{"encoder": "enc_b"}])
    assert v["leader"] is None and v["best_set"] is None and v["settle"] == []
    said = " ".join(sentences(v))
    assert "not measurable: d2" in said and "highest CRS" not in said, said
    tier = without_tier(s.encoders.select("encoder", "tier"), flagged)["tier"]
    assert tier.null_count() == tier.len()  # no star in any table either
    assert without_tier(s.encoders, []).equals(s.encoders)


def test_measurable_datasets_are_not_flagged_and_the_leader_stands(make_records, tmp_path):
    assert not_measurable(_store(tmp_path / "s.zarr", [0, 1, 2, 0, 1, 2, 0, 1]), ["d1", "d2"]) == []
    s = _scored(make_records(QUALITY))
    assert s.settings["not_measurable"] == [] and s.per_dataset["measurable"].all()
    assert s.verdict["leader"] == "enc_a"


@pytest.mark.parametrize("labels, split, task, k, counted", [
    ([0, 1, 0, 1], [TRAIN, TRAIN, TEST, TEST], "multiclass", 2, 2),
    ([0, 1, 2, 3], [TRAIN, TRAIN, TEST, TEST], "multiclass", 4, 0),  # test classes never trained: none counts
    ([0, 1, 0, 0], [TRAIN, TRAIN, TEST, TEST], "multiclass", 2, 0),  # one class in test: no negative for it
    ([[1], [0], [1], [1]], [TRAIN, TRAIN, TEST, TEST], "multilabel", 1, 0),  # no negative test image
    ([[1], [0], [1], [0]], [TRAIN, TRAIN, TEST, TEST], "multilabel", 1, 1),
])
def test_counted_classes_by_hand(labels, split, task, k, counted):
    assert _counted(np.asarray(labels), np.asarray(split), task, k) == counted
