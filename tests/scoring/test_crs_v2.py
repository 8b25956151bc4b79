"""CRS v2 (docs/crs-v2.md): a slow reference written from the page, continuity with the stated constant,
bounded amplification into q, and v1 left as it was."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.integrate import quad
from scipy.optimize import brentq

from crs.foundations.errors import BadInput
from crs.scoring import crs as core
from crs.scoring.versions import v2

unit = st.floats(0.0, 1.0, allow_nan=False)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _expected_min(mu, sd) -> float:
    """E min_a (mu_a + sd_a Z_a) by adaptive quadrature: lo + int_lo^hi P(min > t) dt, lo and hi 12 sd out."""

    def above(t):
        return float(np.prod([1.0 - _phi((t - m) / s) for m, s in zip(mu, sd, strict=True)]))
    lo, hi = min(mu) - 12 * max(sd), max(mu) + 12 * max(sd)
    return lo + quad(above, lo, hi, epsabs=1e-12, epsrel=1e-12, limit=200)[0]


def slow_v2(x: np.ndarray, ref, weights=core.DEFAULT_WEIGHTS, noise=None) -> np.ndarray:
    """CRS v2 [encoder] of x [encoder, dataset, axis], one number at a time, as docs/crs-v2.md writes it (with
    ``noise``: an estimate, those variances taken out of the scales)."""
    s, s_w, s_0, eps = core.DOMINANCE_SCALE, core.WORST_SCALE, core.NOISE_FLOOR, core.BALANCE_OFFSET
    n_e, n_d, n_a = x.shape

    def scale(base, var):
        return base if noise is None else math.sqrt(max(base**2 - var, s_0**2))

    q = np.zeros((n_e, n_a))
    for d in range(n_d):
        for a in range(n_a):
            if ref == "median":
                var = np.zeros(n_e) if noise is None else noise.x[:, d, a]
                r = _slow_median(x[:, d, a], [scale(core.REFERENCE_SCALE, v) for v in var])
            else:
                r = x[ref, d, a]
            for e in range(n_e):
                t = scale(core.KINK_SCALE, 0 if noise is None else noise.d[e, d, a])
                q[e, a] += _slow_q(x[e, d, a], r, t) / n_d

    def sigma(e, f):
        return math.prod(_phi((q[e, a] - q[f, a]) / scale(s, 0 if noise is None else noise.margin[e, f, a]))
                         for a in range(n_a))

    out = np.empty(n_e)
    zero = _expected_min([0.0] * n_a, [s_w] * n_a)
    for e in range(n_e):
        dom = sum(sigma(e, f) - sigma(f, e) for f in range(n_e) if f != e) / (n_e - 1)
        bal = float(np.prod([(q[e, a] + 1) / 2 + eps for a in range(n_a)]) ** (1 / n_a)) - eps
        sd = [scale(s_w, 0 if noise is None else noise.q[e, a]) for a in range(n_a)]
        worst = min(1.0, max(0.0, (_expected_min(list(q[e]), sd) - zero + 1) / 2))
        out[e] = 100 * (weights[0] * (dom + 1) / 2 + weights[1] * bal + weights[2] * worst)
    return out


def _slow_median(values, scales) -> float:
    """The median reference (docs/crs-v2.md section 2): the r where the encoders' values, each spread by its
    Gaussian, have half their mass below, by Brent's method."""
    def below(r):  # mean Phi((r - v) / t) - 1/2, as half the count on each side less the tails beyond r
        z = [(r - v) / t for v, t in zip(values, scales, strict=True)]
        tails = sum(math.copysign(0.5 * math.erfc(abs(u) / math.sqrt(2)), -u) for u in z if u)
        return (sum(math.copysign(0.5, u) for u in z if u) + tails) / len(values)
    return brentq(below, min(values) - 10 * max(scales), max(values) + 10 * max(scales), xtol=1e-14, rtol=1e-15)


