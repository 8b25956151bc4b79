"""Side-by-side: all probes of one (encoder, dataset) in one JAX program vs a loop of
scikit-learn LogisticRegression fits on the same data, subsets and L2 grid.

Prints a ratio measured in this one run (no absolute claims). Usage:

    python benchmarks/probe_vs_sklearn.py [--n 2000] [--features 256] [--classes 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jax-only", action="store_true", help="time only our engine")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from sklearn.linear_model import LogisticRegression

    from crs.probe import core, subsets
    from crs.probe.run import DEFAULT_FRACTIONS, DEFAULT_L2

    rng = np.random.default_rng(0)
    n, F, K = args.n, args.features, args.classes
    y = rng.integers(0, K, n)
    X = (rng.normal(size=(K, F))[y] * 0.5 + rng.normal(size=(n, F))).astype(np.float32)
    T = np.eye(K, dtype=np.float32)[y]
    seeds, fractions, grid = list(range(args.seeds)), list(DEFAULT_FRACTIONS), list(DEFAULT_L2)
    order = subsets.orders(y, "multiclass", seeds)
    sizes = subsets.sizes(fractions, n)
    masks = subsets.masks_from(order, sizes)
    args_jax = (jnp.asarray(X), jnp.asarray(T), jnp.ones_like(jnp.asarray(T)), jnp.asarray(order), sizes,
                jnp.asarray(grid, jnp.float32))

    t0 = time.perf_counter()
    fit = core.fit(*args_jax, task="multiclass")
    jax.block_until_ready(fit.W)
    first = time.perf_counter() - t0
    if args.jax_only:
        print(f"jax first call incl. compile: {first:.2f} s")
    t0 = time.perf_counter()
    fit = core.fit(*args_jax, task="multiclass")
    jax.block_until_ready(fit.W)
    jax_s = time.perf_counter() - t0

    if args.jax_only:
        print(f"jax second call: {jax_s:.2f} s; loop iterations of the slowest probe: "
              f"{int(np.asarray(fit.iterations).max())}")
        return
    t0 = time.perf_counter()
    for s in range(len(seeds)):
        for f in range(len(fractions)):
            rows = masks[s, f] > 0
            for lam in grid:
                LogisticRegression(C=1 / (lam * rows.sum()), tol=1e-4, max_iter=1000).fit(X[rows], y[rows])
    sk_s = time.perf_counter() - t0
    probes = len(seeds) * len(fractions) * len(grid)
    print(f"{probes} probes, n={n}, F={F}, K={K}")
    print(f"jax (compiled, second call): {jax_s:.2f} s; first call incl. compile: {first:.2f} s")
    print(f"scikit-learn loop:           {sk_s:.2f} s")
    print(f"ratio sklearn / jax: {sk_s / jax_s:.1f}x (incl. compile: {sk_s / first:.1f}x); "
          f"converged {int(np.asarray(fit.converged).sum())}/{probes}")


if __name__ == "__main__":
    main()
