"""Ranks, Kendall's tau-b and the AUROC-versus-CRS comparison (docs/crs-v1.md section 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import kendalltau, rankdata

from crs.scoring.ranks import compare, kendall_tau_b, rank_desc


def test_rank_desc_ties_average():
    assert rank_desc([3.0, 1.0, 3.0, 2.0]).tolist() == [1.5, 4.0, 1.5, 3.0]
    assert rank_desc([5.0, 5.0, 5.0]).tolist() == [2.0, 2.0, 2.0]


@given(st.lists(st.lists(st.integers(0, 4), min_size=5, max_size=5), min_size=1, max_size=4))
def test_rank_desc_matches_scipy_per_row(rows):
    v = np.array(rows, dtype=float)  # [replicate, encoder], small ints so ties are common
    got = rank_desc(v)
    for r in range(v.shape[0]):
        assert got[r].tolist() == rankdata(-v[r], method="average").tolist()


@given(
    st.integers(2, 9).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
        )
    )
)
def test_kendall_tau_b_matches_scipy_with_ties(ab):
    a, b = ab
    want = kendalltau(a, b).statistic  # tau-b is scipy's default variant
    got = kendall_tau_b(a, b)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want)


def test_kendall_tau_b_continuous():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=12), rng.normal(size=12)
    assert kendall_tau_b(a, b) == pytest.approx(kendalltau(a, b).statistic)


def test_compare_hand_worked():
    # AUROC order a > b > c > d; CRS order b > a > d > c
    out = compare(["a", "b", "c", "d"], [0.9, 0.8, 0.7, 0.6], [60.0, 70.0, 50.0, 55.0])
    # pairs: ab discordant, ac ad bc bd concordant, cd discordant
    assert out["pairs"] == 6
    assert out["discordant_pairs"] == 2
    assert out["reversed_pairs"] == [["a", "b"], ["c", "d"]]
    assert out["mean_abs_rank_shift"] == pytest.approx(1.0)  # every encoder moves one place
    assert out["kendall_tau_b"] == pytest.approx((4 - 2) / 6)


def test_compare_reversed_pairs_follow_auroc_order_whatever_the_input_order():
    out = compare(["d", "c", "b", "a"], [0.6, 0.7, 0.8, 0.9], [55.0, 50.0, 70.0, 60.0])
    assert out["reversed_pairs"] == [["a", "b"], ["c", "d"]]


def test_compare_ties_are_not_discordant():
    # a and b tie on AUROC; CRS separates them: a tie, not a reversal
    out = compare(["a", "b", "c"], [0.8, 0.8, 0.7], [55.0, 60.0, 50.0])
    # ab tied in AUROC; ac, bc concordant
    assert out["discordant_pairs"] == 0
    assert out["reversed_pairs"] == []
    # AUROC ranks 1.5 1.5 3, CRS ranks 2 1 3 -> (0.5 + 0.5 + 0) / 3
    assert out["mean_abs_rank_shift"] == pytest.approx(1 / 3)
    # n_c = 2, n_d = 0, n_0 = 3, one pair tied in AUROC: 2 / sqrt(2 * 3)
    assert out["kendall_tau_b"] == pytest.approx(2 / math.sqrt(6))


def test_compare_length_mismatch():
    with pytest.raises(ValueError, match="names"):
        compare(["a", "b"], [0.1, 0.2, 0.3], [1.0, 2.0])


def test_ordinal_english_suffixes():
    from crs.scoring.ranks import ordinal

    got = [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)]
    assert got == ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th",
                   "112th"]


def _slow_tie_group(lo, hi):
    """The places 1..n a replicate rank in [lo, hi] can be read as, by enumeration."""
    if lo != lo or hi != hi:
        return None
    places = [p for p in range(1, 20) if p - 1 < hi and p + 1 > lo]  # place p covers ranks (p-1, p+1)
    names = {1: "1st", 2: "2nd", 3: "3rd"}
    name = [names.get(p, f"{p}th") for p in places]
    return name[0] if len(places) == 1 else f"tied {name[0]}-{name[-1]}"


@given(st.integers(2, 18).flatmap(lambda hi2: st.tuples(st.integers(2, hi2), st.just(hi2))))
def test_tie_group_matches_enumeration(halves):
    from crs.scoring.ranks import tie_group

    lo, hi = halves[0] / 2, halves[1] / 2  # ranks are whole or halves (average ranks of ties)
    assert tie_group(lo, hi) == _slow_tie_group(lo, hi)


def test_tie_group_examples_and_no_interval():
    from crs.scoring.ranks import tie_group

    assert tie_group(1.0, 1.0) == "1st"
    assert tie_group(1.0, 2.0) == "tied 1st-2nd"
    assert tie_group(1.5, 1.5) == "tied 1st-2nd"  # every replicate ties two encoders for the top
    assert tie_group(2.0, 4.0) == "tied 2nd-4th"
    assert tie_group(float("nan"), float("nan")) is None