def _slow_q(v: float, r: float, t: float) -> float:
    """q of one value v against the reference r (docs/crs-v2.md section 2): slope b below r and a above it, the
    ramp (a - b) (v - r)+ averaged over N(0, t^2) by adaptive quadrature, less its value at v = r under s_q."""
    g, s_q = core.Q_FLOOR, core.KINK_SCALE
    a, b = 1 / max(1 - r, g), 1 / max(r, g)

    def ramp(scale: float) -> float:
        dens = lambda z: max(v - r + scale * z, 0.0) * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
        return quad(dens, -12, 12, epsabs=1e-13, epsrel=1e-13, limit=200, points=[-(v - r) / scale])[0]

    at_ref = s_q / math.sqrt(2 * math.pi)
    return min(1.0, max(-1.0, b * (v - r) + (a - b) * (ramp(t) - at_ref)))


@given(arrays(np.float64, (5, 2, 4), elements=unit), st.sampled_from(["median", 0, 3]))
@settings(max_examples=25, deadline=None)
def test_vectorised_v2_equals_the_slow_reference(x, ref):
    assert core.score(x, ref, version="2").crs == pytest.approx(slow_v2(x, ref), abs=1e-7)


@given(arrays(np.float64, (4, 2, 4), elements=unit), st.sampled_from(["median", 0]), st.floats(0.0, 0.04))
@settings(max_examples=15, deadline=None)
def test_the_estimate_equals_the_slow_reference(x, ref, spread):
    """The estimate's scales, sqrt(max(s^2 - v, s_0^2)), as the page writes them, for variances small and
    large enough to hit the floor."""
    rng = np.random.default_rng(int(spread * 1e6))
    v_q = rng.uniform(0, spread, (4, 4))
    noise = core.Noise(v_q[:, None, :] + v_q[None, :, :], v_q, rng.uniform(0, spread / 8, (4, 2, 4)),
                       rng.uniform(0, spread / 8, (4, 2, 4)))
    got = core.score(x, ref, version="2", noise=noise).crs
    assert got == pytest.approx(slow_v2(x, ref, noise=noise), abs=1e-7)


def test_the_default_is_v2_and_other_versions_are_refused():
    x = np.random.default_rng(0).uniform(0.5, 1.0, (4, 2, 4))
    assert core.LATEST == "2"
    assert np.array_equal(core.score(x, 0).crs, core.score(x, 0, version="2").crs)
    with pytest.raises(BadInput, match="one of 1, 2"):
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
    """Property 7: a value's change moves its own q by at most 1/g times it (1/g + the reference slope with the
    median moving)."""
    ref = data.draw(st.sampled_from(["median", 0]))
    e, a = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 3))
    delta = data.draw(st.floats(1e-6, 0.05))
    moved = x.copy()
    moved[e, 0, a] = min(x[e, 0, a] + delta, 1.0)
    step = moved[e, 0, a] - x[e, 0, a]
    dq = np.abs(core.q_scores_v2(moved, ref) - core.q_scores_v2(x, ref))
    bound = 1.0 / core.Q_FLOOR + (v2.reference_slope() if ref == "median" else 0.0)
    assert dq.max() <= bound * step + 1e-12
    assert np.all(np.abs(core.q_scores_v2(x, ref)) <= 1.0 + 1e-12)


def test_v1_is_untouched_by_v2():
    """Spot values of v1 from its own page (docs/crs-v1.md section 2): q divides by 1 - x_ref, unfloored."""
    x = np.array([0.9, 0.6, 0.8, 1.0, 0.995]).reshape(5, 1, 1) * np.ones((5, 1, 4))
    q1 = core.q_scores(x, 4)[:, 0, 0]
    assert q1[3] == pytest.approx(1.0) and q1[0] == pytest.approx((0.9 - 0.995) / 0.995)
    q2 = core.q_scores_v2(x, 4)[:, 0, 0]
    assert q2[3] == pytest.approx(_slow_q(1.0, 0.995, core.KINK_SCALE))  # floored: v1 would say 1.0
    assert q2[3] < 0.005 / core.Q_FLOOR


