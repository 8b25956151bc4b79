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

V_seed carries the bootstrap's seed widening for today's seed count (``bootstrap.seed_scale``, Student's
t over z), which shrinks as seeds are added, so the seeds asked for err on the side of too many.

V_seed is a variance estimated from S seeds: about V χ²_{S-1} / (S - 1), a skewed estimate that falls below the
truth more often than above (its median is 0.84 of the truth at 5 seeds). Plugged in as it is, it makes the plan
right on average in V but too small more often than too large, and most so where V_seed is near V*, where k grows
fastest. So the plan uses the median-unbiased value V_seed (S - 1) / χ²_{S-1}(0.5) (``seed_correction``: 1.19 at
5 seeds, 1.08 at 10), the usual allowance for a variance estimated from a small pilot (Browne 1995, "On the use
of a pilot sample for sample size determination", who plans on an upper confidence limit; the median is the 50 %
limit); ``variance.seed`` reports it. The image part rests on the test images, hundreds to thousands of them,
and is used as estimated. Measured (docs/crs-v2.md section 7): the plan's simulated power at its planned size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

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
    from scipy.stats import chi2  # noqa: PLC0415 -- scipy.stats (about 1 s): only the plan needs it

    return (n_seeds - 1) / float(chi2.ppf(0.5, n_seeds - 1))


def plan(diff_both: np.ndarray, diff_seed: np.ndarray, images: dict[str, int], n_seeds: int,
         min_difference: float = MIN_DIFFERENCE, power: float = POWER, confidence: float = 0.95) -> dict:
    """The test images per dataset (at today's seeds) or the seeds (at today's test images) that give
    ``power`` to detect a true CRS difference of ``min_difference`` (module docstring).

    diff_both [replicate]: leader minus rival under the bootstrap of seeds and test images; diff_seed
    [replicate]: the same under the seed-only bootstrap; ``images``: dataset -> test images today.
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
    v_seed *= seed_correction(n_seeds)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    v_star = (min_difference / (z + NormalDist().inv_cdf(power))) ** 2
    v_now = v_img + v_seed
    current = 1.0 if v_now == 0 else NormalDist().cdf(min_difference / math.sqrt(v_now) - z)
    image_factor = max(v_img / (v_star - v_seed), 1.0) if v_seed < v_star else None
    seed_factor = max(v_seed / (v_star - v_img), 1.0) if v_img < v_star else None
    together = None
    if image_factor is None and seed_factor is None:  # each part takes half of V*
        together = {"images": {d: round_up(max(2 * v_img / v_star, 1.0) * n) for d, n in sorted(images.items())},
                    "seeds": max(round_up(max(2 * v_seed / v_star, 1.0) * n_seeds), n_seeds)}
    return {
        "images": None if image_factor is None else {d: round_up(image_factor * n) for d, n in sorted(images.items())},
        "image_factor": image_factor,
        "seeds": None if seed_factor is None else max(round_up(seed_factor * n_seeds), n_seeds),
        "power": power,
        "min_difference": min_difference,
        "current_power": current,
        "only_seeds": v_seed >= v_star,
        "together": together,
        "variance": {"image": v_img, "seed": v_seed},
    }


def plans(crs_both: np.ndarray, crs_seed: np.ndarray, point: np.ndarray, encoders: Sequence[str],
          in_set: np.ndarray, images: dict[str, int], n_seeds: int, min_difference: float = MIN_DIFFERENCE
          ) -> list[dict]:
    """One ``plan`` per member of the best set (in_set bool [encoder]) other than the leader (the top point
    CRS, point [encoder]), best point CRS first; crs_both and crs_seed [replicate, encoder] are the CRS under
    the two bootstraps. Each entry is {"encoder": name, **plan}."""
    leader = int(np.argmax(point))
    members = sorted((j for j in np.flatnonzero(in_set) if j != leader), key=lambda j: (-point[j], encoders[j]))
    return [{"encoder": encoders[j],
             **plan(crs_both[:, leader] - crs_both[:, j], crs_seed[:, leader] - crs_seed[:, j], images, n_seeds,
                    min_difference)} for j in members]
