"""``score`` with stored probabilities: image and both bootstraps, probe metrics, fallbacks."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from crs.foundations.errors import BadInput
from crs.scoring import ScoreOptions, resample, score, verdict
from crs.scoring.axes import AXES, axes_by_seed, used_rows
from crs.scoring.comparison import Runs
from crs.scoring.predictions import image_bootstrap_axes, probe_metrics

QUALITY = {"a": 1.0, "b": 0.7, "c": 0.4}


@pytest.fixture
def built(make_store, tmp_path):
    return make_store(tmp_path / "s.zarr", QUALITY)


def test_unit_counts_give_the_run_record_axes(built, monkeypatch):  # v1: C is the run records' ECE
    store, records = built
    monkeypatch.setattr(resample, "image_counts", lambda n, b, rng: np.ones((n, b), dtype=np.int32))
    encoders, seeds = sorted(QUALITY), [0, 1, 2]
    x = image_bootstrap_axes(store, Runs(used_rows(records), encoders, ["d1"], seeds), 2, np.random.default_rng(0),
                             version="1")
    want = axes_by_seed(records)
    for e, enc in enumerate(encoders):
        for s in seeds:
            row = want.filter((pl.col("encoder") == enc) & (pl.col("seed") == s)).row(0, named=True)
            assert x[0, e, 0, s].tolist() == pytest.approx([row[a] for a in AXES])


@pytest.mark.parametrize("unit", ["image", "both"])
def test_image_bootstrap(built, unit):
    store, records = built
    s = score(records, ScoreOptions(bootstrap_unit=unit, bootstrap=40, seed=3), store=store)
    assert s.settings["bootstrap"]["unit"] == unit
    assert "requested_unit" not in s.settings["bootstrap"]
    enc = s.encoders
    assert (enc["crs_low"] <= enc["crs_high"]).all()
    assert enc["p_rank1"].sum() == pytest.approx(1.0)
    again = score(records, ScoreOptions(bootstrap_unit=unit, bootstrap=40, seed=3), store=store)
    assert again.encoders.equals(enc)  # seeded
    seed_only = score(records, ScoreOptions(bootstrap_unit="seed", bootstrap=40, seed=3), store=store)
    # the axes do not depend on the unit; the intervals do, and so do the estimates of q and CRS, but only through
    # the noise they take out of their scales (the bootstrap's variances, which the unit sets)
    axes = ["discrimination", "calibration", "label_efficiency", "robustness"]
    assert seed_only.encoders.select("encoder", *axes).equals(enc.select("encoder", *axes))
    for a in axes:
        assert seed_only.encoders[f"q_{a}"].to_list() == pytest.approx(enc[f"q_{a}"].to_list(), abs=0.05)
    assert seed_only.encoders["crs"].to_list() == pytest.approx(enc["crs"].to_list(), abs=1.0)
    assert seed_only.encoders["crs_low"].to_list() != enc["crs_low"].to_list()
    v1 = [score(records, ScoreOptions(bootstrap_unit=u, bootstrap=40, seed=3, crs_version="1"), store=store)
          for u in (unit, "seed")]
    assert v1[0].encoders["crs"].to_list() == v1[1].encoders["crs"].to_list()  # v1 takes nothing out


def test_image_draw_is_paired_across_encoders(make_store, tmp_path):
    # two encoders with the same probabilities get the same CRS in every replicate, so
    # their paired difference is exactly 0 and both are in the set for the best
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "c": 0.4}, rng_seed=5)
    for cond in ("clean", "gaussian_noise@1", "shift:d1_site2", "validation"):
        probs, attrs = store.read_predictions("d1", "a", cond)
        store.write_predictions("d1", "twin", cond, probs, attrs)
    records = pl.concat([records, records.filter(pl.col("encoder") == "a").with_columns(encoder=pl.lit("twin"))])
    s = score(records, ScoreOptions(bootstrap_unit="image", bootstrap=60), store=store)
    tier = dict(zip(s.encoders["encoder"], s.encoders["tier"], strict=True))
    assert tier["a"] and tier["twin"]
    row = {r["encoder"]: r for r in s.encoders.iter_rows(named=True)}
    assert row["a"]["crs_low"] == row["twin"]["crs_low"]
    assert row["a"]["crs_high"] == row["twin"]["crs_high"]
    lead, other = sorted(("a", "twin"), key=lambda e: -row[e]["crs_diff"])  # the leader's difference is 0
    assert row[lead]["crs_diff"] == 0 and row[other]["crs_diff"] == 0
    assert row[other]["crs_diff_low"] == row[other]["crs_diff_high"] == 0.0  # equal in every replicate


def test_falls_back_to_seeds_without_store(built):
    _, records = built
    s = score(records, ScoreOptions(bootstrap_unit="image", bootstrap=20, crs_version="1"))
    assert s.settings["bootstrap"]["unit"] == "seed"
    assert s.settings["bootstrap"]["requested_unit"] == "image"
    assert any("needs the stored test probabilities" in w for w in s.settings["warnings"])


def test_probabilities_missing_from_the_store_given_are_refused_not_resampled_around(built):
    """A store was given and lacks an encoder's probabilities: the score is refused (exit 2) under every unit
    that reads them and every CRS version, never turned into a seed bootstrap with a warning."""
    store, records = built
    extra = records.filter(pl.col("encoder") == "a").with_columns(encoder=pl.lit("ghost"))
    for unit, version in (("both", "1"), ("image", "1"), ("both", "2")):
        with pytest.raises(BadInput, match="ghost/d1/clean"):
            score(pl.concat([records, extra]), ScoreOptions(bootstrap_unit=unit, bootstrap=20, crs_version=version),
                  store=store)


def test_probe_metrics_and_temperature(built):
    store, records = built
    pm, rel, per_class, warnings = probe_metrics(store, records, sorted(QUALITY), ["d1"])
    assert warnings == []
    # per class at fraction 1: 3 encoders x 2 conditions x 3 seeds x 3 classes, macro mean = AUROC
    assert per_class.height == 3 * 2 * 3 * 3 and set(per_class["class_name"]) == {"c0", "c1", "c2"}
    macro = per_class.group_by("encoder", "condition", "seed").agg(pl.col("auroc").mean())
    check = macro.join(pm.filter(pl.col("fraction") == 1.0), on=["encoder", "condition", "seed"], suffix="_pm")
    assert check.height == macro.height
    assert check["auroc"].to_numpy() == pytest.approx(check["auroc_pm"].to_numpy())
    # clean rows at both fractions, the other two conditions at fraction 1
    assert pm.height == len(QUALITY) * 3 * (2 + 1 + 1)
    joined = pm.join(records, on=["encoder", "dataset", "seed", "fraction", "condition"], suffix="_rec")
    assert joined.height == pm.height
    assert joined["auroc"].to_numpy() == pytest.approx(joined["auroc_rec"].to_numpy())
    assert joined["ece"].to_numpy() == pytest.approx(joined["ece_rec"].to_numpy())
    # the fixture's probabilities are over-confident (by 2.5; 30 validation images each)
    assert (pm["temperature"] > 1.0).all() and pm["temperature"].median() > 1.5
    assert pm["nll_ts"].mean() < pm["nll"].mean() and pm["ece_ts"].mean() < pm["ece"].mean()
    assert pm["kappa_quadratic"].null_count() == 0  # the fixture's dataset is ordinal
    assert set(rel["condition"]) == {"clean", "shift:d1_site2"}
    assert set(rel["scaled"]) == {False, True}
    s = score(records, ScoreOptions(bootstrap=5), store=store)
    assert {"aurc", "ece_ts", "temperature", "balanced_accuracy"} <= set(s.metric_table["metric"])
    assert s.probe_metrics.height == pm.height


def test_missing_validation_probabilities_warn(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", QUALITY, validation=False)
    pm, _, _, warnings = probe_metrics(store, records, sorted(QUALITY), ["d1"])
    assert len(warnings) == 1 and "no validation probabilities for a/d1, b/d1, c/d1" in warnings[0]
    assert pm["temperature"].null_count() == pm.height
    assert pm["aurc"].null_count() == 0


def test_multilabel_store(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", QUALITY, task="multilabel", rng_seed=2)
    pm, rel, _, warnings = probe_metrics(store, records, sorted(QUALITY), ["d1"])
    assert warnings == []
    joined = pm.join(records, on=["encoder", "dataset", "seed", "fraction", "condition"], suffix="_rec")
    assert joined["auroc"].to_numpy() == pytest.approx(joined["auroc_rec"].to_numpy())
    assert joined["ece"].to_numpy() == pytest.approx(joined["ece_rec"].to_numpy())
    assert pm["kappa_quadratic"].null_count() == pm.height  # not ordinal
    assert (pm["temperature"] > 1.0).all()
    s = score(records, ScoreOptions(bootstrap_unit="image", bootstrap=30), store=store)
    # no fallback and no warning (an off-centre calibration interval, which a tiny test set may give, is a note)
    assert s.settings["bootstrap"]["unit"] == "image"
    assert s.settings["warnings"] == []
    assert all(n.startswith("the calibration intervals are off-centre") for n in s.settings["notes"])


def test_validation_rows_in_the_records_are_not_a_condition(built):
    _, records = built
    val = records.filter(pl.col("condition") == "clean").with_columns(condition=pl.lit("validation"))
    a = score(records, ScoreOptions(bootstrap=10, crs_version="1"))
    b = score(pl.concat([records, val]), ScoreOptions(bootstrap=10, crs_version="1"))
    assert a.encoders.equals(b.encoders)


def test_missing_predictions_are_a_user_error(built):
    from crs.foundations.errors import UserError
    from crs.scoring.predictions import Predictions

    store, _ = built
    with pytest.raises(UserError):
        Predictions(store, "d1", "no-such-encoder", "clean")


def test_bad_input_is_a_user_error_and_stale_probabilities_are_named(tmp_path, make_store):
    from crs.foundations.errors import BadInput, UserError
    from crs.scoring.run import score

    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.7}, seeds=(0, 1), n_test=12, n_val=10)
    bogus = records.with_columns(condition=pl.when(pl.col("condition") == "gaussian_noise@1")
                                 .then(pl.lit("noise-3")).otherwise(pl.col("condition")))
    with pytest.raises(BadInput, match="unknown condition 'noise-3'.*re-run `crs probe`"):
        score(bogus, ScoreOptions(bootstrap=5, crs_version="1"))
    # probabilities of another split size (a stale probe): named and refused, never a crash nor a seed bootstrap
    probs, attrs = store.read_predictions("d1", "b", "gaussian_noise@1")
    store.write_predictions("d1", "b", "gaussian_noise@1", probs[:, :, :-2], attrs)
    with pytest.raises(BadInput, match=r"b/d1/gaussian_noise@1 holds probabilities for 10 images.*re-run `crs probe"):
        score(records, ScoreOptions(bootstrap=5, bootstrap_unit="image"), store=store)
    store.write_predictions("d1", "b", "gaussian_noise@1", probs, attrs)
    # stored labels changed through zarr (valid bytes): not those committed, a damaged store, refused
    import zarr

    labels = zarr.open_group(str(tmp_path / "s.zarr"), mode="a")["datasets"]["d1"]["label"]
    labels[0] = 7
    with pytest.raises(UserError, match=r"dataset 'd1' \(label\).*not as committed.*crs store verify"):
        score(records, ScoreOptions(bootstrap=5), store=store)


def test_default_unit_is_both(built):
    store, records = built
    s = score(records, ScoreOptions(bootstrap=20), store=store)
    assert s.settings["bootstrap"]["unit"] == "both"
    assert "requested_unit" not in s.settings["bootstrap"]


class _Provenanced:
    """A store stand-in whose clean embeddings of 'a' carry the extraction's provenance (contract keys)."""

    def __init__(self, nested: bool):
        self.nested = nested

    def embedding_attrs(self, dataset, encoder, condition):
        if (dataset, encoder, condition) != ("d1", "a", "clean"):
            raise KeyError(f"{dataset}/{encoder}/{condition}")
        p = {
            "encoder_spec": {"name": "a", "licence": "apache-2.0", "gated": True, "width": 768},
            "revision": "main",
            "weights": {"source": "hf", "revision_requested": None, "revision_loaded": "abc123",
                        "weights_sha256": None},
            "cost": {"parameters": 86_000_000, "flops_per_image": 17_500_000_000, "width": 768, "input_size": 224,
                     "images_per_s": 410.5, "device": "cuda:0 NVIDIA H200"},
        }  # fmt: skip
        return {"provenance": p, "complete": True} if self.nested else {**p, "complete": True}


