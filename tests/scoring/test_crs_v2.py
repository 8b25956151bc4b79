"""CRS v2 (docs/crs-v2.md): a slow reference written from the page, continuity with the stated constant,
bounded amplification into q, and v1 left as it was."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from crs.scoring import crs as core

unit = st.floats(0.0, 1.0, allow_nan=False)


def slow_v2(x: np.ndarray, ref, weights=core.DEFAULT_WEIGHTS) -> np.ndarray:
    """CRS v2 [encoder] of x [encoder, dataset, axis], one number at a time, as docs/crs-v2.md writes it."""
    g, tau, delta, eps = core.Q_FLOOR, core.DOMINANCE_SCALE, core.DOMINANCE_SLACK, core.BALANCE_OFFSET
    n_e, n_d, n_a = x.shape
    q = np.zeros((n_e, n_a))
    for d in range(n_d):
        for a in range(n_a):
            r = float(np.median(x[:, d, a])) if ref == "median" else x[ref, d, a]
            for e in range(n_e):
                v = x[e, d, a]
                q[e, a] += ((v - r) / max(1 - r, g) if v >= r else (v - r) / max(r, g)) / n_d

    def sigma(e, f):
        m = [q[e, a] - q[f, a] for a in range(n_a)]
        return min(1.0, max(0.0, 1 + (min(m) + delta) / tau)) * min(1.0, max(0.0, max(m) / tau))

    out = np.empty(n_e)
    for e in range(n_e):
        dom = sum(sigma(e, f) - sigma(f, e) for f in range(n_e) if f != e) / (n_e - 1)
        bal = float(np.prod([(q[e, a] + 1) / 2 + eps for a in range(n_a)]) ** (1 / n_a)) - eps
        worst = (min(q[e]) + 1) / 2
        out[e] = 100 * (weights[0] * (dom + 1) / 2 + weights[1] * bal + weights[2] * worst)
    return out


@given(arrays(np.float64, (5, 2, 4), elements=unit), st.sampled_from(["median", 0, 3]))
@settings(max_examples=25, deadline=None)
def test_vectorised_v2_equals_the_slow_reference(x, ref):
    assert core.score(x, ref, version="2").crs == pytest.approx(slow_v2(x, ref), abs=1e-9)


def test_the_default_is_v2_and_other_versions_are_refused():
    x = np.random.default_rng(0).uniform(0.5, 1.0, (4, 2, 4))
    assert core.LATEST == "2"
    assert np.array_equal(core.score(x, 0).crs, core.score(x, 0, version="2").crs)
    with pytest.raises(core.BadInput, match="one of 1, 2"):
        core.score(x, 0, version="3")


@given(arrays(np.float64, (4, 3, 4), elements=unit), st.data())
@settings(max_examples=60, deadline=None)
def test_a_change_of_one_axis_value_moves_crs_by_at_most_the_stated_constant(x, data):
    """Property 6: |CRS(x') - CRS(x)| <= K |x' - x| for a change of one seed-mean value, any reference."""
    ref = data.draw(st.sampled_from(["median", 0, 2]))
    e, d, a = (data.draw(st.integers(0, n - 1)) for n in x.shape)
    delta = data.draw(st.floats(1e-7, 1e-2))
    moved = x.copy()
    moved[e, d, a] = np.clip(x[e, d, a] + data.draw(st.sampled_from([-1, 1])) * delta, 0, 1)
    step = abs(moved[e, d, a] - x[e, d, a])
    change = np.abs(core.score(moved, ref, version="2").crs - core.score(x, ref, version="2").crs).max()
    assert change <= core.lipschitz_bound(x.shape[1]) * step + 1e-9


def test_two_encoders_swapping_order_on_one_axis_move_crs_continuously():
    """v1 jumps by 100 w_dom / (2 (n - 1)) when a dominance appears; v2 moves by at most K times the change."""
    x = np.full((4, 1, 4), 0.8)
    x[0, 0] = [0.85, 0.85, 0.85, 0.85]
    x[1, 0] = [0.85, 0.85, 0.85, 0.85]  # 1 ties 0 everywhere
    x[2, 0] = [0.70, 0.90, 0.75, 0.80]
    x[3, 0] = [0.90, 0.70, 0.80, 0.75]
    for eps in (1e-6, 1e-4):
        ahead, behind = x.copy(), x.copy()
        ahead[1, 0, 0] += eps  # 1 now dominates 0
        behind[1, 0, 0] -= eps  # 0 now dominates 1
        v1 = np.abs(core.score(ahead, 3, version="1").crs - core.score(behind, 3, version="1").crs).max()
        v2 = np.abs(core.score(ahead, 3, version="2").crs - core.score(behind, 3, version="2").crs).max()
        assert v1 == pytest.approx(100 * core.DEFAULT_WEIGHTS[0] * 2 / (2 * 3), abs=0.01)  # a jump
        assert v2 <= core.lipschitz_bound(1) * 2 * eps + 1e-12


@given(arrays(np.float64, (5, 1, 4), elements=unit), st.data())
@settings(max_examples=40, deadline=None)
def test_no_axis_value_moves_q_by_more_than_its_bound(x, data):
    """Property 7: a value's change moves its own q by at most 1/g times it (3/g with the median moving)."""
    ref = data.draw(st.sampled_from(["median", 0]))
    e, a = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 3))
    delta = data.draw(st.floats(1e-6, 0.05))
    moved = x.copy()
    moved[e, 0, a] = min(x[e, 0, a] + delta, 1.0)
    step = moved[e, 0, a] - x[e, 0, a]
    dq = np.abs(core.q_scores_v2(moved, ref) - core.q_scores_v2(x, ref))
    bound = (3.0 if ref == "median" else 1.0) / core.Q_FLOOR
    assert dq.max() <= bound * step + 1e-12
    assert np.all(np.abs(core.q_scores_v2(x, ref)) <= 1.0 + 1e-12)


