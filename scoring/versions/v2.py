"""CRS v2 (docs/crs-v2.md), the default: q with floored denominators, a continuous dominance degree, a balance
whose slope is bounded and a smoothed worst axis, each estimate taking the bootstrap's noise out of its smoothing
scales; C is 1 - kappa S, S the debiased squared calibration error of the stored test probabilities."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np
from scipy.special import ndtr

from crs.scoring.calibration import CALIBRATION_LOSS_SCALE
from crs.scoring.versions.common import DEFAULT_WEIGHTS, MEDIAN, Noise, check_weights, reference_values
from crs.scoring.versions.definition import SQUARED_ERROR, Definition, Words

# the constants (docs/crs-v2.md says how each was chosen)
Q_FLOOR = 0.35  # g: q's denominators are at least this, so no axis moves q by more than 1/g its change
DOMINANCE_SCALE = 0.1  # s: a dominance degree is prod_a Phi(m_a / s) over the margins m_a in q
WORST_SCALE = 0.08  # s_w: the worst axis is the expected minimum of q_a + s_w Z_a
KINK_SCALE = 0.1  # s_q: q's change of slope at the reference is smoothed by a Gaussian of this scale in x - x_ref
REFERENCE_SCALE = 0.05  # s_r: the median reference is the median of the encoders' values spread by this Gaussian
NOISE_FLOOR = 0.02  # s_0: the smallest scale an estimate uses once the bootstrap's noise is taken out of s, s_w
BALANCE_OFFSET = 0.25  # epsilon: the balance is a geometric mean of (q + 1) / 2 + epsilon, less epsilon
CALIBRATION_SCALE = CALIBRATION_LOSS_SCALE  # kappa: C = 1 - kappa S (crs.scoring.calibration)
PHI_0 = 1.0 / math.sqrt(2.0 * math.pi)  # the standard normal density's largest value
CONSTANTS = MappingProxyType({"q_floor": Q_FLOOR, "dominance_scale": DOMINANCE_SCALE, "worst_scale": WORST_SCALE,
                              "kink_scale": KINK_SCALE, "reference_scale": REFERENCE_SCALE,
                              "noise_floor": NOISE_FLOOR, "balance_offset": BALANCE_OFFSET,
                              "calibration_scale": CALIBRATION_SCALE})


def reference_slope() -> float:
    """How much a change of x_ref moves any q, per unit, at most: 2/g, and 2 phi(0) s_q / g^2 more through the
    smoothed kink's slopes, which the reference sets (``q_scores_v2``; docs/crs-v2.md section 2)."""
    return 2.0 / Q_FLOOR + 2.0 * PHI_0 * KINK_SCALE / Q_FLOOR**2


def lipschitz_bound(n_datasets: int, weights: Sequence[float] = DEFAULT_WEIGHTS) -> float:
    """K: a change of one seed-mean axis value x_{e,d,a} by delta moves any encoder's v2 CRS by at most K delta
    (docs/crs-v2.md section 4), for any reference (an encoder or the median) and any noise the estimate takes out
    (``Noise``: the scales it uses are at least s_0 = NOISE_FLOOR).

    With g = Q_FLOOR, eps = BALANCE_OFFSET, n_d datasets, lambda = 1/g (q's slope in its own x) and mu =
    ``reference_slope()`` (in the reference value): the changed encoder's overall q moves by at most
    (lambda + mu) delta / n_d (its own x, and the median it may move), every other encoder's by mu delta / n_d; a
    pair's margin on that axis by (lambda + 2 mu) delta / n_d. A dominance degree prod_a Phi(m_a / s_a) moves by at
    most phi(0) / s_0 per unit of one margin (the other factors are at most 1), each pair's net dominance by twice
    that and Dom (half of its mean over pairs) by phi(0) / s_0; Bal by (1/4) ((1 + eps) / eps)^(3/4) / 2 per unit
    of q; Worst, half an expected minimum, by 1/2 per unit of the encoder's q summed over its axes:

        K = 100 [w_dom phi(0) (lambda + 2 mu) / s_0 + w_bal ((1 + eps) / eps)^(3/4) (lambda + mu) / 8
                 + w_worst (lambda + mu) / 2] / n_d
    """
    w_dom, w_bal, w_worst = check_weights(weights)
    own, mu, eps = 1.0 / Q_FLOOR, reference_slope(), BALANCE_OFFSET
    per = (w_dom * PHI_0 * (own + 2.0 * mu) / NOISE_FLOOR + w_bal * ((1.0 + eps) / eps) ** 0.75 * (own + mu) / 8.0
           + w_worst * (own + mu) / 2.0)
    return 100.0 * per / n_datasets


