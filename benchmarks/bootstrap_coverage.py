"""Coverage of the paired image-bootstrap interval on simulated data with a known answer.

Two encoders score the same test images. Scores are binormal with equal variance
(negatives N(0, 1), positives N(mu, 1)), so an encoder's population AUROC is
Phi(mu / sqrt(2)) and the true difference between the two is known exactly. The two
encoders' noise is correlated (rho), as it is for two encoders looking at the same
images, which is what pairing exploits. Each simulation draws a test set, bootstraps the
AUROC difference with ``crs.scoring.metrics.weighted_auroc`` (the same image draw for both encoders,
B replicates, percentile interval) and checks whether the interval covers the truth.

The issue's criterion: coverage within 95% +/- 3% over 1,000 simulations. Usage:

    python benchmarks/bootstrap_coverage.py [--simulations 1000] [--images 400] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np


def phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--simulations", type=int, default=1000)
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--prevalence", type=float, default=0.3)
    ap.add_argument("--mu", type=float, nargs=2, default=(1.2, 0.9))
    ap.add_argument("--rho", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from crs.scoring.bootstrap import interval
    from crs.scoring.metrics import weighted_auroc
    from crs.scoring.resample import image_counts

    mu_a, mu_b = args.mu
    truth = phi(mu_a / math.sqrt(2)) - phi(mu_b / math.sqrt(2))
    rng = np.random.default_rng(args.seed)
    covered, widths, point = 0, [], []
    t0 = time.perf_counter()
    for _ in range(args.simulations):
        n = args.images
        y = rng.random(n) < args.prevalence
        z1 = rng.standard_normal(n)
        z2 = args.rho * z1 + math.sqrt(1 - args.rho**2) * rng.standard_normal(n)
        a, b = mu_a * y + z1, mu_b * y + z2
        counts = image_counts(n, args.bootstrap, rng)
        diff = weighted_auroc(a, y, counts) - weighted_auroc(b, y, counts)  # [replicate], paired
        diff = diff[~np.isnan(diff)]
        low, high = interval(diff)
        covered += bool(low <= truth <= high)
        widths.append(high - low)
        ones = np.ones((n, 1), dtype=np.int32)
        point.append(float(weighted_auroc(a, y, ones)[0] - weighted_auroc(b, y, ones)[0]))
    seconds = time.perf_counter() - t0
    coverage = covered / args.simulations
    print(f"true AUROC difference {truth:.4f}; mean estimate {np.mean(point):.4f}; "
          f"mean 95% interval width {np.mean(widths):.4f}")
    print(f"coverage {coverage:.3f} over {args.simulations} simulations "
          f"({args.images} images, B={args.bootstrap}); target 0.95 +/- 0.03: "
          f"{'within' if abs(coverage - 0.95) <= 0.03 else 'OUTSIDE'}; {seconds:.0f} s")
    print(json.dumps({
        "coverage": coverage, "simulations": args.simulations, "images": args.images,
        "bootstrap": args.bootstrap, "true_difference": round(truth, 6),
        "mean_interval_width": round(float(np.mean(widths)), 6), "seconds": round(seconds, 1),
    }))


if __name__ == "__main__":
    main()
