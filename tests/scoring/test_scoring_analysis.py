"""Pareto sets, weight sensitivity and the seed-aggregated metric table."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from crs.scoring import analysis
from crs.scoring.crs import components

profiles = st.integers(2, 6).flatmap(
    lambda n: arrays(np.float64, (n, 4), elements=st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0]))
)


def slow_dominates(a, b):
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


@settings(max_examples=60, deadline=None)
@given(profiles)
def test_pareto_front_is_the_non_dominated_set(q):
    front = analysis.pareto_front(q)
    n = len(q)
    for i in range(n):
        dominated = any(slow_dominates(q[j], q[i]) for j in range(n) if j != i)
        assert front[i] == (not dominated)
    # every dominated encoder is dominated by a member of the front (dominance is transitive)
    dom = analysis.dominates(q)
    for i in np.flatnonzero(~front):
        assert dom[front, i].any()
    # with weight on dominance the CRS leader is never dominated (docs/crs-v1.md property 2)
    crs = components(q).crs
    assert front[int(np.argmax(crs))]


def test_pareto_table_scopes():
    q_dataset = np.array([[[0.5] * 4, [0.0] * 4], [[0.0] * 4, [0.1] * 4]])  # [encoder, dataset, axis]
    q = q_dataset.mean(axis=1)
    t = analysis.pareto_table(["a", "b"], ["d1", "d2"], q_dataset, q)
    got = {(r["scope"], r["encoder"]): r["pareto"] for r in t.iter_rows(named=True)}
    assert got == {
        ("d1", "a"): True, ("d1", "b"): False, ("d2", "a"): False, ("d2", "b"): True,
        ("overall", "a"): True, ("overall", "b"): False,
    }  # fmt: skip


def test_simplex_grid():
    w = analysis.simplex_grid(0.05)
    assert w.shape == (231, 3)  # C(22, 2) points with spacing 1/20
    assert np.allclose(w.sum(1), 1.0) and w.min() >= 0
    assert len({tuple(np.round(r, 9)) for r in w}) == 231
    with pytest.raises(ValueError, match="whole parts"):
        analysis.simplex_grid(0.3)


def test_weight_sensitivity_leaders():
    # a dominates on nothing but has the better worst axis; b the better dominance
    dom = np.array([0.2, 0.9, 0.5])
    bal = np.array([0.5, 0.5, 0.5])
    worst = np.array([0.9, 0.1, 0.5])
    grid, leaders = analysis.weight_sensitivity(["a", "b", "c"], dom, bal, worst)
    assert grid.height == 231
    assert leaders["share"].sum() == pytest.approx(1.0)
    assert leaders["points"].sum() == 231
    at = grid.filter(pl.col("w_dominance") == 1.0)
    assert at["leader"].item() == "b"
    at = grid.filter(pl.col("w_worst_axis") == 1.0)
    assert at["leader"].item() == "a"
    # each point's leader has the largest CRS there
    for r in grid.iter_rows(named=True):
        crs = 100 * (r["w_dominance"] * dom + r["w_balance"] * bal + r["w_worst_axis"] * worst)
        assert r["crs"] == pytest.approx(crs.max())
        assert r["margin"] == pytest.approx(np.sort(crs)[-1] - np.sort(crs)[-2])


def test_metric_table_mean_std_count(make_records):
    records = make_records({"a": 0.9, "b": 0.8}, seeds=(0, 1, 2))
    t = analysis.metric_table(records)
    keys = ["encoder", "dataset", "fraction", "condition"]
    cells = records.select(keys).unique().height
    assert t.height == cells * len(analysis.METRICS)
    row = t.filter(
        (pl.col("encoder") == "a") & (pl.col("dataset") == "d1") & (pl.col("fraction") == 1.0)
        & (pl.col("condition") == "clean") & (pl.col("metric") == "auroc")
    ).row(0, named=True)  # fmt: skip
    values = records.filter(
        (pl.col("encoder") == "a") & (pl.col("dataset") == "d1") & (pl.col("fraction") == 1.0)
        & (pl.col("condition") == "clean")
    )["auroc"].to_numpy()  # fmt: skip
    assert row["mean"] == pytest.approx(values.mean())
    assert row["std"] == pytest.approx(values.std(ddof=1))
    assert row["n_seeds"] == 3
    # NaN values are left out of the count
    nan = records.with_columns(auroc=pl.when(pl.col("seed") == 0).then(float("nan")).otherwise(pl.col("auroc")))
    assert set(analysis.metric_table(nan).filter(pl.col("metric") == "auroc")["n_seeds"]) == {2}


def test_label_efficiency_curve_and_robustness_detail(make_records):
    from crs.scoring.axes import used_rows
    from crs.scoring.bootstrap import draw_seeds

    records = make_records({"a": 0.9, "b": 0.8}, seeds=(0, 1, 2))
    used = used_rows(records)
    curve = analysis.label_efficiency_curve(used, draw_seeds(3, 200, 0), [0, 1, 2])
    assert curve.height == 2 * 2 * 3  # encoders x datasets x fractions
    assert (curve["auroc_low"] <= curve["auroc"] + 1e-12).all()
    assert (curve["auroc"] <= curve["auroc_high"] + 1e-12).all()
    rob = analysis.robustness_detail(used)
    assert set(rob["family"]) == {"gaussian_noise", "shift"}
    assert rob.filter(pl.col("family") == "shift")["severity"].null_count() == rob.filter(
        pl.col("family") == "shift"
    ).height
    assert ((rob["retention"] >= 0) & (rob["retention"] <= 1)).all()