@pytest.mark.parametrize("nested", [True, False])
def test_encoder_metadata_from_the_clean_embeddings(nested):
    from crs.scoring.metadata import encoder_metadata

    got = {r["encoder"]: r for r in encoder_metadata(_Provenanced(nested), ["a", "b"], ["d1"]).iter_rows(named=True)}
    assert got["a"] == {"encoder": "a", "revision": "abc123", "licence": "apache-2.0", "gated": True,
                        "parameters": 86_000_000, "gflops": pytest.approx(17.5), "width": 768,
                        "images_per_s": 410.5, "device": "cuda:0 NVIDIA H200",
                        "revision_expected": None}  # fmt: skip  (the spec does not say whether it is pretrained)
    assert all(v is None for k, v in got["b"].items() if k != "encoder")  # none stored: nulls, no error


def test_encoder_metadata_revision_falls_back_to_the_weights_digest_then_the_requested_revision():
    from crs.scoring.metadata import _metadata_of

    assert _metadata_of({"weights": {"revision_loaded": None, "weights_sha256": "ff00"}})["revision"] == "sha256:ff00"
    assert _metadata_of({"revision": "v1.0", "weights": {}})["revision"] == "v1.0"  # a store older than "weights"
    assert _metadata_of({}) == dict.fromkeys(_metadata_of({}), None)
    odd = _metadata_of({"cost": {"parameters": "many", "width": True, "images_per_s": 3, "device": 0}})
    assert (odd["parameters"], odd["width"], odd["images_per_s"], odd["device"]) == (None, None, 3.0, None)
    # a hub encoder's pretrained weights have a revision to record; random or built-in ones have none
    expected = [_metadata_of({"encoder_spec": {"pretrained": p, "source": s}})["revision_expected"]
                for p, s in ((True, "hf"), (True, "timm"), (False, "timm"), (True, "builtin"))]
    assert expected == [True, True, False, False]


