"""The cost of the MLP probe head beside the linear probe, on the same grid in one run.

Synthetic encoder-like embeddings (``probe_bench.embeddings``: power-law spectrum,
imbalanced classes), standardised; nested stratified subsets as ``crs probe`` draws them;
then the whole grid (seeds x label fractions x weight decays) fitted by
``crs.probe.mlp.fit`` and by the linear engine ``crs.probe.core.fit``. Each is run twice:
the first call includes compiling (for the MLP one program per label fraction, or one for
all of them on a small grid: ``--layout both`` times both), the second is the run alone.
The last line of output is one JSON object. Usage:

    python benchmarks/mlp_bench.py                                  # 2,000 x 128, 5 x 7 x 4, hidden 128
    python benchmarks/mlp_bench.py --rows 20000 --features 768      # the full size (meant for a GPU)
    python benchmarks/mlp_bench.py --rows 300 --features 64 --hidden 32 --seeds 2 --wd 0.01,1 --no-linear --layout both
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--fractions", default="0.01,0.02,0.05,0.1,0.25,0.5,1")
    ap.add_argument("--wd", default="1e-3,1e-2,1e-1,1")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--max-steps", type=int, default=500)
    ap.add_argument("--no-linear", action="store_true")
    ap.add_argument("--layout", choices=("default", "both"), default="default",
                    help="both: the MLP's shared program and its program per fraction, side by side (default: "
                         "the layout crs.probe.mlp.shared picks)")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from crs.probe import core, mlp, subsets
    from crs.probe.problem import TrainingSet
    from probe_bench import embeddings

    rng = np.random.default_rng(0)
    X, y = embeddings(args.rows, args.features, args.classes, rng)
    X = ((X - X.mean(0)) / (X.std(0) + 1e-6)).astype(np.float32)
    T = np.eye(args.classes, dtype=np.float32)[y]
    known = np.ones_like(T)
    seeds = list(range(args.seeds))
    fractions = [float(v) for v in args.fractions.split(",")]
    wd = [float(v) for v in args.wd.split(",")]
    order = subsets.orders(y, "multiclass", seeds)
    sizes = subsets.sizes(fractions, args.rows)
    settings = mlp.Settings(max_steps=args.max_steps)

    out = {"rows": args.rows, "features": args.features, "classes": args.classes, "hidden": args.hidden,
           "probes": len(seeds) * len(sizes) * len(wd), "max_steps": args.max_steps,
           "device": str(jax.devices()[0]), "cpus": os.cpu_count()}
    # both program layouts (crs.probe.mlp, Programs), the shared one first: the other's last fraction is the
    # shared program's shape, so it is compiled once for both and the per-fraction layout is favoured
    layouts = {"": None} if args.layout == "default" else {"shared_": "shared", "per_fraction_": "per_fraction"}
    for prefix, layout in layouts.items():
        for label in (f"mlp_{prefix}first_s", f"mlp_{prefix}run_s"):
            t = time.perf_counter()
            fit = mlp.fit(TrainingSet(X, T, known, order, sizes, wd, "multiclass", tuple(seeds)), args.hidden,
                          settings, layout=layout)
            jax.block_until_ready(fit)
            out[label] = round(time.perf_counter() - t, 2)
            print(label, out[label], flush=True)
    if args.layout == "both":
        out["per_fraction_over_shared_first"] = round(out["mlp_per_fraction_first_s"] / out["mlp_shared_first_s"], 2)
        out["per_fraction_over_shared_run"] = round(out["mlp_per_fraction_run_s"] / out["mlp_shared_run_s"], 2)
        out.update(mlp_first_s=out["mlp_per_fraction_first_s"], mlp_run_s=out["mlp_per_fraction_run_s"])
    steps = np.asarray(fit.steps)
    out.update(mlp_converged=int(np.asarray(fit.converged).sum()), mlp_steps_max=int(steps.max()),
               mlp_steps_median=float(np.median(steps)))
    if not args.no_linear:
        for label in ("linear_first_s", "linear_run_s"):
            t = time.perf_counter()
            lin = core.fit(TrainingSet(jnp.asarray(X), jnp.asarray(T), jnp.asarray(known), jnp.asarray(order), sizes,
                                       jnp.asarray(wd, jnp.float32), "multiclass"))
            jax.block_until_ready(lin)
            out[label] = round(time.perf_counter() - t, 2)
            print(label, out[label], flush=True)
        out["mlp_over_linear_run"] = round(out["mlp_run_s"] / max(out["linear_run_s"], 1e-9), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
