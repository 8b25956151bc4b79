"""Why CRS v2's C is linear in the squared calibration error S (docs/crs-v2.md section 1): for a perfectly
calibrated probe, how far the root CE = sqrt(max(S, 0)) sits above 0 and how far kappa S does.

S is unbiased for the binned population's squared error (0 here): the root of an estimate cut at 0 can only sit at
or above 0, so CE is biased upwards near perfect calibration and 1 - CE downwards; C = 1 - kappa S is not.
Simulated: binary labels drawn from p = sigmoid(1.5 z), z ~ N(0, 1) (perfectly calibrated), the stored
probabilities scored as crs does (``crs.scoring.calibration``, multi-label form, one label).

    python benchmarks/calibration_bias.py [--replications 400] [--sizes 500,2000,5000] [--seed 0]

One JSON line per test size: the mean CE, its standard deviation and the share of sets at CE = 0, and the
mean of kappa S (C's bias) with its Monte Carlo error.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from crs.scoring.calibration import CALIBRATION_LOSS_SCALE, point_error, point_loss


def mean_error(n: int, replications: int, rng: np.random.Generator, spread: float = 1.5) -> dict:
    errors, losses = np.empty(replications), np.empty(replications)
    for r in range(replications):
        p = 1.0 / (1.0 + np.exp(-spread * rng.standard_normal(n)))
        y = (rng.random(n) < p).astype(np.int8)
        errors[r] = point_error(p[:, None], y[:, None], np.ones((n, 1), bool), "multilabel")
        losses[r] = point_loss(p[:, None], y[:, None], np.ones((n, 1), bool), "multilabel")
    return {"test_images": n, "replications": replications, "mean_ce": round(float(errors.mean()), 4),
            "monte_carlo_error": round(float(errors.std() / np.sqrt(replications)), 4),
            "sd_ce": round(float(errors.std()), 4), "share_at_zero": round(float((errors == 0).mean()), 3),
            "kappa": CALIBRATION_LOSS_SCALE, "mean_c_bias": round(float(losses.mean()), 5),
            "c_bias_monte_carlo_error": round(float(losses.std() / np.sqrt(replications)), 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replications", type=int, default=400)
    ap.add_argument("--sizes", default="500,2000,5000")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    for n in (int(v) for v in a.sizes.split(",")):
        print(json.dumps(mean_error(n, a.replications, rng)), flush=True)


if __name__ == "__main__":
    main()