def test_v1_is_untouched_by_v2():
    """Spot values of v1 from its own page (docs/crs-v1.md section 2): q divides by 1 - x_ref, unfloored."""
    x = np.array([0.9, 0.6, 0.8, 1.0, 0.995]).reshape(5, 1, 1) * np.ones((5, 1, 4))
    q1 = core.q_scores(x, 4)[:, 0, 0]
    assert q1[3] == pytest.approx(1.0) and q1[0] == pytest.approx((0.9 - 0.995) / 0.995)
    q2 = core.q_scores_v2(x, 4)[:, 0, 0]
    assert q2[3] == pytest.approx(0.005 / core.Q_FLOOR)  # floored: v1 would say 1.0


def test_dominance_degree_hand_worked():
    tau, delta = core.DOMINANCE_SCALE, core.DOMINANCE_SLACK
    q = np.array([[0.0, 0.0, 0.0, 0.0], [tau / 2, 0.0, 0.0, 0.0], [tau + delta, tau, -delta - tau / 4, tau],
                  [tau + delta, -delta / 2, 0.0, 0.0]])
    s = core.dominance_degree(q)
    assert s[1, 0] == pytest.approx(0.5) and s[0, 1] == 0.0  # ahead by tau/2 on one axis, behind on none
    assert s[2, 0] == pytest.approx(0.75)  # ahead by tau, behind by delta + tau/4: (1 - 1/4) * 1
    assert s[0, 2] == pytest.approx(0.0)  # 0 is behind 2 by delta + tau on an axis: fully
    assert s[3, 0] == pytest.approx(1.0)  # ahead by tau, behind by only delta/2: the slack forgives it
    assert s[0, 3] == pytest.approx(0.0)  # 0 trails 3 by delta + tau on an axis: fully
    assert np.all(np.diag(s) == 0)
    assert core.dominance_degree(q, slack=0.0)[3, 0] == pytest.approx(1 - delta / 2 / tau)  # without it


def test_the_slack_keeps_dominance_strictly_rewarded():
    """Property 2 with the slack: e dominating e' by any margin gives sigma(e, e') > 0 = sigma(e', e), also where
    e' trails by less than the slack everywhere (it is ahead nowhere, so it gets nothing)."""
    for tiny in (1e-9, core.DOMINANCE_SLACK / 3):
        q = np.array([[tiny, tiny, tiny, tiny], [0.0, 0.0, 0.0, 0.0]])
        s = core.dominance_degree(q)
        assert s[0, 1] > 0.0 and s[1, 0] == 0.0
        assert core.score(np.full((2, 1, 4), 0.5) + np.array([tiny, 0.0])[:, None, None], 1).crs[0] > 50.0


def test_v2_outputs_name_their_constants():
    assert core.constants("2") == {"q_floor": core.Q_FLOOR, "dominance_scale": core.DOMINANCE_SCALE,
                                   "dominance_slack": core.DOMINANCE_SLACK, "balance_offset": core.BALANCE_OFFSET}
    assert core.constants("1") == {}


def test_the_constant_is_what_the_page_states():
    for n_d, w in itertools.product((1, 3), ((1 / 3, 1 / 3, 1 / 3), (1.0, 0.0, 0.0))):
        g, tau, eps = core.Q_FLOOR, core.DOMINANCE_SCALE, core.BALANCE_OFFSET
        per_q = w[0] * 10 / tau + w[1] * ((1 + eps) / eps) ** 0.75 * 3 / 8 + w[2] * 1.5
        assert core.lipschitz_bound(n_d, w) == pytest.approx(100 * per_q / (g * n_d))


def test_the_local_slope_is_the_hand_worked_derivative():
    """Worst axis alone, encoder 0 the reference, one dataset: CRS_1 = 50 (min_a q_1,a + 1) with q_1,0 =
    (x_1,0 - x_0,0) / (1 - x_0,0) its worst axis; d CRS_1 / d x_1,0 = 50 / 0.5 = 100 and d CRS_1 / d x_0,0 =
    50 (x_1,0 - 1) / (1 - x_0,0)^2 = -80, while the reference's own CRS stays 50: the slope is 100."""
    x = np.array([[[0.5, 0.5, 0.5, 0.5]], [[0.6, 0.7, 0.7, 0.7]]])
    assert core.local_slope(x, 0, (0.0, 0.0, 1.0), "2") == pytest.approx(100.0, rel=1e-6)


@given(arrays(np.float64, (4, 3, 4), elements=st.floats(0.3, 0.99)), st.sampled_from(["median", 1]))
@settings(max_examples=15, deadline=None)
def test_the_local_slope_stays_within_the_stated_constant(x, ref):
    assert 0.0 <= core.local_slope(x, ref) <= core.lipschitz_bound(x.shape[1]) + 1e-6