def smoothed_median(x: np.ndarray, scale: float | None = None, noise: np.ndarray | None = None,
                    steps: int = 60) -> np.ndarray:
    """CRS v2's median reference [..., dataset, axis] of x [..., encoder, dataset, axis] (docs/crs-v2.md section 2):
    the median of the encoders' values each spread by a Gaussian of scale s_r, the r with

        mean_e Phi((r - x_e) / s_r) = 1/2.

    It moves by at most the change of any one x_e, continuously (the plain median jumps from one encoder to the
    next). The median of noisy values is biased wherever the true values are not symmetric about their median (at
    the paper's scale by 0.004-0.013 on L and R, which the slopes of q above and below the reference turn into
    differences of 0.3 CRS points); an estimate whose x_e carry noise of variance v_e (``noise``, [..., encoder,
    dataset, axis]) uses sqrt(s_r^2 - v_e) (``_scale``), so that the mean of its equation over Gaussian noise is the
    definition's. A column with a NaN is NaN, as ``np.median`` gives. Found by Newton's method kept inside a
    bracket (bisection where a step would leave it)."""
    x = np.asarray(x, dtype=float)
    scale = REFERENCE_SCALE if scale is None else scale
    s = np.broadcast_to(scale if noise is None else _scale(scale, noise), x.shape)
    missing = np.isnan(x).any(axis=-3)
    x = np.where(np.isnan(x), 0.0, x)
    lo, hi = (x - 8.0 * s).min(axis=-3), (x + 8.0 * s).max(axis=-3)
    r = np.median(x, axis=-3)
    for _ in range(steps):
        z = (r[..., None, :, :] - x) / s
        f = _half_mass_gap(z)
        slope = (np.exp(-0.5 * z * z) * PHI_0 / s).mean(axis=-3)
        lo, hi = np.where(f < 0, r, lo), np.where(f > 0, r, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = r - f / slope
        step = np.where((step >= lo) & (step <= hi), step, (lo + hi) / 2.0)
        done = np.all(np.abs(step - r) <= 1e-12)
        r = step
        if done:
            break
    return np.where(missing, np.nan, r)


def _half_mass_gap(z: np.ndarray) -> np.ndarray:
    """mean_e Phi(z_e) - 1/2 over axis -3, as (#(z > 0) - #(z < 0)) / 2 - sum_(z > 0) Phi(-z) + sum_(z < 0) Phi(z),
    over the count: exact where as many values lie on each side and only their far tails are left (two clusters
    far apart), where 1/2 - Phi(z) would round to 0 and leave the root anywhere between them."""
    tail = ndtr(-np.abs(z))
    above, below = z > 0, z < 0
    count = (above.sum(axis=-3) - below.sum(axis=-3)) / 2.0
    return (count - np.where(above, tail, 0.0).sum(axis=-3) + np.where(below, tail, 0.0).sum(axis=-3)) / z.shape[-3]


def reference_v2(x: np.ndarray, reference: int | str, noise: np.ndarray | None = None) -> np.ndarray:
    """x_ref [..., dataset, axis] for CRS v2: a named encoder's own values, or ``smoothed_median`` for 'median'
    (``noise``: the variance of each x_e an estimate carries, taken out of its scale)."""
    if isinstance(reference, str) and reference == MEDIAN:
        return smoothed_median(x, noise=noise)
    return reference_values(x, reference)


def q_scores_v2(x: np.ndarray, reference: int | str, floor: float | None = None,
                noise: np.ndarray | None = None, x_noise: np.ndarray | None = None) -> np.ndarray:
    """CRS v2's q [..., encoder, dataset, axis] (docs/crs-v2.md section 2): v1's with floored denominators and its
    change of slope at the reference smoothed. With d = x_e - x_ref, a = 1 / max(1 - x_ref, g) the slope above the
    reference and b = 1 / max(x_ref, g) the slope below it,

        q = clip(b d + (a - b) (E (d + s_q Z)+ - s_q phi(0)), -1, 1),

    which is b d below the reference and a d above it, less (a - b) s_q phi(0), a few s_q away from it, and 0 at it:
    the ramp (a - b) d+ averaged over a Gaussian of scale s_q, so that a noisy d is not scored on a kink (a kink
    pulls the mean q of a noisy value up where a > b). An estimate whose d carries noise of variance v (``noise``,
    [..., encoder, dataset, axis]) uses sqrt(s_q^2 - v) in place of s_q (``_scale``): its mean over Gaussian noise
    is the definition's. The median reference is ``smoothed_median``; ``x_noise``, the variance of each x_e, is
    taken out of its scale. q lies in [-1, 1], and an axis value's change moves q by at most 1/g times that change.
    """
    x = np.asarray(x, dtype=float)
    r = reference_v2(x, reference, x_noise)[..., None, :, :]  # [..., 1, dataset, axis]
    g = Q_FLOOR if floor is None else floor
    above, below = 1.0 / np.maximum(1.0 - r, g), 1.0 / np.maximum(r, g)
    d = x - r
    t = KINK_SCALE if noise is None else _scale(KINK_SCALE, noise)
    ramp = d * ndtr(d / t) + t * PHI_0 * np.exp(-0.5 * (d / t) ** 2)  # E (d + t Z)+
    return np.clip(below * d + (above - below) * (ramp - KINK_SCALE * PHI_0), -1.0, 1.0)


def _scale(scale: float, variance) -> np.ndarray:
    """sqrt(max(scale^2 - variance, s_0^2)): the scale an estimate carrying noise of that variance uses."""
    return np.sqrt(np.maximum(scale**2 - np.asarray(variance, dtype=float), NOISE_FLOOR**2))


def dominance_degree(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """sigma [..., e, e']: how far e dominates e' on q [..., encoder, axis] (docs/crs-v2.md section 3),

        sigma(e, e') = prod_a Phi(m_a / s),   m_a = q_e,a - q_e',a,

    near 1 when e leads on every axis by a few s, near 0 when it trails on any; 1/16 each way between equals.
    When e dominates e' in v1's sense, sigma(e, e') > sigma(e', e). An estimate whose margins carry noise of
    variance v_a (``noise.margin``) uses sqrt(s^2 - v_a) in place of s (``_scale``), so that its mean over
    Gaussian noise is the definition's: E Phi((m + sqrt(v) Z) / sqrt(s^2 - v)) = Phi(m / s).
    """
    q = np.asarray(q, dtype=float)
    scale = DOMINANCE_SCALE if scale is None else scale
    m = q[..., :, None, :] - q[..., None, :, :]  # [..., e, e', axis]
    s = scale if noise is None else _scale(scale, noise.margin)
    sigma = np.prod(ndtr(m / s), axis=-1)
    idx = np.arange(q.shape[-2])
    sigma[..., idx, idx] = 0.0  # an encoder does not dominate itself
    return sigma


def dominance_v2(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """CRS v2's Dom_e [..., encoder]: (1 + sum_e' (sigma(e, e') - sigma(e', e)) / (n - 1)) / 2 in [0, 1]."""
    q = np.asarray(q, dtype=float)
    n = q.shape[-2]
    if n < 2:
        raise ValueError(f"dominance needs at least 2 encoders, got {n}")
    sigma = dominance_degree(q, scale, noise)
    dom = (sigma.sum(axis=-1) - sigma.sum(axis=-2)) / (n - 1)
    return (dom + 1.0) / 2.0


def expected_min(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E min_a (mu_a + sd_a Z_a) over the last axis, Z independent standard normals (sd > 0):
    lo + integral_lo^hi P(min > t) dt, lo and hi 8 sd below and above the smallest mean (Gauss-Legendre)."""
    mu, sd = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sd, dtype=float))
    lo = (mu - 8.0 * sd).min(axis=-1, keepdims=True)
    hi = (mu + 8.0 * sd).min(axis=-1, keepdims=True)
    half = (hi - lo) / 2.0
    t = lo + half * (1.0 + _NODES)  # [..., node]
    above = np.prod(ndtr((mu[..., None, :] - t[..., None]) / sd[..., None, :]), axis=-1)
    return lo[..., 0] + half[..., 0] * (above @ _WEIGHTS)


_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(96)


def worst_v2(q: np.ndarray, scale: float | None = None, noise: Noise | None = None) -> np.ndarray:
    """CRS v2's Worst_e [..., encoder] = clip((E min_a (q_a + s_w Z_a) - E min_a (s_w Z_a) + 1) / 2, 0, 1): a
    smoothed (min_a q_a + 1) / 2, 0.5 at the reference, monotone in every q; an estimate takes the variance of
    its noise (``noise.q``) out of s_w, as ``dominance_degree`` does."""
    q = np.asarray(q, dtype=float)
    scale = WORST_SCALE if scale is None else scale
    s = np.broadcast_to(scale if noise is None else _scale(scale, noise.q), q.shape)
    at_zero = expected_min(np.zeros(q.shape[-1]), np.full(q.shape[-1], scale))
    return np.clip((expected_min(q, s) - at_zero + 1.0) / 2.0, 0.0, 1.0)


def balance_v2(q: np.ndarray, offset: float | None = None) -> np.ndarray:
    """CRS v2's Bal_e = (prod_a (h_a + eps))^(1/4) - eps, h_a = (q_e,a + 1) / 2 (docs/crs-v2.md section 3).

    In [0, 1], 0.5 at the reference, largest for a given mean when the axes are equal, and its slope
    in any axis is bounded (v1's geometric mean, eps = 0, has an unbounded slope as an axis nears q = -1).
    """
    offset = BALANCE_OFFSET if offset is None else offset
    h = (np.asarray(q, dtype=float) + 1.0) / 2.0 + offset
    return np.prod(h, axis=-1) ** (1.0 / h.shape[-1]) - offset


def components(q: np.ndarray, noise: Noise | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Dom, Bal, Worst) [..., encoder] of q [..., encoder, axis]; ``noise``, the variance an estimate of q
    carries, is taken out of the smoothing scales (``dominance_degree``)."""
    return dominance_v2(q, None, noise), balance_v2(q), worst_v2(q, None, noise)


def _g(value, spec: str = ".3g") -> str:
    """A recorded constant as the report prints numbers (``crs.scoring.report.markup.num``)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _q_words(recorded: Mapping) -> str:
    c = {k: _g(v) for k, v in recorded.items()}
    g, gain = c["q_floor"], _g(1 / float(c["q_floor"]))
    kink, spread = c.get("kink_scale", "n/a"), c.get("reference_scale", "n/a")
    return (f"q = (x − x_ref) / max(1 − x_ref, {g}) above the reference and (x − x_ref) / max(x_ref, {g}) below "
            f"it, its change of slope at the reference smoothed over ±{kink} (so a noisy value near the reference "
            f"is not pulled up), clipped to [−1, 1]; a median reference is the median of the encoders' values each "
            f"spread over ±{spread} (it moves continuously, and noisy values do not pull it off); the reference "
            f"scores 0 and no axis moves q by more than {gain} "
            "times its change; e dominates e′ by the degree Π_a Φ((q_e,a − q_e′,a) / "
            f"{c['dominance_scale']}), which moves continuously; the estimates take the noise the bootstrap measures "
            "out of the smoothing scales, so they are not pulled towards the middle of the field;")


def _calibration_words(recorded: Mapping) -> str:
    kappa = _g(recorded.get("calibration_scale", 10.0))
    return (f"1 − {kappa} S, S the debiased squared calibration error of Kumar et al. (2019) (15 equal-mass bins "
            "on the top-label confidence, from the stored test probabilities), so C is 1 at perfect calibration, "
            f"about 0.9 at a calibration error of 0.1 and 0 at {_g(1 / float(kappa) ** 0.5, '.2g')}; S is "
            "unbiased, so a well calibrated encoder's C is not understated, and an estimate may lie a little "
            "above 1")


def _worst_words(recorded: Mapping) -> str:
    s_w = _g(recorded["worst_scale"])
    return f"(E min_a (q_a + {s_w} Z_a) − E min_a ({s_w} Z_a) + 1) / 2, a smoothed (min q + 1) / 2"


def _balance_words(recorded: Mapping) -> str:
    eps = _g(recorded["balance_offset"])
    return f"the geometric mean of (q + 1) / 2 + {eps}, less {eps}"


WORDS = Words(
    q=_q_words, calibration=_calibration_words, worst=_worst_words, balance=_balance_words,
    calibration_shift=(  # the definition's section 1, in words a report reader has without it
        "CRS v2's C is 1 − κ S, S an unbiased estimate of the squared calibration error, and near perfect "
        "calibration or on a small test set S's replicates are skewed, so the estimate can sit near the edge of "
        "its interval; a C at or above 1 reads as no calibration error detectable"),
)


DEFINITION = Definition(number="2", spec="crs-v2.md", q=q_scores_v2, components=components, takes_out_noise=True,
                        calibration=SQUARED_ERROR, words=WORDS, constants=CONSTANTS,
                        lipschitz_bound=lipschitz_bound, reference=reference_v2)
