"""Axis values from run records, against values worked out by hand (docs/crs-v1.md section 1)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.foundations.errors import UserError
from crs.scoring import axes as ax
from crs.scoring.axes import AXES, axes_by_seed, seed_means


def cells(encoder, dataset, seed, values, ece=0.0):
    """Rows from {(fraction, condition): auroc}; ece on the clean, full-label row."""
    return [
        {
            "encoder": encoder,
            "dataset": dataset,
            "seed": seed,
            "fraction": f,
            "condition": c,
            "auroc": a,
            "ece": ece,
        }
        for (f, c), a in values.items()
    ]


# d1 has a shift target, d2 has none. Retentions are worked out in the comments.
A_D1_S0 = {
    (1.0, "clean"): 0.9,  # D = 0.9, so retain(a) = (a - 0.5) / 0.4
    (0.1, "clean"): 0.7,  # 0.5
    (0.5, "clean"): 0.85,  # 0.875          -> L = 0.6875
    (1.0, "gaussian_noise@1"): 0.8,  # 0.75
    (1.0, "gaussian_noise@2"): 0.4,  # -0.25 -> 0 -> P = 0.375
    (1.0, "shift:other"): 0.95,  # 1.125 -> 1   -> S = 1, R = 0.6875
    (0.5, "gaussian_noise@1"): 0.1,  # ignored: perturbed below fraction 1
    (0.1, "shift:other"): 0.2,  # ignored
}
A_D1_S1 = {
    (1.0, "clean"): 0.7,  # D = 0.7, retain(a) = (a - 0.5) / 0.2
    (0.1, "clean"): 0.6,  # 0.5
    (0.5, "clean"): 0.65,  # 0.75           -> L = 0.625
    (1.0, "gaussian_noise@1"): 0.7,  # 1
    (1.0, "gaussian_noise@2"): 0.55,  # 0.25 -> P = 0.625
    (1.0, "shift:other"): 0.5,  # 0        -> S = 0, R = 0.3125
    (0.5, "gaussian_noise@1"): 0.9,
    (0.1, "shift:other"): 0.9,
}
B_D1_S0 = {  # D = 0.5: every retention is 0
    (1.0, "clean"): 0.5,
    (0.1, "clean"): 0.6,
    (0.5, "clean"): 0.7,
    (1.0, "gaussian_noise@1"): 0.8,
    (1.0, "gaussian_noise@2"): 0.9,
    (1.0, "shift:other"): 0.95,
    (0.5, "gaussian_noise@1"): 0.9,
    (0.1, "shift:other"): 0.9,
}
B_D1_S1 = {**B_D1_S0, (1.0, "clean"): 0.45}  # D < 0.5: retentions 0 as well
A_D2_S0 = {
    (1.0, "clean"): 0.8,  # D = 0.8, retain(a) = (a - 0.5) / 0.3
    (0.1, "clean"): 0.65,  # 0.5
    (0.5, "clean"): 0.8,  # 1               -> L = 0.75
    (1.0, "gaussian_noise@1"): 0.74,  # 0.8
    (1.0, "gaussian_noise@2"): 0.62,  # 0.4  -> P = 0.6 = R (no shift target)
}


@pytest.fixture
def hand(make_table):
    rows = (
        cells("a", "d1", 0, A_D1_S0, ece=0.1)
        + cells("a", "d1", 1, A_D1_S1, ece=0.25)
        + cells("b", "d1", 0, B_D1_S0, ece=0.3)
        + cells("b", "d1", 1, B_D1_S1, ece=0.2)
        + cells("a", "d2", 0, A_D2_S0, ece=0.0)
    )
    return make_table(rows)


def row(df, **keys):
    out = df.filter(*[pl.col(k) == v for k, v in keys.items()])
    assert out.height == 1
    return out.row(0, named=True)


def test_hand_worked_axes(hand):
    axes = axes_by_seed(hand)
    assert axes.height == 5
    r = row(axes, encoder="a", dataset="d1", seed=0)
    assert r["discrimination"] == pytest.approx(0.9)
    assert r["calibration"] == pytest.approx(0.9)
    assert r["label_efficiency"] == pytest.approx(0.6875)
    assert r["perturbation"] == pytest.approx(0.375)
    assert r["shift"] == pytest.approx(1.0)
    assert r["robustness"] == pytest.approx(0.6875)

    r = row(axes, encoder="a", dataset="d1", seed=1)
    assert (r["discrimination"], r["calibration"]) == pytest.approx((0.7, 0.75))
    assert r["label_efficiency"] == pytest.approx(0.625)
    assert r["perturbation"] == pytest.approx(0.625)
    assert r["shift"] == pytest.approx(0.0)
    assert r["robustness"] == pytest.approx(0.3125)

    for seed, d, c in ((0, 0.5, 0.7), (1, 0.45, 0.8)):
        r = row(axes, encoder="b", dataset="d1", seed=seed)
        assert (r["discrimination"], r["calibration"]) == pytest.approx((d, c))
        assert (r["label_efficiency"], r["robustness"]) == (0.0, 0.0)

    r = row(axes, encoder="a", dataset="d2", seed=0)
    assert (r["discrimination"], r["calibration"]) == pytest.approx((0.8, 1.0))
    assert r["label_efficiency"] == pytest.approx(0.75)
    assert r["perturbation"] == pytest.approx(0.6)
    assert r["shift"] is None
    assert r["robustness"] == pytest.approx(0.6)


def test_hand_worked_seed_means(hand):
    means = seed_means(axes_by_seed(hand))
    r = row(means, encoder="a", dataset="d1")
    assert [r[a] for a in AXES] == pytest.approx([0.8, 0.825, 0.65625, 0.5])
    assert r["n_seeds"] == 2
    r = row(means, encoder="b", dataset="d1")
    assert [r[a] for a in AXES] == pytest.approx([0.475, 0.75, 0.0, 0.0])


def test_fraction_one_within_tolerance(make_table):
    values = {**A_D2_S0}
    rows = cells("a", "d2", 0, values)
    rows[0]["fraction"] = 1.0 - 1e-12  # the clean, full-label row
    rows[3]["fraction"] = 1.0 + 1e-12  # gaussian_noise@1
    r = axes_by_seed(make_table(rows)).row(0, named=True)
    assert r["discrimination"] == pytest.approx(0.8)
    assert r["label_efficiency"] == pytest.approx(0.75)
    assert r["robustness"] == pytest.approx(0.6)


def test_row_order_does_not_matter(hand):
    a = axes_by_seed(hand)
    b = axes_by_seed(hand.sample(fraction=1.0, shuffle=True, seed=3))
    assert a.select("encoder", "dataset", "seed").equals(b.select("encoder", "dataset", "seed"))
    for col in AXES:
        assert a[col].to_list() == pytest.approx(b[col].to_list())


def test_several_perturbation_families_are_one_flat_mean(make_table):
    values = {**A_D2_S0, (1.0, "contrast@1"): 0.8}  # retain 1
    r = axes_by_seed(make_table(cells("a", "d2", 0, values))).row(0, named=True)
    assert r["robustness"] == pytest.approx((0.8 + 0.4 + 1.0) / 3)


def test_unknown_condition(make_table):
    rows = cells("a", "d2", 0, {**A_D2_S0, (1.0, "Bad Name"): 0.7})
    with pytest.raises(ValueError, match="Bad Name"):
        axes_by_seed(make_table(rows))


def test_duplicate_cell(make_table):
    rows = cells("a", "d2", 0, A_D2_S0)
    rows.append(dict(rows[1]))
    with pytest.raises(ValueError, match="more than one run record"):
        axes_by_seed(make_table(rows))


def test_run_missing_a_cell_others_have(make_table):
    partial = {k: v for k, v in A_D2_S0.items() if k != (1.0, "gaussian_noise@2")}
    rows = cells("a", "d2", 0, A_D2_S0) + cells("b", "d2", 0, partial)
    with pytest.raises(ValueError, match="b on d2 lacks gaussian_noise@2 ") as err:
        axes_by_seed(make_table(rows))
    assert "crs extract" in str(err.value) and "--fractions" not in str(err.value)  # probing again cannot make it


def test_run_missing_a_fraction_others_have_is_told_to_probe_again(make_table):
    partial = {k: v for k, v in A_D2_S0.items() if k != (0.1, "clean")}
    rows = cells("a", "d2", 0, A_D2_S0) + cells("b", "d2", 0, partial) + cells("b", "d2", 1, partial)
    with pytest.raises(ValueError, match=r"b on d2 lacks clean at fraction 0.1 \(seeds \[0, 1\]\)") as err:
        axes_by_seed(make_table(rows))
    assert "--fractions" in str(err.value) and "crs extract" not in str(err.value)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ((1.0, "clean"), "no clean row at fraction 1.0"),
        ((0.1, "clean"), None),  # 0.5 is still there
        ("all_low", "below 1"),
        ("all_perturbed", "robustness"),
    ],
)
def test_dataset_missing_what_an_axis_needs(make_table, drop, message):
    if drop == "all_low":
        values = {k: v for k, v in A_D2_S0.items() if k[0] == 1.0}
    elif drop == "all_perturbed":
        values = {k: v for k, v in A_D2_S0.items() if k[1] == "clean"}
    else:
        values = {k: v for k, v in A_D2_S0.items() if k != drop}
    records = make_table(cells("a", "d2", 0, values))
    if message is None:
        assert axes_by_seed(records).height == 1
    else:
        with pytest.raises(ValueError, match=message):
            axes_by_seed(records)


def test_fraction_out_of_range_and_nan_auroc(make_table):
    rows = cells("a", "d2", 0, A_D2_S0)
    rows[1]["fraction"] = 1.5
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        axes_by_seed(make_table(rows))
    rows = cells("a", "d2", 0, A_D2_S0)
    rows[2]["auroc"] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        axes_by_seed(make_table(rows))


def test_missing_column(hand):
    with pytest.raises(ValueError, match="ece"):
        axes_by_seed(hand.drop("ece"))


def test_two_shift_targets_average_and_shift_alone(make_table):
    values = {**A_D2_S0, (1.0, "shift:x"): 0.8, (1.0, "shift:y"): 0.65}  # retain 1, 0.5
    r = axes_by_seed(make_table(cells("a", "d2", 0, values))).row(0, named=True)
    assert r["shift"] == pytest.approx(0.75)
    assert r["robustness"] == pytest.approx((0.6 + 0.75) / 2)
    only_shift = {k: v for k, v in values.items() if "@" not in k[1]}
    r = axes_by_seed(make_table(cells("a", "d2", 0, only_shift))).row(0, named=True)
    assert r["perturbation"] is None
    assert r["robustness"] == pytest.approx(0.75)


def test_axes_is_the_registry_in_order_and_a_duplicate_is_refused():
    assert AXES == tuple(ax.REGISTRY) == ("discrimination", "calibration", "label_efficiency", "robustness")
    assert [a.symbol for a in ax.REGISTRY.values()] == ["D", "C", "L", "R"]
    first = ax.REGISTRY["calibration"]
    for clash in (first, ax.Axis("calibration", "Z", "", first.value, first.array),
                  ax.Axis("other", "C", "", first.value, first.array)):
        with pytest.raises(ValueError, match="already registered"):
            ax.register(clash)
    assert tuple(ax.REGISTRY) == AXES


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30))
def test_retain_expression_equals_retain_array(pairs):
    a, d = np.array(pairs).T
    frame = pl.DataFrame({"a": a, "d": d})
    got = frame.select(r=ax.retain(pl.col("a"), pl.col("d")))["r"].to_numpy()
    assert np.array_equal(got, ax.retain_array(a, d))


def test_bad_records_are_a_user_error(make_table):
    records = make_table(cells("a", "d2", 0, A_D2_S0)).with_columns(fraction=pl.lit(1.5))
    with pytest.raises(UserError, match="fraction must lie in"):
        axes_by_seed(records)
