"""How much more data would settle a tie: test images, seeds, or only seeds.

The paired CRS difference between the leader and a rival varies for two reasons: which test images were
drawn and which seeds (label subsets, initialisations) were run. Two bootstraps of the same replicates
tell them apart. The default one resamples both (``diff_both``); a seed-only one keeps every test image
once and resamples the seeds with the same draw and the same seed widening (``diff_seed``):

    V_seed = var(diff_seed),   V_img = max(var(diff_both) - V_seed, 0)

With k times the test images of every dataset and m times the seeds, the variance of the difference is

    V(k, m) = V_img / k + V_seed / m

(each part is the variance of a mean, so it falls as one over its count). A two-sided test at level
1 - ``confidence`` detects a true difference Δ (``min_difference``) with power Φ(Δ / sqrt(V) - z_{1-α/2}),
so ``power`` needs V <= V* = (Δ / (z_{1-α/2} + z_power))^2: the usual sample-size formula for a difference
of means (e.g. Chow, Shao and Wang, "Sample size calculations in clinical research", section 3.2). Solving
V(k, 1) = V* gives k = V_img / (V* - V_seed), which exists only while V_seed < V*: past that, no number
of test images settles it at today's seeds. V(1, m) = V* gives m = V_seed / (V* - V_img) likewise. Where
neither exists, both must grow: giving each part half of V*, k = 2 V_img / V* and m = 2 V_seed / V*
(``together``).

The test is the bootstrap's own: the percentile interval, whose seed part is widened to Student's t
(``bootstrap.seed_scale``), so its half-width is about z sqrt(V_img + c(S) V_pt Q), where V_pt is the seed
part of the point estimate's own variance, c(S) = (t_{S-1} / z)^2 the widening (2.0 at 5 seeds, 1.2 at 10) and
Q ~ χ²_{S-1} / (S - 1) the noise of a variance estimated from S seeds; the point itself spreads by
sqrt(V_img + V_pt). Power is therefore

    P(k, m) = E_Q Φ((Δ - z sqrt(V_img / k + c(mS) V_pt Q / m)) / sqrt(V_img / k + V_pt / m))

(Q over mS - 1 degrees of freedom, averaged on a grid of its quantiles); the plan solves P = ``power`` for k
at today's seeds, and for the seed count at today's test images. The sample-size formula for a known variance,
Φ(Δ / sqrt(V) - z) (Chow, Shao and Wang, "Sample size calculations in clinical research", section 3.2), is the
case c = 1, Q = 1; taking the widened V_seed as the point's spread made plans about twice too large where the
seed part dominates. Where neither alone reaches the power, both grow (``together``): the fewest seeds whose
power with unlimited test images is half-way from ``power`` to 1, and the test images that reach ``power``
at those seeds.

V_pt comes from V_seed: divided by c(S), and made median-unbiased. A variance estimated from S seeds is about
V χ²_{S-1} / (S - 1), a skewed estimate that falls below the truth more often than above (its median is 0.84
of the truth at 5 seeds); plugged in as it is, the plan is too small more often than too large, most so where
the seed part is near what the power allows. So the plan uses V_pt (S - 1) / χ²_{S-1}(0.5) (``seed_correction``:
1.19 at 5 seeds, 1.08 at 10), the usual allowance for a variance estimated from a small pilot (Browne 1995, "On
the use of a pilot sample for sample size determination", who plans on an upper confidence limit; the median
is the 50 % limit); ``variance.seed`` reports it. The image part rests on hundreds to thousands of test images
and is used as estimated. Measured (docs/crs-v2.md section 7): the plan's simulated power at its planned size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

MIN_DIFFERENCE = 2.0  # CRS points: the smallest true difference the plan is sized to detect
POWER = 0.8


def round_up(n: float) -> int:
    """n rounded up to a whole number with at most two significant figures: 37.2 -> 38, 1,234 -> 1,300."""
    whole = max(math.ceil(n - 1e-9), 0)
    if whole < 100:
        return whole
    unit = 10 ** (len(str(whole)) - 2)
    return -(-whole // unit) * unit


def seed_correction(n_seeds: int) -> float:
    """(S - 1) / χ²_{S-1}(0.5): the factor that makes a variance estimated from S seeds median-unbiased (module
    docstring); 1 for a single seed, whose seed variance is not estimated."""
    if n_seeds < 2:
        return 1.0
    from scipy.stats import chi2  # scipy.stats (about 1 s): only the plan needs it

    return (n_seeds - 1) / float(chi2.ppf(0.5, n_seeds - 1))


QUANTILES = 33  # grid of Q's quantiles for the average over the seed variance's noise


def widening(n_seeds: int) -> float:
    """c(S) = (t_{S-1} / z)^2: how much the interval's seed variance exceeds the point's (``bootstrap.seed_scale``
    over ``bootstrap.variance_scale``, squared); 1 for a single seed."""
    from crs.scoring.bootstrap import seed_scale, variance_scale

    return (seed_scale(n_seeds) / variance_scale(n_seeds)) ** 2


class Parts(NamedTuple):
    """The difference's variance today: ``image`` (V_img), ``seed`` (V_pt, the point's seed part), the seeds
    ``n_seeds`` and whether the interval widens the seed part (``widened``)."""

    image: float
    seed: float
    n_seeds: int
    widened: bool


def design_power(parts: Parts, delta: float, k: float, m: float, z: float) -> float:
    """P(k, m) of the module docstring: the power at k times today's test images and m times its seeds (k or m
    may be inf)."""
    seeds = max(round(m * parts.n_seeds), 1) if math.isfinite(m) else math.inf
    v_img = 0.0 if math.isinf(k) else parts.image / k
    v_pt = 0.0 if math.isinf(seeds) else parts.seed * parts.n_seeds / seeds
    if v_img + v_pt == 0:
        return 1.0
    if math.isinf(seeds) or seeds < 2:
        c, q = 1.0, np.ones(1)
    else:
        from scipy.stats import chi2

        c = widening(seeds) if parts.widened else 1.0
        q = chi2.ppf((np.arange(QUANTILES) + 0.5) / QUANTILES, seeds - 1) / (seeds - 1)
    sd = math.sqrt(v_img + v_pt)
    half = z * np.sqrt(v_img + c * v_pt * q)
    return float(np.mean([NormalDist().cdf((delta - h) / sd) + NormalDist().cdf((-delta - h) / sd) for h in half]))


def solve(power_at, target: float, hi: float = 1e9) -> float | None:
    """The smallest f >= 1 with power_at(f) >= target (power_at rising in f), or None where even ``hi`` falls
    short; bisection on log f."""
    if power_at(1.0) >= target:
        return 1.0
    if power_at(hi) < target:
        return None
    lo = 1.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if power_at(mid) < target else (lo, mid)
    return hi


def plan(diff_both: np.ndarray, diff_seed: np.ndarray, images: dict[str, int], n_seeds: int,
         min_difference: float = MIN_DIFFERENCE, power: float = POWER, confidence: float = 0.95,
         widened: bool = False) -> dict:
    """The test images per dataset (at today's seeds) or the seeds (at today's test images) that give
    ``power`` to detect a true CRS difference of ``min_difference`` (module docstring).

    diff_both [replicate]: leader minus rival under the bootstrap of seeds and test images; diff_seed
    [replicate]: the same under the seed-only bootstrap; ``images``: dataset -> test images today; ``widened``:
    the bootstrap widened the seeds to Student's t (``bootstrap.seed_scale``, as unit 'both' does).
    ``images`` is None when only more seeds can settle it (``only_seeds``), ``seeds`` None when only more
    images can; counts are rounded up to two significant figures and never below today's.
    ``current_power``: the power today's design has; ``together`` (where neither alone can): the test images per
    dataset and the seeds that do it together, or None."""
    both, seed = np.asarray(diff_both, dtype=float), np.asarray(diff_seed, dtype=float)
    if not (np.isfinite(both).all() and np.isfinite(seed).all()) or both.size < 2 or seed.size < 2:
        raise ValueError("plan needs at least two finite replicates of each difference")
    if min_difference <= 0 or not 0 < power < 1 or not 0 < confidence < 1 or n_seeds < 1:
        raise ValueError(f"need min_difference > 0, power and confidence in (0, 1) and a seed, got "
                         f"{min_difference}, {power}, {confidence}, {n_seeds}")
    v_seed = float(seed.var())
    v_img = max(float(both.var()) - v_seed, 0.0)
    v_pt = v_seed / (widening(n_seeds) if widened else 1.0) * seed_correction(n_seeds)
    parts, z = Parts(v_img, v_pt, n_seeds, widened), NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    at = functools.partial(design_power, parts, min_difference, z=z)
    image_factor = solve(lambda f: at(f, 1.0), power)
    seed_factor = solve(lambda f: at(1.0, f), power, hi=1e5)
    together = None
    if image_factor is None and seed_factor is None:
        m = solve(lambda f: at(math.inf, f), (1 + power) / 2, hi=1e5)
        k = None if m is None else solve(lambda f: at(f, m), power)
        if k is not None:
            together = {"images": {d: round_up(k * n) for d, n in sorted(images.items())},
                        "seeds": max(round_up(m * n_seeds), n_seeds)}
    return {
        "images": None if image_factor is None else {d: round_up(image_factor * n) for d, n in sorted(images.items())},
        "image_factor": image_factor,
        "seeds": None if seed_factor is None else max(round_up(seed_factor * n_seeds), n_seeds),
        "power": power,
        "min_difference": min_difference,
        "current_power": at(1.0, 1.0),
        "only_seeds": image_factor is None,
        "together": together,
        "variance": {"image": v_img, "seed": v_pt},
    }


def plans(crs_both: np.ndarray, crs_seed: np.ndarray, point: np.ndarray, encoders: Sequence[str],
          in_set: np.ndarray, images: dict[str, int], n_seeds: int, min_difference: float = MIN_DIFFERENCE
          ) -> list[dict]:
    """One ``plan`` per member of the best set (in_set bool [encoder]) other than the leader (the top point
    CRS, point [encoder]), best point CRS first; crs_both and crs_seed [replicate, encoder] are the CRS under
    the two bootstraps, seeds widened to Student's t as ``crs score``'s unit 'both' does. Each entry is
    {"encoder": name, **plan}."""
    leader = int(np.argmax(point))
    members = sorted((j for j in np.flatnonzero(in_set) if j != leader), key=lambda j: (-point[j], encoders[j]))
    return [{"encoder": encoders[j],
             **plan(crs_both[:, leader] - crs_both[:, j], crs_seed[:, leader] - crs_seed[:, j], images, n_seeds,
                    min_difference, widened=True)} for j in members]
