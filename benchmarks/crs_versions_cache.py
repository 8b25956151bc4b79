"""Simulate paper-shaped benchmarks once and keep their per-replicate axes (both versions' C) in an .npz,
so that CRS v2's constants can be chosen by re-scoring the same benchmarks (``crs_versions.tune``).

    python benchmarks/crs_versions_cache.py OUT.npz [--replications 100] [--bootstrap 100] [--seed 0]
        [--scenario paper|mixed]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import crs_versions as cv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--replications", type=int, default=100)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", choices=list(cv.SCENARIOS), default="paper")
    ap.add_argument("--versions", default=",".join(cv.VERSIONS), help="the versions whose axes are kept, e.g. 2")
    a = ap.parse_args()
    versions = a.versions.split(",")
    datasets, scenario_encoders = cv.SCENARIOS[a.scenario]
    encoders, truth = cv.benchmark_encoders(datasets, scenario_encoders)
    rng = np.random.default_rng([a.seed, 41])
    xs = {v: [] for v in versions}
    t0 = time.perf_counter()
    for r in range(a.replications):
        x = cv.simulate(encoders, datasets, a.bootstrap, rng)
        for v in versions:
            xs[v].append(x[v].astype(np.float32))
        if (r + 1) % 5 == 0 or r + 1 == a.replications:
            np.savez(a.out, **{f"x{v}": np.stack(xs[v]) for v in versions},
                     **{f"truth{v}": truth[v] for v in versions}, seed=a.seed, bootstrap=a.bootstrap)
            print(f"{r + 1} benchmarks, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
