"""Does the settle plan deliver the power it promises? (issue 51: "at the planned size, simulated power lies
between 70 and 90 %").

``crs.scoring.settle.plan`` sizes the test sets (at today's seeds) or the seeds (at today's test sets) for 80 %
power to detect a true CRS difference of ``min_difference``, from the image and seed parts of the difference's
bootstrap variance. Here the truth is known: the simulator of ``bootstrap_coverage.py`` draws benchmarks of a
small scenario (the ``mixed`` quick datasets, its four encoders, and the power pair A and B of
``crs_versions.power_pair``, B ahead of A by ``--gap`` on every axis), and ``min_difference`` is set to the true
CRS difference of B over A (median reference, default weights, CRS v2). Then:

1. ``--plan-replications`` benchmarks (default ``--replications``) at today's size: each one's plan for B
   against A (the default bootstrap, unit 'both', for ``diff_both``; the seed-only bootstrap of the same seed
   draw over the full test sets for ``diff_seed``); the median of their image factors k and seed factors m is the plan;
2. ``--replications`` fresh benchmarks with every test set (and shift target) k times larger, and as many with
   m times the seeds: the power is the share whose 95 % interval of CRS(B) - CRS(A) lies above 0.

    python benchmarks/settle_study.py [--replications 100] [--plan-replications N] [--bootstrap 100] [--gap 0.01]
                                      [--seed 0]

Prints one JSON object: the truth, the plans, and the power at today's size and at each planned size with its
Monte Carlo error (one standard error, ``*_error``); the running count of each power goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

import bootstrap_coverage as bc
import crs_versions as cv

DATASETS = bc.QUICK["mixed"]


def encoders_of(gap: float, datasets) -> tuple[list, float]:
    """(the encoders per dataset: the scenario's four, A, B; the true CRS difference B - A)."""
    from crs.scoring.crs import score

    a, b = cv.power_pair(gap, datasets)
    encoders = [tuple(e for _ in datasets) for e in bc.ENCODERS] + [a, b]
    truth = cv.true_axes(encoders, datasets)["2"]
    crs = score(truth, "median", version="2").crs
    return encoders, float(crs[-1] - crs[-2])


def simulate(encoders, datasets, n_bootstrap: int, rng, n_seeds: int) -> np.ndarray:
    """x [1 + replicate, encoder, dataset, seed, axis] (CRS v2's C) with ``n_seeds`` seeds."""
    saved = bc.SEEDS
    bc.SEEDS = n_seeds
    try:
        return cv.simulate(encoders, datasets, n_bootstrap, rng)["2"]
    finally:
        bc.SEEDS = saved


def differences(x: np.ndarray, draw_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(B - A under the default bootstrap, B - A under the seed-only bootstrap) [replicate], one benchmark."""
    from crs.scoring.bootstrap import (
        draw_seeds,
        replicates,
        score_replicates,
        seed_means_of,
        unclipped_axis,
        variance_scale,
    )

    n_seeds = x.shape[3]
    draw = draw_seeds(n_seeds, x.shape[0] - 1, draw_seed)
    free = unclipped_axis("2")
    spread = seed_means_of(x[1:].astype(float), draw, free, variance_scale(n_seeds))  # the point's own noise
    both = score_replicates(seed_means_of(x[1:].astype(float), draw, unclipped=free), "median", version="2",
                            x_spread=spread).crs
    seed = replicates(x[0].astype(float), draw, "median", version="2").crs
    return both[:, -1] - both[:, -2], seed[:, -1] - seed[:, -2]


def power_at(encoders, datasets, n_seeds: int, args, rng, offset: int) -> float:
    """The share of fresh benchmarks whose interval of CRS(B) - CRS(A) lies above 0."""
    from crs.scoring.bootstrap import interval

    hits = 0
    for r in range(args.replications):
        both, _ = differences(simulate(encoders, datasets, args.bootstrap, rng, n_seeds), offset + r)
        low, _ = interval(both)
        hits += bool(low > 0)
        print(f"{offset}: {hits} of {r + 1}", file=sys.stderr, flush=True)
    return hits / args.replications


def error(rate: float, n: int) -> float:
    """One standard error of a rate measured on n benchmarks."""
    return round(math.sqrt(rate * (1 - rate) / n), 3)


def scaled(datasets, k: float):
    return tuple(d._replace(n=int(math.ceil(d.n * k)), shift_n=int(math.ceil(d.shift_n * k))) for d in datasets)


def main() -> None:
    from crs.scoring.settle import plan

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replications", type=int, default=100)
    ap.add_argument("--plan-replications", type=int, default=None)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--gap", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    rng = np.random.default_rng([a.seed, 51])
    encoders, true_diff = encoders_of(a.gap, DATASETS)
    sizes = {str(j): d.n for j, d in enumerate(DATASETS)}
    plans = []
    hits_now = 0
    n_plan = a.replications if a.plan_replications is None else a.plan_replications
    for r in range(n_plan):
        both, seed = differences(simulate(encoders, DATASETS, a.bootstrap, rng, bc.SEEDS), r)
        plans.append(plan(both, seed, sizes, bc.SEEDS, min_difference=true_diff, widened=True))
        hits_now += bool(np.percentile(both, 2.5) > 0)
    k = float(np.median([p["image_factor"] if p["image_factor"] is not None else np.inf for p in plans]))
    seeds = [p["seeds"] if p["seeds"] is not None else np.inf for p in plans]
    m_seeds = float(np.median(seeds))
    print(f"plan: {k:.2f} times the test images, {m_seeds} seeds", file=sys.stderr, flush=True)
    out = {"gap": a.gap, "true_difference": round(true_diff, 3), "replications": a.replications,
           "plan_replications": n_plan,
           "bootstrap": a.bootstrap, "test_images": [d.n for d in DATASETS], "seeds": bc.SEEDS,
           "power_today": hits_now / n_plan, "power_today_error": error(hits_now / n_plan, n_plan),
           "planned_power_today": round(float(np.median([p["current_power"] for p in plans])), 3),
           "only_seeds_share": float(np.mean([p["only_seeds"] for p in plans])),
           "image_factor": None if not math.isfinite(k) else round(k, 2),
           "planned_seeds": None if not math.isfinite(m_seeds) else int(m_seeds)}
    if math.isfinite(k):
        out["power_at_planned_images"] = power_at(encoders, scaled(DATASETS, k), bc.SEEDS, a, rng, 10_000)
        out["power_at_planned_images_error"] = error(out["power_at_planned_images"], a.replications)
    if math.isfinite(m_seeds):
        out["power_at_planned_seeds"] = power_at(encoders, DATASETS, int(m_seeds), a, rng, 20_000)
        out["power_at_planned_seeds_error"] = error(out["power_at_planned_seeds"], a.replications)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