def test_dominance_degree_hand_worked():
    sc = core.DOMINANCE_SCALE
    q = np.array([[0.0, 0.0, 0.0, 0.0], [sc, sc, sc, sc], [sc, -sc, 0.0, 0.0], [5 * sc, 0.0, 0.0, 0.0]])
    s = core.dominance_degree(q)
    half, one = 0.5, _phi(1.0)
    assert s[1, 0] == pytest.approx(one**4) and s[0, 1] == pytest.approx((1 - one) ** 4)  # ahead by s everywhere
    assert s[2, 0] == pytest.approx(one * (1 - one) * half**2) == pytest.approx(s[0, 2])  # a trade: symmetric
    assert s[3, 0] == pytest.approx(_phi(5.0) * half**3)  # far ahead on one axis, level on three
    assert np.all(np.diag(s) == 0)


def test_dominance_is_strictly_rewarded_at_any_margin():
    """Property 2: e dominating e' by any margin gives sigma(e, e') > sigma(e', e), and a higher CRS."""
    for tiny in (1e-9, 1e-4, 0.05):
        q = np.array([[tiny, 0.0, tiny, 0.0], [0.0, 0.0, 0.0, 0.0]])
        s = core.dominance_degree(q)
        assert s[0, 1] > s[1, 0]
        assert core.score(np.full((2, 1, 4), 0.5) + np.array([tiny, 0.0])[:, None, None], 1).crs[0] > 50.0


def _noisy_field(rng, truth, sd, n):
    """n estimates of q [estimate, encoder, axis]: the truth plus independent Gaussian noise of sd per value."""
    return truth + sd * rng.standard_normal((n, *truth.shape))


def test_the_estimate_is_unbiased_for_the_definition_under_gaussian_noise():
    """The reason for the estimate (docs/crs-v2.md section 3): with q measured as truth + N(0, v), the mean point
    estimate of Dom and Worst equals the definition's value of the truth (to Monte Carlo error), where the
    definition applied to the noisy q is pulled towards the middle: the leader down, the last up."""
    rng = np.random.default_rng(3)
    truth = np.array([[0.10, 0.06, 0.08, 0.05], [0.04, 0.09, 0.03, 0.07], [0.0, 0.0, 0.0, 0.0],
                      [-0.05, -0.02, -0.08, -0.01]])
    sd = 0.04
    q_hat = _noisy_field(rng, truth, sd, 4000)
    noise = core.Noise(np.full((4, 4, 4), 2 * sd**2), np.full((4, 4), sd**2))
    want = core.components(truth).crs
    plain = core.components(q_hat).crs.mean(axis=0)
    fixed = core.components(q_hat, noise=noise).crs
    error = fixed.std(axis=0) / math.sqrt(fixed.shape[0])
    assert np.all(np.abs(fixed.mean(axis=0) - want) < 4 * error + 1e-3)
    assert plain[0] < want[0] - 10 * error[0]  # without it the leader is understated


def test_a_replicate_is_centred_on_the_point_estimate():
    """A bootstrap replicate is one more draw of noise around the estimate: scored with both noises out (the
    point's own and the replicate's), its mean over that draw is the point estimate, so percentile intervals are
    not shifted by the smoothing."""
    rng = np.random.default_rng(4)
    point = np.array([[0.10, 0.06, 0.08, 0.05], [0.04, 0.09, 0.03, 0.07], [0.0, 0.0, 0.0, 0.0]])
    sd = 0.03
    noise = core.Noise(np.full((3, 3, 4), 2 * sd**2), np.full((3, 4), sd**2))
    reps = core.components(_noisy_field(rng, point, sd, 4000), noise=core.add(noise, noise)).crs
    want = core.components(point, noise=noise).crs
    error = reps.std(axis=0) / math.sqrt(reps.shape[0])
    assert np.all(np.abs(reps.mean(axis=0) - want) < 4 * error + 1e-3)


