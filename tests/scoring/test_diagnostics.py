"""Probe diagnostics beside the verdict: features left out, the largest scaled value, tied conditions, marks."""

import polars as pl

from crs.scoring import ScoreOptions, diagnostics, score, verdict


def _records():
    rows = []
    for cond, frac, tie in (("clean", 1.0, 0.0), ("clean", 0.5, 0.3), ("gaussian_noise@2", 1.0, 0.06),
                            ("shift:t", 1.0, 0.9)):
        rows.append({"encoder": "a", "dataset": "x", "seed": 0, "fraction": frac, "condition": cond,
                     "tie_share": tie, "features_left_out": 3, "max_scaled": 40.0 if cond == "shift:t" else 5.0})
    return pl.DataFrame(rows)


def test_each_axis_is_marked_only_by_the_conditions_it_reads():
    h = diagnostics.probe_health(_records()).row(0, named=True)
    assert (h["features_left_out"], h["max_scaled_clean"], h["max_scaled"], h["max_scaled_condition"]) == \
        (3, 5.0, 40.0, "shift:t")
    assert h["tied"] == "shift:t 90%, clean 30%, gaussian_noise@2 6%"  # above 5 %, worst first
    # clean at 0.5 feeds L only; the shift feeds R; clean at 1 (no ties) would have marked D, L and R
    assert h["marked"] == "L R"
    notes = diagnostics.notes(_records())
    assert len(notes) == 2 and "label efficiency (L)" in notes[0] and "clean on x (30%)" in notes[0]
    assert "robustness (R)" in notes[1] and "shift:t on x (90%)" in notes[1]


def test_old_run_records_without_the_columns_give_no_marks():
    old = _records().drop("tie_share", "max_scaled")
    h = diagnostics.probe_health(old).row(0, named=True)
    assert h["max_scaled"] is None and h["marked"] == "" and h["tied"] is None and diagnostics.notes(old) == []


def test_score_marks_the_axis_and_names_it_in_the_verdict(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6, "c": 0.3})
    records = records.with_columns(
        tie_share=pl.when((pl.col("encoder") == "b") & pl.col("condition").str.starts_with("shift:"))
        .then(0.45).otherwise(0.0), features_left_out=pl.lit(2), max_scaled=pl.lit(4.0))
    s = score(records, ScoreOptions(bootstrap_unit="seed", bootstrap=30), store=store)
    marks = dict(zip(s.encoders["encoder"], s.encoders["ties_marked"], strict=True))
    assert marks == {"a": "", "b": "R", "c": ""}
    assert any("b's robustness (R)" in n for n in s.verdict["notes"])
    assert any(x.startswith("Note: b's robustness") for x in verdict.sentences(s.verdict))
    doc = s.to_json()
    assert doc["shift_targets"] == {"d1": ["d1_site2"]}
    assert {r["encoder"] for r in doc["diagnostics"]} == {"a", "b", "c"}
    assert "diagnostics" in s.written_tables()
