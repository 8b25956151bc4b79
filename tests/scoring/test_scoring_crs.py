"""q, the components and CRS: hand-worked values and the properties of docs/crs-v1.md sections 2-3."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from crs.scoring import crs as core

unit = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def axis_values(draw, min_encoders=2, max_encoders=6, max_datasets=3):
    """x [encoder, dataset, axis] in [0, 1]."""
    e = draw(st.integers(min_encoders, max_encoders))
    d = draw(st.integers(1, max_datasets))
    return draw(arrays(np.float64, (e, d, 4), elements=unit))


@st.composite
def weight_triples(draw, min_dom=0.0):
    raw = np.array([draw(st.floats(min_dom, 1.0)), draw(unit), draw(unit)])
    assume(raw.sum() > 1e-3)
    return tuple(raw / raw.sum())


@st.composite
def references(draw, n):
    return draw(st.one_of(st.just("median"), st.integers(0, n - 1)))


# -- q (section 2) ---------------------------------------------------------------------


def test_q_hand_worked():
    x = np.array([0.9, 0.6, 0.8, 1.0, 0.0]).reshape(5, 1, 1) * np.ones((5, 1, 4))
    q = core.q_scores(x, 2)[:, 0, 0]
    # above: (0.9 - 0.8) / 0.2; below: (0.6 - 0.8) / 0.8; the reference; perfect; zero
    assert q == pytest.approx([0.5, -0.25, 0.0, 1.0, -1.0])


def test_q_zero_denominator():
    x = np.array([1.0, 1.0, 0.5]).reshape(3, 1, 1) * np.ones((3, 1, 4))
    assert np.all(core.q_scores(x, 0)[:2] == 0.0)  # x_e = x_ref = 1: 0 / 0 -> 0
    x0 = np.array([0.0, 0.0, 0.5]).reshape(3, 1, 1) * np.ones((3, 1, 4))
    assert np.all(core.q_scores(x0, 0)[:2] == 0.0)


def test_median_reference_is_mean_of_middle_two():
    x = np.array([0.2, 0.8, 0.4, 0.6]).reshape(4, 1, 1) * np.ones((4, 1, 4))
    assert core.reference_values(x, "median") == pytest.approx(np.full((1, 4), 0.5))


def test_reference_errors():
    x = np.zeros((3, 1, 4))
    with pytest.raises(ValueError, match="mean"):
        core.reference_values(x, "mean")
    with pytest.raises(ValueError, match="out of range"):
        core.reference_values(x, 3)


@given(axis_values(), st.data())
def test_q_range_reference_and_perfect(x, data):
    ref = data.draw(st.integers(0, x.shape[0] - 1))
    q = core.q_scores(x, ref)
    assert np.all((q >= -1.0) & (q <= 1.0))
    assert np.all(q[ref] == 0.0)
    perfect = x.copy()
    perfect[0 if ref else 1] = 1.0
    qp = core.q_scores(perfect, ref)[0 if ref else 1]
    below = x[ref] < 1.0
    assert np.allclose(qp[below], 1.0)
    qm = core.q_scores(x, "median")
    assert np.all((qm >= -1.0) & (qm <= 1.0))


# -- components (section 3) ------------------------------------------------------------


def test_components_hand_worked():
    q = np.array(
        [
            [0.5, 0.5, 0.5, 0.5],  # beats the second; not the third (1.0 > 0.5 on axis 0)
            [0.0, 0.0, 0.0, 0.0],  # beats nobody, beaten by the first
            [1.0, 0.0, 0.0, -1.0],  # incomparable with both
        ]
    )
    dom = core.dominance(q)
    # dom = (wins - losses) / (n - 1): 1/2, -1/2, 0; Dom = (dom + 1) / 2
    assert dom == pytest.approx([(0.5 + 1) / 2, (-0.5 + 1) / 2, 0.5])
    assert core.balance(q) == pytest.approx([0.75, 0.5, 0.0])
    assert core.worst_axis(q) == pytest.approx([0.75, 0.5, 0.0])
    parts = core.components(q, (0.5, 0.25, 0.25), version="1")
    assert parts.crs == pytest.approx(
        100 * (0.5 * dom + 0.25 * parts.balance + 0.25 * parts.worst_axis)
    )


def test_dominance_tolerance():
    q = np.zeros((2, 4))
    q[0, 0] = 1e-10  # within 1e-9: a tie, not a win
    assert core.dominance(q) == pytest.approx([0.5, 0.5])
    q[0, 0] = 1e-8
    assert core.dominance(q) == pytest.approx([1.0, 0.0])


def test_dominance_needs_two_encoders():
    with pytest.raises(ValueError, match="at least 2"):
        core.dominance(np.zeros((1, 4)))


@pytest.mark.parametrize(
    "weights",
    [(0.5, 0.5, 0.5), (-0.1, 0.6, 0.5), (0.5, 0.5), (float("nan"), 0.5, 0.5), (0.2, 0.2, 0.2)],
)
def test_bad_weights(weights):
    with pytest.raises(ValueError, match="weights"):
        core.check_weights(weights)
    with pytest.raises(ValueError, match="weights"):
        core.score(np.full((2, 1, 4), 0.5), "median", weights)


def test_bad_weights_message_names_values():
    with pytest.raises(ValueError, match=r"0\.7"):
        core.check_weights((0.7, 0.7, 0.7))


@pytest.mark.parametrize("version", core.VERSIONS)
@given(axis_values(), st.data())
def test_property_1_reference_is_half(version, x, data):
    ref = data.draw(st.integers(0, x.shape[0] - 1))
    s = core.score(x, ref, version=version)
    assert s.balance[ref] == pytest.approx(0.5)
    assert s.worst_axis[ref] == pytest.approx(0.5)


@pytest.mark.parametrize("version", core.VERSIONS)
@given(
    arrays(np.float64, (5, 4), elements=st.floats(-1.0, 1.0)),
    st.data(),
    weight_triples(min_dom=0.01),
)
def test_property_2_dominance_means_higher_crs(version, q, data, weights):
    n = q.shape[0]
    e, e2 = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    k = data.draw(st.integers(0, 3))
    base = np.clip(q[e2], -1.0, 0.9)
    delta = np.array(data.draw(st.lists(st.floats(0.0, 0.1), min_size=4, max_size=4)))
    delta[k] = max(delta[k], 0.01)
    q = q.copy()
    q[e2], q[e] = base, base + delta  # e dominates e'
    crs = core.components(q, weights, version).crs
    assert crs[e] > crs[e2]


@pytest.mark.parametrize("version", core.VERSIONS)
@given(axis_values(), st.data(), weight_triples())
def test_property_3_raising_an_axis_never_lowers_crs(version, x, data, weights):
    e_n, d_n, _ = x.shape
    ref = data.draw(references(e_n))
    e = data.draw(st.integers(0, e_n - 1))
    d = data.draw(st.integers(0, d_n - 1))
    a = data.draw(st.integers(0, 3))
    t = data.draw(st.floats(0.0, 1.0))
    raised = x.copy()
    raised[e, d, a] = x[e, d, a] + t * (1.0 - x[e, d, a])
    before = core.score(x, ref, weights, version).crs[e]
    after = core.score(raised, ref, weights, version).crs[e]
    assert after >= before - 1e-9


@pytest.mark.parametrize("version", core.VERSIONS)
@given(axis_values(), st.data(), weight_triples())
def test_property_4_order_of_encoders_changes_nothing(version, x, data, weights):
    n = x.shape[0]
    ref = data.draw(references(n))
    perm = np.array(data.draw(st.permutations(range(n))))
    moved = ref if ref == "median" else int(np.flatnonzero(perm == ref)[0])
    a = core.score(x, ref, weights, version)
    b = core.score(x[perm], moved, weights, version)
    assert b.crs == pytest.approx(a.crs[perm])
    assert b.q == pytest.approx(a.q[perm])


@pytest.mark.parametrize("version", core.VERSIONS)
@given(axis_values(), st.data(), weight_triples())
def test_property_5_crs_in_0_100(version, x, data, weights):
    s = core.score(x, data.draw(references(x.shape[0])), weights, version)
    assert np.all((s.crs >= 0.0) & (s.crs <= 100.0))
    for part in (s.dominance, s.balance, s.worst_axis):
        assert np.all((part >= 0.0) & (part <= 1.0))


@given(arrays(np.float64, (4, 3, 2, 4), elements=unit), st.sampled_from(["median", 1]))
@settings(max_examples=25)
def test_leading_replicate_axis_equals_loop(xb, ref):
    batched = core.score(xb, ref)
    for b in range(xb.shape[0]):
        one = core.score(xb[b], ref)
        for got, want in zip(batched, one, strict=True):
            assert got[b] == pytest.approx(want)
