"""``score`` end to end on tiny synthetic run records."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from crs.scoring import ScoreOptions, comparison_set, score, scoreset
from crs.scoring.axes import AXES

QUALITY = {"enc_a": 0.92, "enc_b": 0.85, "enc_c": 0.78}
ENCODER_COLUMNS = [
    "encoder", "auroc", "auroc_rank", "crs", "crs_rank", "reference", "crs_low", "crs_high",
    "crs_diff", "crs_diff_low", "crs_diff_high", "rank_low", "rank_high", "tie_group", "p_rank1", "tier",
    "discrimination", "calibration", "label_efficiency", "robustness",
    "q_discrimination", "q_calibration", "q_label_efficiency", "q_robustness",
    "dominance", "balance", "worst_axis",
    *[f"{a}_{end}" for a in AXES for end in ("low", "high")],
    *[f"q_{a}_{end}" for a in AXES for end in ("low", "high")],
    "pareto",
    "revision", "licence", "gated", "parameters", "gflops", "width", "images_per_s", "device",
    "revision_expected", "ties_marked",
]  # fmt: skip


@pytest.fixture
def records(make_records):
    return make_records(QUALITY)


@pytest.fixture
def scores(records):
    return score(records, ScoreOptions(bootstrap=200, seed=1, crs_version="1"))


def test_encoders_table(scores, records):
    enc = scores.encoders
    assert enc.columns == ENCODER_COLUMNS
    assert enc["encoder"].to_list() == ["enc_a", "enc_b", "enc_c"]  # CRS descending
    assert enc["crs"].is_sorted(descending=True)
    assert enc["tier"].to_list() == [True, False, False]
    assert enc["crs_rank"].to_list() == [1.0, 2.0, 3.0]
    clean = records.filter((pl.col("fraction") == 1.0) & (pl.col("condition") == "clean"))
    for r in enc.iter_rows(named=True):
        own = clean.filter(pl.col("encoder") == r["encoder"])
        # mean over datasets of the seed-mean D = the plain mean on this balanced grid
        assert r["auroc"] == pytest.approx(own["auroc"].mean())
        assert r["discrimination"] == pytest.approx(r["auroc"])
        assert r["calibration"] == pytest.approx(1 - own["ece"].mean())
        assert r["crs_low"] <= r["crs_high"] and r["rank_low"] <= r["rank_high"]
        for a in AXES:
            assert r[f"{a}_low"] <= r[f"{a}_high"]


def test_median_reference_scores_zero_on_each_dataset_and_axis(scores):
    # with three encoders the median is one of them: it scores q = 0 there
    for _, group in scores.per_dataset.group_by("dataset"):
        for a in AXES:
            assert (group[f"q_{a}"] == 0.0).sum() >= 1


def test_named_reference(records):
    s = score(records, ScoreOptions(reference="enc_c", bootstrap=20, crs_version="1"))
    c = s.encoders.filter(pl.col("encoder") == "enc_c").row(0, named=True)
    assert [c[f"q_{a}"] for a in AXES] == [0.0] * 4
    assert (c["balance"], c["worst_axis"]) == pytest.approx((0.5, 0.5))
    assert s.settings["reference"] == "enc_c"
    # the reference is the zero point of the scale: no CRS or q interval, its difference to the leader kept
    assert s.encoders["reference"].to_list() == [e == "enc_c" for e in s.encoders["encoder"]]
    assert c["crs_low"] is None and c["crs_high"] is None and c["q_robustness_low"] is None
    assert c["crs_diff_low"] <= c["crs_diff"] <= c["crs_diff_high"] < 0  # clearly behind the leader
    out = s.to_json()["encoders"]
    assert [e["crs_low"] is None for e in out] == [e["encoder"] == "enc_c" for e in out]
    assert s.encoders["tier"][0] and s.verdict["best_set"]["encoders"] == s.encoders.filter("tier")["encoder"].to_list()
    for r in s.encoders.iter_rows(named=True):
        assert r["tie_group"] in ("1st", "2nd", "3rd") or r["tie_group"].startswith("tied ")


def test_settings_and_json(scores, tmp_path):
    st = scores.settings
    assert st["crs_version"] == "1" and "crs_constants" not in st  # v1 has none: its page fixes everything
    assert st["reference"] == "median"
    assert st["weights"] == pytest.approx(
        {"dominance": 1 / 3, "balance": 1 / 3, "worst_axis": 1 / 3}
    )
    # the default unit is 'both'; without a store it falls back to seeds and says so
    assert st["bootstrap"] == {"n": 200, "unit": "seed", "seed": 1, "confidence": 0.95, "requested_unit": "both"}
    assert any("bootstrap unit 'both' needs the stored test probabilities" in w for w in st["warnings"])
    assert st["seeds"] == [0, 1, 2]
    assert st["fractions"] == [0.1, 0.5, 1.0]
    assert st["datasets"] == ["d1", "d2"]
    assert st["excluded"] == {"encoders": [], "datasets": []}
    out = scores.to_json()
    assert set(out) == {
        "generation", "tables", "provenance", "settings", "verdict", "rank_comparison", "encoders", "per_dataset",
        "pareto", "weight_sensitivity", "calibration_under_shift", "diagnostics", "shift_targets",
    }  # fmt: skip
    assert out["provenance"]["settings"] == out["settings"]
    assert {"crs_bench", "git_commit", "created", "python", "libraries"} <= set(out["provenance"])
    assert out["pareto"]["overall"] == ["enc_a"]  # enc_a is best on every axis here
    assert out["weight_sensitivity"][0]["encoder"] == "enc_a"
    assert out["weight_sensitivity"][0]["share"] == 1.0
    assert st["simplex_step"] == 0.05
    assert any("no store given" in w for w in st["warnings"])
    assert [r["encoder"] for r in out["encoders"]] == ["enc_a", "enc_b", "enc_c"]
    assert len(out["per_dataset"]) == 6
    assert set(scores.rank_comparison) == {
        "pairs", "discordant_pairs", "mean_abs_rank_shift", "kendall_tau_b", "reversed_pairs"
    }  # fmt: skip
    json.dumps(out, allow_nan=False)


def test_same_seed_same_scores(records):
    a = score(records, ScoreOptions(bootstrap=50, seed=4, crs_version="1"))
    b = score(records, ScoreOptions(bootstrap=50, seed=4, crs_version="1"))
    assert a.encoders.equals(b.encoders)
    assert a.generation != b.generation  # two runs are two sets, even with equal numbers
    same = [{**s.to_json(), "generation": None, "provenance": {**s.provenance, "created": None}} for s in (a, b)]
    assert same[0] == same[1]


def test_write(scores, tmp_path):
    out = tmp_path / "results"
    scores.write(out)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            f"{t}.{x}"
            for t in (
                "encoders", "per_dataset", "axes_by_seed", "pareto", "weight_sensitivity",
                "weight_leaders", "robustness", "label_efficiency", "calibration_under_shift", "rank_distribution",
                "diagnostics",
            )
            for x in ("parquet", "csv")
        ]
        + ["scores.json", "metric_table.parquet", "metric_table.csv"]
    )
    assert pl.read_parquet(out / "encoders.parquet").equals(scores.encoders)
    assert pl.read_csv(out / "per_dataset.csv").height == scores.per_dataset.height
    written = json.loads((out / "scores.json").read_text())
    assert written.pop("digest") == scoreset.doc_digest(written)  # of the rest of the document
    assert written.pop("tables") == sorted(n.removesuffix(".parquet") for n in names if n.endswith(".parquet"))
    assert written == {k: v for k, v in scores.to_json().items() if k != "tables"}
    scores.write(out)  # overwrites in place, leaves no temporary files or folders
    assert sorted(p.name for p in out.iterdir()) == names
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "results") == [".results.lock"]


def test_per_dataset_crs_is_that_dataset_alone(records):
    full = score(records, ScoreOptions(bootstrap=10, crs_version="1"))
    alone = score(records.filter(pl.col("dataset") == "d2"), ScoreOptions(bootstrap=10, crs_version="1"))
    per = full.per_dataset.filter(pl.col("dataset") == "d2").sort("encoder")
    one = alone.encoders.sort("encoder")
    assert per["crs"].to_numpy() == pytest.approx(one["crs"].to_numpy())
    for a in AXES:
        assert per[f"q_{a}"].to_numpy() == pytest.approx(one[f"q_{a}"].to_numpy())
    assert full.per_dataset.columns[:3] == ["encoder", "dataset", "n_seeds"]
    assert full.per_dataset.height == 6


def test_rank_comparison_reports_reversal(make_records, make_table):
    # enc_x has the best clean AUROC but collapses under every perturbation and label cut
    records = make_records(QUALITY)
    rows = records.to_dicts()
    for r in rows:
        if r["encoder"] == "enc_c":
            r["encoder"] = "enc_x"
            if r["condition"] == "clean" and r["fraction"] == 1.0:
                r["auroc"] = 0.95
            else:
                r["auroc"] = 0.55
    s = score(make_table(rows), ScoreOptions(bootstrap=20, crs_version="1"))
    rc = s.rank_comparison
    assert rc["pairs"] == 3
    assert ["enc_x", "enc_a"] in rc["reversed_pairs"]
    assert rc["discordant_pairs"] == len(rc["reversed_pairs"]) >= 1
    x = s.encoders.filter(pl.col("encoder") == "enc_x").row(0, named=True)
    assert x["auroc_rank"] == 1.0 and x["crs_rank"] > 1.0


def test_comparison_set_drops_and_reports(make_records):
    base = make_records(QUALITY)
    only_d1 = make_records({"enc_new": 0.9}, datasets=("d1",))
    few = make_records({"enc_a": 0.92, "enc_b": 0.85}, datasets=("d3",))
    records = pl.concat([base, only_d1, few])
    encoders, datasets, excluded = comparison_set(records)
    assert encoders == ["enc_a", "enc_b", "enc_c"]
    assert datasets == ["d1", "d2"]
    assert excluded == {"encoders": ["enc_new"], "datasets": ["d3"]}
    s = score(records, ScoreOptions(bootstrap=20, crs_version="1"))
    assert s.settings["excluded"] == excluded
    assert set(s.encoders["encoder"]) == {"enc_a", "enc_b", "enc_c"}
    assert set(s.axes_by_seed["dataset"]) == {"d1", "d2"}


def test_comparison_set_keeps_the_named_reference(make_records):
    records = pl.concat(
        [make_records({"enc_a": 0.9, "enc_b": 0.85, "enc_c": 0.8}, datasets=("d1", "d2")),
         make_records({"enc_ref": 0.8}, datasets=("d1",))]
    )  # fmt: skip
    assert comparison_set(records)[0] == ["enc_a", "enc_b", "enc_c"]
    encoders, datasets, excluded = comparison_set(records, "enc_ref")
    assert encoders == ["enc_a", "enc_b", "enc_c", "enc_ref"] and datasets == ["d1"]
    assert excluded == {"encoders": [], "datasets": ["d2"]}


def test_unknown_reference_lists_encoders(records):
    with pytest.raises(ValueError, match=r"'nope'.*\['enc_a', 'enc_b', 'enc_c'\]"):
        score(records, ScoreOptions(reference="nope", crs_version="1"))


@pytest.mark.parametrize("weights", [(0.5, 0.5, 0.5), (1.2, -0.1, -0.1), (1.0, 0.0)])
def test_bad_weights(records, weights):
    with pytest.raises(ValueError, match="weights"):
        score(records, ScoreOptions(weights=weights, crs_version="1"))


def test_weights_are_recorded(records):
    s = score(records, ScoreOptions(weights=(0.5, 0.25, 0.25), bootstrap=10, crs_version="1"))
    assert s.settings["weights"] == {"dominance": 0.5, "balance": 0.25, "worst_axis": 0.25}
    e = s.encoders.row(0, named=True)
    assert e["crs"] == pytest.approx(
        100 * (0.5 * e["dominance"] + 0.25 * e["balance"] + 0.25 * e["worst_axis"])
    )


def test_needs_two_encoders(make_records):
    with pytest.raises(ValueError, match="at least 2"):
        score(make_records({"enc_a": 0.9}), ScoreOptions(crs_version="1"))


def test_no_shared_dataset(make_records):
    records = pl.concat(
        [
            make_records({"enc_a": 0.9}, datasets=("d1",)),
            make_records({"enc_b": 0.8}, datasets=("d2",)),
        ]
    )
    with pytest.raises(ValueError, match="no dataset is shared"):
        score(records, ScoreOptions(crs_version="1"))


def test_missing_seed(records):
    holey = records.filter(
        ~((pl.col("encoder") == "enc_b") & (pl.col("dataset") == "d1") & (pl.col("seed") == 2))
    )
    with pytest.raises(ValueError, match=r"'enc_b' on dataset 'd1' lacks seed\(s\) \[2\]"):
        score(holey, ScoreOptions(crs_version="1"))


def test_bootstrap_must_be_positive(records):
    with pytest.raises(ValueError, match="bootstrap must be"):
        score(records, ScoreOptions(bootstrap=0, crs_version="1"))


def test_axes_by_seed_table(scores):
    assert scores.axes_by_seed.height == 3 * 2 * 3
    assert np.all(scores.axes_by_seed.select(AXES).to_numpy() >= 0.0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"reference": "nope"}, "not among the encoders"),
        ({"weights": (1.0, 1.0, 1.0)}, "sum to 1"),
        ({"bootstrap": 0}, "bootstrap"),
        ({"bootstrap_unit": "pixel"}, "bootstrap unit"),
        ({"simplex_step": 0.3}, "simplex step"),
        ({"crs_version": "3"}, "CRS version must be one of 1, 2"),
        ({"crs_version": "2"}, "CRS v2 reads its calibration axis from the stored test probabilities and no store"),
    ],
)
def test_bad_options_are_user_errors(records, options, message):
    from crs.foundations.errors import UserError

    options.setdefault("crs_version", "1")
    with pytest.raises(UserError, match=message):
        score(records, ScoreOptions(**{"bootstrap": 5, **options}))


def test_an_auroc_resting_on_ties_is_warned_and_old_records_are_not(records):
    from crs.scoring.caveats import tie_warnings

    assert tie_warnings(records) == []  # no tie_share column: records of an older probe
    share = (pl.when((pl.col("encoder") == "enc_b") & (pl.col("condition") == "shift:other") & (pl.col("seed") == 1))
             .then(0.75).otherwise(0.1))
    tied = records.with_columns(tie_share=share)
    s = score(tied, ScoreOptions(bootstrap=10, crs_version="1"))
    said = [w for w in s.settings["warnings"] if "tied" in w]
    assert [w.split(":")[0] for w in said] == ["enc_b on d1", "enc_b on d2"]  # one per (encoder, dataset)
    assert all("shift:other 75%" in w for w in said)
    assert s.to_json()["settings"]["warnings"] == s.settings["warnings"]  # scores.json carries them
    assert tie_warnings(tied.with_columns(tie_share=pl.lit(0.5))) == []  # at the limit: no warning


def test_an_axis_whose_replicates_sit_off_the_estimate_gets_a_note():
    from crs.scoring.axes import AXES
    from crs.scoring.caveats import shifted_axis_notes

    rng = np.random.default_rng(0)
    point = np.full((2, len(AXES)), 0.8)  # [encoder, axis]
    reps = point + rng.normal(0, 0.01, size=(400, 2, len(AXES)))  # centred on the estimate
    assert shifted_axis_notes(reps, point, ["a", "b"], version="1") == []
    c = AXES.index("calibration")
    reps[:, 1, c] -= 0.02  # b's replicates one width below its estimate, as a biased ECE puts them
    notes = shifted_axis_notes(reps, point, ["a", "b"], version="1")
    assert len(notes) == 1 and notes[0].startswith("the calibration intervals are off-centre")
    assert " b sit -" in notes[0] and "bootstrap-coverage" in notes[0]
    v2 = shifted_axis_notes(reps, point, ["a", "b"], version="2")  # v2's C is debiased and recentred: v2's cause
    assert len(v2) == 1 and v2[0].startswith("the calibration intervals are off-centre") and " b sit -" in v2[0]
    assert "unbiased estimate of the squared calibration error" in v2[0] and "binned ECE" not in v2[0]
    assert "population value" not in v2[0]
    assert "docs/" not in v2[0]  # a wheel user has no docs folder: the note says it in its own words


def test_a_calibration_estimate_above_1_is_explained_in_a_note():
    from crs.scoring.axes import AXES
    from crs.scoring.caveats import calibration_above_one_notes

    point = np.full((3, len(AXES)), 0.8)
    assert calibration_above_one_notes(point, ["a", "b", "c"], "2") == []
    point[[0, 2], AXES.index("calibration")] = [1.018, 1.0004]
    notes = calibration_above_one_notes(point, ["a", "b", "c"], "2")
    assert len(notes) == 1 and "a (1.018), c (1.000)" in notes[0] and "b (" not in notes[0]
    assert "no calibration error detectable" in notes[0]
    assert calibration_above_one_notes(point, ["a", "b", "c"], "1") == []  # v1's C never lies above 1
