"""The features a probe uses, and their standardisation, from the training rows alone.

Features constant on the training split are left out of the probe (``live_features``), and
no kept feature is divided by less than a tenth of the typical feature's spread
(``feature_scales``), so no test, perturbed or shifted image can be scaled by more than ten
times what a typical feature's deviation is.
"""

from __future__ import annotations

import numpy as np

DEAD_REL = 1e-4  # a feature whose training std is below this share of the typical (median) std is left out


DEAD_FLOOR = 1e-30  # the typical std's floor: with every feature constant, every one is left out


SCALE_FLOOR = 0.1  # no kept feature is divided by less than this share of the typical std (docs/standardisation.md)


def _typical_sd(sd: np.ndarray) -> float:
    """The median of the training stds above ``DEAD_REL`` times the largest (so that dead features,
    however many, do not drag it down), floored at ``DEAD_FLOOR``."""
    top = float(sd.max()) if sd.size else 0.0
    spread = sd[sd > DEAD_REL * top]
    return max(float(np.median(spread)) if spread.size and top > 0 else 0.0, DEAD_FLOOR)


def live_features(X: np.ndarray) -> np.ndarray:
    """Which features of the training rows X [n, F] the probe uses: [F] bool.

    With sd the training standard deviations (in float64, so an exactly constant feature gives 0,
    or round-off of its size) and ``_typical_sd`` their typical value, a feature is left out when
    its sd is at most ``DEAD_REL`` times the typical one: ReLU units dead on every training image
    and round-off of a constant carry nothing a probe can learn from. The threshold is relative,
    so it does not depend on the encoder's units. Near-dead features that stay are bounded by
    ``feature_scales``, not by this rule.
    """
    sd = np.asarray(X, np.float64).std(0)
    return sd > DEAD_REL * _typical_sd(sd)


def feature_scales(X: np.ndarray, floor: float = SCALE_FLOOR) -> np.ndarray:
    """The divisor of each feature of the training rows X [n, F] (kept features only): [F] float32.

    s_f = max(sd_f, SCALE_FLOOR * typical), typical = ``_typical_sd``. Standardising is then
    z_f = (x_f - mean_f) / s_f, so no image's scaled value exceeds
    |x_f - mean_f| / (SCALE_FLOOR * typical): amplification is at most 1 / SCALE_FLOOR = 10 times
    that of a typical feature. Without the floor a ReLU feature that fires on 1-3 of ~1,000
    training images (sd 1e-4 to 1e-3 of the typical) scales a shifted image on which it fires by
    up to 10,000, and the saturated softmax ties every row (docs/standardisation.md measures the
    floor's choice: the largest scaled value, the tie share and the shift retention at 0.01-1).
    Features at or above the floor keep their own sd.
    """
    sd = np.asarray(X, np.float64).std(0)
    return np.maximum(sd, floor * _typical_sd(sd)).astype(np.float32)