def test_q_estimated_from_noisy_values_is_unbiased_at_the_kink():
    """docs/crs-v2.md section 2: q's slope changes at the reference (1/g above a reference of 0.85, 1/0.85 below),
    so q of a noisy value near the reference has a mean above q of the truth; with the noise's variance taken out
    of the kink's scale, the mean is q of the truth (to Monte Carlo error)."""
    rng = np.random.default_rng(6)
    sd, draws = 0.04, 200_000
    truth = np.array([0.83, 0.85, 0.86, 0.88]).reshape(4, 1, 1)
    x = np.concatenate([np.full((1, 1, 1), 0.85), truth])  # encoder 0: the reference, without noise
    noisy = np.broadcast_to(x, (draws, 5, 1, 1)).copy()
    noisy[:, 1:] += sd * rng.standard_normal((draws, 4, 1, 1))
    want = core.q_scores_v2(x, 0)[1:, 0, 0]
    plain = core.q_scores_v2(noisy, 0)[:, 1:, 0, 0]
    fixed = core.q_scores_v2(noisy, 0, noise=np.full((5, 1, 1), sd**2))[:, 1:, 0, 0]
    error = fixed.std(axis=0) / math.sqrt(draws)
    assert np.all(np.abs(fixed.mean(axis=0) - want) < 4 * error)
    assert np.all(plain.mean(axis=0) > want + 10 * error)  # without it: pulled up at the kink


def test_the_reference_noise_is_the_variance_of_the_distance_to_the_reference():
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.0, (200, 5, 2, 4))
    d = x - np.median(x, axis=1, keepdims=True)
    assert core.reference_noise(x, "median") == pytest.approx(d.var(axis=0), abs=1e-12)
    x[3, 1, 0, 2] = np.nan  # a replicate without a value is left out of that cell
    d = x[:, 1, 0, 2] - x[:, 0, 0, 2]
    assert core.reference_noise(x, 0)[1, 0, 2] == pytest.approx(np.nanvar(d), abs=1e-12)


def test_the_noise_of_replicates_is_their_variance():
    rng = np.random.default_rng(5)
    q = rng.normal(size=(300, 2, 5, 4))
    n = core.noise_of(q)
    margins = q[..., :, None, :] - q[..., None, :, :]
    assert n.margin == pytest.approx(margins.var(axis=0), abs=1e-12)
    assert n.q == pytest.approx(q.var(axis=0), abs=1e-12)
    q[7, 1, 2, 3] = np.nan  # a replicate without a value is left out of that cell
    assert core.noise_of(q).q[1, 2, 3] == pytest.approx(np.nanvar(q[:, 1, 2, 3]), abs=1e-12)


def test_v2_outputs_name_their_constants():
    assert core.constants("2") == {"q_floor": core.Q_FLOOR, "dominance_scale": core.DOMINANCE_SCALE,
                                   "worst_scale": core.WORST_SCALE, "kink_scale": core.KINK_SCALE,
                                   "reference_scale": core.REFERENCE_SCALE, "noise_floor": core.NOISE_FLOOR,
                                   "balance_offset": core.BALANCE_OFFSET,
                                   "calibration_scale": core.CALIBRATION_SCALE}
    assert core.constants("1") == {}


def test_the_constant_is_what_the_page_states():
    for n_d, w in itertools.product((1, 3), ((1 / 3, 1 / 3, 1 / 3), (1.0, 0.0, 0.0))):
        g, s_0, eps, s_q = core.Q_FLOOR, core.NOISE_FLOOR, core.BALANCE_OFFSET, core.KINK_SCALE
        own, mu = 1 / g, 2 / g + 2 * s_q / (math.sqrt(2 * math.pi) * g**2)
        per = (w[0] * (own + 2 * mu) / (math.sqrt(2 * math.pi) * s_0)
               + w[1] * ((1 + eps) / eps) ** 0.75 * (own + mu) / 8 + w[2] * (own + mu) / 2)
        assert core.lipschitz_bound(n_d, w) == pytest.approx(100 * per / n_d)


