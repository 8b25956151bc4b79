"""How often CRS v2's C interval holds the population's C, on C alone (docs/crs-v2.md section 1).

Simulated binary test sets (``bootstrap_coverage``'s binormal scores and calibration maps) for nine encoders, the
`mixed` scenario's four and every third paper-shaped one (``crs_versions.PAPER_ENCODERS``), at several test-set
sizes. Each set is scored as ``crs score`` scores it: kappa S of the set (``calibration.point_loss``) and of B
image-bootstrap replicates (``calibration.replicate_losses``), the percentile interval of the replicates against
the population's kappa CE^2 over 15 equal-mass bins (``crs_versions.population_ce``). One JSON line a size:
coverage per encoder, the misses with the truth below the interval, the mean width and the point's mean error.

    python benchmarks/calibration_coverage.py [--replications 60] [--bootstrap 200] [--seed 2]
                                              [--sizes 300,2000,10000,500,5000]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import bootstrap_coverage as bc
import crs_versions as cv

BASES = {300: (1.3, 0.3), 500: (1.5, 0.15), 2000: (1.8, 0.2), 5000: (1.8, 0.2), 10000: (1.5, 0.1)}


def one_size(n: int, encoders, replications: int, n_bootstrap: int, rng) -> dict:
    from crs.scoring.bootstrap import interval
    from crs.scoring.calibration import CALIBRATION_LOSS_SCALE, point_loss, replicate_losses

    base, prevalence = BASES.get(n, (1.5, 0.15))
    truth = np.array([CALIBRATION_LOSS_SCALE * cv.population_ce(e.strength * base, prevalence, e) ** 2
                      for e in encoders])
    hits, below, width, error = (np.zeros(len(encoders)) for _ in range(4))
    known = np.ones((n, 1), bool)
    for _ in range(replications):
        y = rng.random(n) < prevalence
        counts = np.ascontiguousarray(bc.replicate_counts(n, n_bootstrap, rng)[:, 1:].T, dtype=np.float64)
        for e, enc in enumerate(encoders):
            delta = enc.strength * base
            p = bc.probability(delta * y + rng.standard_normal(n), delta, prevalence, enc)[:, None]
            target = y[:, None].astype(np.int8)
            low, high = interval(replicate_losses(p, target, known, counts, "multilabel"))
            hits[e] += low <= truth[e] <= high
            below[e] += truth[e] < low
            width[e] += high - low
            error[e] += point_loss(p, target, known, "multilabel") - truth[e]
    return {"test_images": n, "replications": replications, "bootstrap": n_bootstrap,
            "truth": np.round(truth, 5).tolist(), "coverage": np.round(hits / replications, 3).tolist(),
            "mean_coverage": round(float(hits.mean() / replications), 4),
            "misses_below": int(below.sum()), "misses_above": int((replications - hits - below).sum()),
            "mean_width": round(float(width.mean() / replications), 5),
            "mean_error": np.round(error / replications, 5).tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replications", type=int, default=60)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--sizes", default="300,2000,10000,500,5000")
    a = ap.parse_args()
    rng = np.random.default_rng([a.seed, 5])
    encoders = list(bc.ENCODERS) + list(cv.PAPER_ENCODERS[::3])
    for n in (int(s) for s in a.sizes.split(",")):
        print(json.dumps(one_size(n, encoders, a.replications, a.bootstrap, rng)), flush=True)


if __name__ == "__main__":
    main()