def test_scores_without_embeddings_in_the_store_have_null_metadata(built):
    store, records = built  # probabilities only, no embeddings
    enc = score(records, ScoreOptions(bootstrap_unit="seed", bootstrap=5), store=store).encoders
    assert enc.select("revision", "licence", "gated", "parameters", "gflops", "width", "images_per_s",
                      "device").null_count().row(0) == (enc.height,) * 8


def test_the_verdict_plans_how_to_settle_every_member_of_the_best_set(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.97, "c": 0.4}, rng_seed=5)
    s = score(records, ScoreOptions(bootstrap_unit="both", bootstrap=60, seed=1, min_difference=3.0), store=store)
    v = s.verdict
    assert s.settings["min_difference"] == 3.0
    best = s.encoders.filter("tier")["encoder"].to_list()
    assert v["best_set"]["encoders"] == best and v["best_set"]["confidence"] == 0.95
    assert [p["encoder"] for p in v["settle"]] == best[1:]
    for p in v["settle"]:
        assert p["min_difference"] == 3.0 and p["power"] == 0.8 and 0 <= p["current_power"] <= 1
        assert p["variance"]["seed"] >= 0 and p["variance"]["image"] >= 0
    assert v["settle"]  # b is close enough to a to stay in the set
    words = verdict.sentences(v)
    assert all(verdict.settle_words(p, v["leader"], 3) in words for p in v["settle"])
    # the seed bootstrap cannot split the variance: no plan, and the verdict says why
    seed_only = score(records, ScoreOptions(bootstrap_unit="seed", bootstrap=60, seed=1), store=store)
    assert seed_only.verdict["members"] and seed_only.verdict["settle"] == []
    assert verdict.NO_PLAN in seed_only.verdict["notes"]