def test_the_local_slope_is_the_hand_worked_derivative():
    """Worst axis alone, encoder 0 the reference, one dataset: q_1 = (0.2, 0.9, 0.9, 0.9), its first axis lower
    than the others by 8.75 s_w, so the smoothed minimum is that axis's q (to 1e-15) and CRS_1 = 50 (q_1,0 + 1)
    with q_1,0 = (x_1,0 - x_0,0) / (1 - x_0,0); d CRS_1 / d x_1,0 = 50 / 0.5 = 100 and d CRS_1 / d x_0,0 =
    50 (x_1,0 - 1) / (1 - x_0,0)^2 = -80, while the reference's own CRS stays 50: the slope is 100."""
    x = np.array([[[0.5, 0.5, 0.5, 0.5]], [[0.6, 0.95, 0.95, 0.95]]])
    assert core.local_slope(x, 0, (0.0, 0.0, 1.0), "2") == pytest.approx(100.0, rel=1e-6)


@given(arrays(np.float64, (4, 3, 4), elements=st.floats(0.3, 0.99)), st.sampled_from(["median", 1]))
@settings(max_examples=15, deadline=None)
def test_the_local_slope_stays_within_the_stated_constant(x, ref):
    assert 0.0 <= core.local_slope(x, ref) <= core.lipschitz_bound(x.shape[1]) + 1e-6


@given(arrays(np.float64, (7, 2, 3), elements=unit), st.integers(0, 41), st.floats(-0.2, 0.2))
@settings(max_examples=40, deadline=None)
def test_the_median_reference_moves_by_at_most_the_change_of_one_value(x, cell, delta):
    """docs/crs-v2.md section 4 bounds the reference's move by the change of one x_e (the slope mu rests on it);
    the smoothed median keeps that, and solves its equation to 1e-12."""
    r = v2.smoothed_median(x)
    z = (r[None] - x) / v2.REFERENCE_SCALE
    assert np.abs(np.vectorize(_phi)(z).mean(axis=0) - 0.5).max() < 1e-12
    y = x.copy()
    y.flat[cell] += delta
    assert np.abs(v2.smoothed_median(y) - r).max() <= abs(delta) + 1e-12


def test_the_median_reference_of_values_symmetric_about_their_median_is_the_median():
    x = np.array([0.70, 0.78, 0.80, 0.82, 0.90]).reshape(5, 1, 1)
    assert v2.smoothed_median(x)[0, 0] == pytest.approx(0.80, abs=1e-13)
    assert np.isnan(v2.smoothed_median(np.array([0.7, np.nan, 0.9]).reshape(3, 1, 1))[0, 0])  # as np.median


def test_the_median_reference_estimated_from_noisy_values_is_unbiased():
    """The median of noisy values is biased where the true values are not symmetric about their median (the
    paper-shaped study's reference sat 0.004-0.013 low on L and R, and the slopes of q above and below it turned
    that into 0.3 CRS points between the top and the bottom); with each value's noise taken out of the reference's
    scale, its mean is the definition's (to Monte Carlo error)."""
    rng = np.random.default_rng(11)
    sd, draws = 0.03, 40_000
    truth = np.array([0.60, 0.78, 0.80, 0.81, 0.82, 0.83, 0.84]).reshape(7, 1, 1)  # a long lower tail
    noisy = truth + sd * rng.standard_normal((draws, 7, 1, 1))
    want = v2.smoothed_median(truth)[0, 0]
    fixed = v2.smoothed_median(noisy, noise=np.full((7, 1, 1), sd**2))[:, 0, 0]
    plain = v2.smoothed_median(noisy)[:, 0, 0]
    error = fixed.std() / math.sqrt(draws)
    assert abs(fixed.mean() - want) < 4 * error
    assert abs(plain.mean() - want) > 10 * error  # without it: biased
