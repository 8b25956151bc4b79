"""The probe engine against scikit-learn, side by side in one run.

Builds synthetic embeddings shaped like a real encoder's (an anisotropic feature
spectrum, correlated features, imbalanced classes, a class signal spread over many
directions), then fits the same grid (seeds x label fractions x L2 values on nested,
stratified subsets) three ways on the same standardised features:

  (a) scikit-learn LogisticRegression (lbfgs), one configuration at a time with the
      default threading, as benchmark code usually runs it;
  (b) scikit-learn at its best here: configurations spread over parallel worker
      processes with one BLAS thread each;
  (c) our engine, ``crs.probe.core.fit`` (one compiled program; compile time reported
      apart from the run).

With ``--sk-seeds N`` scikit-learn fits only the first N seeds' probes (every fraction
and L2 value) and its times are scaled to all seeds (said in the output); the agreement
figures then cover those probes. The regularisation is mapped exactly: C = 1 / (l2 * n_subset) (per label and its known
rows for the multi-label variant). Agreement is measured against a tightly converged
scikit-learn fit (tol 1e-10): test AUROC per probe and the relative gap in our
objective (computed in float64). It also reports how close the engine runs to this
CPU's matrix-product rate: one gradient evaluation of all probes against the same
matrix products as plain ``jnp.dot`` calls.

Measurements behind choices in ``crs.probe.core`` (20,000 x 768 unless said; the
numbers are this machine's, so rerun before relying on them):

* the L-BFGS direction's dot products as einsums: 1.9 ms against 6.8 ms as
  (a * b).sum(-1) (40 probes x 3,845 parameters);
* the class sum as K - 1 slice additions: 1.5 ms against 10 ms as a batched dot
  (5 x 8 probes x 5 classes x 5,000 rows);
* remaking the carried logits every ``REFRESH`` steps: the largest objective gap among
  280 probes 1.9e-5 against 4.6e-4 without;
* ``MIN_BLOCK_SHARE``: 4 row blocks ran faster than 1 or 7;
* sharing one loop among the 1, 2 and 5 % subsets: compiled in 15 s against 33 s as
  three loops, ran about 0.4 s slower;
* the covariance eigendecomposition in LAPACK on one thread: 0.03 s for F = 384,
  against 3.6 s with BLAS threads competing with JAX's pool and 2.3 s in XLA's eigh;
* ``ISOTROPIC_BELOW`` (one scale for subsets of fewer rows than 0.2 x the features) and one
  dense row block for joint loops under ``ONE_BLOCK_BELOW``, on crs demo's nine pairs
  (``--small``, 2 cores under load 8-15, so read the ratios): iterations max 532 -> 150;
  one pair's cold fit 38-51 s -> 17-21 s (one block: a far smaller program); the isotropic
  scale alone: 394 -> 52 steps for the 7-row subsets of 630 x 192, but 78 -> 315 for 158
  rows, hence the 0.2 threshold; side by side on a quiet moment (load 2): cold 46.9 s -> 25.7 s,
  warm 13.4 s -> 9.7 s, scikit-learn at its best 12.8 s;
* the tolerance on the preconditioned gradient: the raw gradient left test AUROC off by
  up to 0.08 against a tight scikit-learn fit; the gradient test alone (no ``gap``),
  up to 0.034.
* the reference in float64: scikit-learn fed float32 solves in float32, and its "tight" fits
  of the demo's 7- and 8-row probes stopped 0.5-7 % above the minimum (ours was below
  them); the 0.0216 test-AUROC difference reported before was that reference's. Against
  float64 scikit-learn (checked against scipy's L-BFGS-B at gtol 1e-13), ``gap`` 1e-3 left
  0.0060 at most (an 8-row multi-label probe, relative gap 6e-4), 1e-4 left 0.0019 for
  up to 20 % more steps: hence ``fraction_gap`` (1e-4 for subsets under 0.2 x features),
  0.0022 at most over the 1260 probes, all converged, steps max 150 -> 167.
* shape buckets (``crs.probe.schedule.bucketed``; the nine pairs compile six solver programs instead of
  nine), side by side, one after the other at load 5-8: cold 132.3 s -> 103.7 s, warm in
  the same process 47.0 s -> 45.2 s (the padded rows and features and ``fraction_gap``'s
  extra steps included).
* compiling, where XLA's time goes (``jax.jit(...).lower(...).compile()`` per solver loop,
  compiled HLO's fusions attributed to source lines by their stack frames): the unrolled
  two-loop recursion was 100 of a 176-fusion loop body; rolled, plus the objective's
  gradient once (``lbfgs.start``'s priming pass), the 20,000 x 768 loops hold 280-317 fused
  kernels instead of 436-503, but compiling the five multiclass loops took 19.3 CPU s
  against 20.9 (XLA's time is not proportional to the kernel count; ``compiler_options``
  ``xla_llvm_disable_expensive_passes`` saved 5 %, ``xla_backend_optimization_level`` 0 cut
  compiling 2.5x and made the loop run 3.5x slower). ``--small-engine`` cold, one after the
  other under load 5-6, CPU seconds of the fits: main 31.3 / 31.8, rolled + priming 28.6,
  + results and padding in numpy between programs (each eager jnp operation compiled a
  program per shape) 24.5 / 24.6 / 24.7; warm 8.1 either way.
* the compacted second loop of one-fraction loops (``_solve_compacted``, since removed) cost about
  half of each such program's compiling (20,000 x 768 multiclass: 23 CPU s of compiling
  with it, 11 without) and saved 15-20 % of the run (13.7 against 16.4 CPU s); running the
  L2 grid's two halves one after the other through one program instead compiled in 15 s
  and ran in 16.2 (each half reads the rows again).
* that trade again, for the compile goal of 15 s (2 cores, 2026-12-03, another day's load): the
  one-fraction loops now run their L2 values in two halves, one ``lax.scan`` over one loop body
  (``crs.probe.solver._stages``), and the fraction schedule's shared loop multiplies its rows as one dense block.
  ``--compile-only``: 20.2 / 22.2 s multiclass and 19.4 / 18.9 s multi-label with the compacted loops;
  14.9 / 14.3 s and 14.2 / 15.7 s with the halves; 13.1 s and 13.6 s with the dense shared loop too
  (its compiling 4.5-4.9 s -> 2.8 s). The run, per loop on the same machine, is noisy (the same code
  7.9-8.4 s and 8.1-10.8 s in runs minutes apart): the halves cost about 5-10 % (the loop-by-loop
  totals 7.5 / 7.6 / 8.4 / 7.9 s compacted, 8.1-9.2 s in halves), the dense shared loop about 0.5 s
  more (1.7-2.0 s -> 2.3-2.6 s). Full multiclass bench, one run each: halves alone ratio 34.6,
  ratio_best 8.39 (ours 8.42 s, scikit-learn 291.1 / 70.6 s); halves and the dense shared loop (the code
  as it is) ratio 31.7, ratio_best 7.09 (ours 9.60 s, scikit-learn 304.6 / 68.1 s), the same agreement
  (max test-AUROC difference 1.1e-3, 280/280 converged). Tried and dropped on the way: warm-starting the
  weak half from the strong half's weakest solution (the 1e-4 probes of the 5,000-row loop took 100 steps
  instead of 87 from zero) or from each probe's next stronger neighbour (85 steps): on this grid a
  warm start does not shorten the slowest probe, so the halves start from zero.
* the probe stage's few compiled shapes (``crs.probe.padded``; 180 programs -> 17 in a cold
  ``crs probe --all`` of the demo store: 6 solver loops, 3 metrics, 6 predictions, 2 validation
  losses) and small pairs two at a time (``crs.stages.probe.PAIR_WORKERS``), side by side on a
  quiet machine, two rounds: ``crs probe --all`` cold 40.8 / 40.2 s -> 26.9 / 27.9 s (CPU 57 -> 47
  s), ``crs demo`` 115.1 s -> 99.5 s. ``--small`` afterwards: engine cold 21.0 s, warm 13.3 s,
  scikit-learn at its best 14.0 s, the stage 26.1 s cold and 18.1 s on a filled cache (each pair's
  solver programs are still compiled: 6 of about 1-1.6 s). Tried and dropped: two row blocks
  in the bucketed loops (a quarter of the products; the same run time, as the loop's per-step
  work, not its products, dominates at these sizes) and ``xla_backend_optimization_level`` 1 for
  them (cold 21.9 / 22.6 s against 22.2 / 21.5 s, interleaved).

* the warm L2 path on small data (``core.warm_path``: the L2 values one after the other, strongest
  first, each from the last one's solution, instead of all from zero side by side), ``--small
  --side-by-side`` on the demo store, both interleaved in one run (2 cores, 2026-12-02): engine warm
  7.75 s against 14.47 s, cold 19.2 s against 22.8 s (its six solver programs compile a little
  longer); ``crs probe --all`` cold 24.1 s against 30.3 s, on a filled cache 13.7 s against 19.7 s;
  scikit-learn at its best 17.9 s in the same run. Max test-AUROC difference against tight
  scikit-learn 0.0029 (1,260 probes, all converged); objectives against the side-by-side fit's
  within 1.2e-3 relative, warm lower on average. The weakest L2 (1e-3) set every loop's length:
  up to 163 steps from zero, where its median probe took 31-86.
* one feature width for small loops (``core.small_width``: at least 384 while the padded problem
  stays under ``ONE_BLOCK_BELOW`` values; the demo's 50- to 367-wide encoders: 2 solver programs
  instead of 6), ``crs probe --all`` on the demo store with an empty compilation cache, interleaved,
  three rounds (2 cores, 2026-12-03): 19.4 / 21.1 / 18.9 s against 22.4 / 23.4 / 23.6 s, CPU
  33.8 / 36.8 / 32.5 s against 39.9 / 41.0 / 41.7 s. ``--small`` afterwards in one run: engine cold
  17.8 s, warm 11.5 s (12.5 s in a fresh process on the filled cache), scikit-learn at its best
  18.5 s; the stage 21.4 s cold, 17.7 s on a filled cache; max test-AUROC difference against tight
  scikit-learn 0.0026 over the 1,260 probes, all converged, steps at most 132.
* tried and dropped: XLA:CPU's classic LLVM emitters for the solver loops and MLP programs
  (``jax.jit(..., compiler_options={"xla_cpu_use_fusion_emitters": False})``), against XLA's default
  fusion emitters (2 cores, 2026-12-03). Compiling gets cheaper: ``--compile-only`` 18.1 / 19.6 s
  against 23.0 / 27.7 s multiclass, 16.8 / 16.1 s against 21.9 / 24.1 s multi-label (the five
  multiclass loops: 22.5 CPU s against 32.8); one MLP program 3.0-4.1 s against 5.0 s; the README's
  test command 676 s against 705 / 728 s. But the programs run slower: ``--jax-only`` 9.27 / 9.84 s
  against 8.72 / 8.63 s (interleaved), and on the demo's nine pairs (``--small``, one after the
  other) the engine warm 22.3 s against 12.9 s, cold 20.6 s against 21.7 s, the stage cold 24.9 s
  against 25.4 s: no gain on a first run, and every run on a filled cache much slower.

* the L-BFGS direction from inner products (``lbfgs.gram_direction``: the two-loop recursion as two
  small triangular solves on Gram matrices kept a slot at a time, the buffers read in seven
  matrix-vector products), and the softmax's class reductions as slices (``crs.probe.objective._log_softmax``).
  A trace of one demo pair's solver (jax.profiler, 630 x 367 padded to 768 x 384, multiclass, 319
  steps) had the rolled two-loop recursion at about a third of each 5.3 ms step (20 small dots and
  updates, 30 kernels per history slot) and the log-softmax's class sum, which XLA ran as a library
  reduction, at 0.64 ms; after, 4.4 ms per step. The nine pairs' fits one after the other, warm, old
  and new interleaved (2 cores, 2026-12-03): 10.04 / 10.04 s against 9.33 / 8.87 s. ``--small`` before
  and after (separate runs, 20 minutes apart): engine cold 16.3 -> 13.4 s, warm 12.0 -> 9.4 s, stage
  cold 20.7 -> 18.5 s, scikit-learn at its best 19.1 / 16.2 s; max test-AUROC difference against tight
  scikit-learn 2.9e-3 -> 2.6e-3, all 1,260 converged. The 20,000 x 768 grid: ``--compile-only``
  9.3 / 9.5 s -> 10.6 / 10.1 s (multiclass / multi-label), ``--jax-only`` multiclass run 9.36 s ->
  9.11 / 9.17 s. Written out as m^2 scalar updates instead of triangular solves, the recursion
  compiled 1 s longer per small solver program. Tried on the way: several vectors per product over
  the history (one einsum against [g, s, y]): XLA hands it to a library kernel that ran 4x slower
  than three matrix-vector products; products of the history after its in-place update made XLA copy
  both buffers every step. The full multiclass bench afterwards, twice (2 cores, 2026-12-03, a machine
  on which scikit-learn ran faster than ever before here): ours 8.61 / 8.28 s (+ 8.7 / 7.9 s compile),
  scikit-learn 240.8 / 230.9 s and at its best 48.0 / 45.3 s: ratio 27.95 / 27.88, ratio_best 5.57 / 5.47
  (earlier runs: ours 8.42-9.60 s, scikit-learn 291-305 s), test-AUROC max difference 1.1e-3, 280/280 converged.
* plain per-seed products in the loops of one fraction (``core.plain_products``): each seed's rows
  times its probes' columns as rows x features times features x (L x K), turned rows-last afterwards
  (an optimization barrier between, or XLA fuses the turn into the product and runs it 3-5x slower), and
  the transpose from the transposed rows, features x rows times rows x columns. Side by side in one
  process (2 cores, 2026-12-03), forward / backward, ms: 5 seeds x 5,000 x 768 by 20 columns 9.3 / 7.8 as
  before against 6.7 / 4.9; 10,000 rows 22.4 / 16.9 against 12.7 / 10.6; one seed x 20,000 rows 4.3 / 5.0
  against 3.4 / 3.4; but the shared loop's 5 x 1,000 rows by 120 columns 4.5 / 3.8-4.1 against 5.3 / 4.8,
  and the demo's 768 x 384 by 35-140 columns also favoured the old forms, hence one fraction only. The
  20,000 x 768 grid warm, per loop, multiclass: 8.06 / 8.24 s -> 6.84 / 6.94 s (the 5,000- and 10,000-row
  loops 2.7 / 2.3 s -> 2.1 / 1.7 s); multi-label 8.23 / 8.26 s -> 6.80 / 6.83 s; ``--compile-only``
  10.2 / 9.5 s. Full multiclass bench afterwards: ours 6.98 s (+ 9.3 s compile), scikit-learn 248.9 s
  and at its best 54.4 s: ratio 35.66, ratio_best 7.80, test-AUROC max difference 1.1e-3, 280/280
  converged; a second run: ours 6.41 s (+ 7.9 s), scikit-learn 238.8 / 48.8 s, ratio 37.24, ratio_best
  7.61. One gradient of all probes against the plain products alone (``cpu_efficiency``, whose
  baseline is now the plain per-seed forms): 137 ms against 105 ms. ``--small`` (its loops keep the old
  forms): engine cold 12.6 s, warm 8.8 s, the stage cold 16.5 s, scikit-learn at its best 13.9 s,
  agreement 2.64e-3 as before.

Small-data mode (``--small``): the grid of ``crs demo``'s nine (encoder, dataset) pairs
(5 seeds x 7 fractions x 4 L2 values each; 630-770 training rows, 50-367 live features,
4-5 classes), from a store (``--store``, e.g. the demo's) or synthetic data of the same
shapes. Our engine runs in a fresh process with an empty compilation cache (``cold``:
every compile included, as a first ``crs demo``), again in a fresh process on the now
filled cache (``warm_disk``) and a second time in that process (``warm``); scikit-learn at
its best (parallel workers, one BLAS thread each) fits the same grid on the same
standardised features, and a tight scikit-learn fit (float64, started cold) gives the agreement.
With ``--store``, ``crs probe --all`` itself on a copy of the store without its predictions, as a
first ``crs demo`` runs it: ``stage_cold_s`` (an empty compilation cache) and ``stage_warm_disk_s``.

The last line of output is one JSON object (see ``main``). Usage:

    python benchmarks/probe_bench.py                 # 20,000 x 768, 5 classes, 280 probes, + multi-label
    python benchmarks/probe_bench.py --quick         # a small run for a smoke test
    python benchmarks/probe_bench.py --small [--store crs-demo/store.zarr]   # the demo's nine pairs
    # and the L2 values side by side:
    python benchmarks/probe_bench.py --small --side-by-side --store crs-demo/store.zarr
    python benchmarks/probe_bench.py --compile-only  # compiling the 20,000 x 768 grid alone, per solver loop
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

SPECTRUM_DECAY = 0.7  # eigenvalue i ~ (1 + i)^-0.7: a condition number near 100 at 768 features
L2_GRID_8 = tuple(float(v) for v in np.logspace(-4, 0, 8))


# ----------------------------------------------------------------------------- data
def embeddings(n: int, F: int, K: int, rng: np.random.Generator, multilabel: bool = False):
    """Encoder-like features: power-law spectrum in a random basis, class signal in many directions.

    Returns X [n, F] float32 and labels: class index [n] (multiclass) or {1, 0, -1} [n, K].
    """
    # variance per principal direction, decaying like real embeddings
    spectrum = (1.0 + np.arange(F)) ** -SPECTRUM_DECAY
    basis, _ = np.linalg.qr(rng.normal(size=(F, F)))
    latent = rng.normal(size=(n, F)) * np.sqrt(spectrum)
    signal_dims = min(F, 96)
    if not multilabel:
        prior = np.array([0.45, 0.25, 0.15, 0.10, 0.05][:K] + [0.05] * max(0, K - 5))
        prior = prior / prior.sum()
        y = rng.choice(K, size=n, p=prior)
        # class means ~ 1.6 standard deviations apart (Mahalanobis): clean AUROC about 0.85, as real probes get
        means = rng.normal(size=(K, signal_dims)) / np.sqrt(2 * signal_dims) * 1.6 * np.sqrt(spectrum[:signal_dims])
        latent[:, :signal_dims] += means[y]
        labels = y
    else:
        direction = rng.normal(size=(K, signal_dims)) / np.sqrt(spectrum[:signal_dims].sum())
        score = latent[:, :signal_dims] @ direction.T  # [n, K], about unit variance
        prevalence = np.array([0.3, 0.2, 0.15, 0.12, 0.1][:K] + [0.1] * max(0, K - 5))
        offset = np.array([np.quantile(score[:, k], 1 - prevalence[k]) for k in range(K)])
        p = 1 / (1 + np.exp(-(score - offset) * 2.5))
        labels = (rng.random((n, K)) < p).astype(np.int8)
        labels[rng.random((n, K)) < 0.05] = -1  # uncertain labels, masked like CheXpert's U-Ignore
    X = (latent @ basis.T).astype(np.float32)
    return X, labels


def standardise(Xtr, Xte):
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-6
    return (Xtr - mu) / sd, (Xte - mu) / sd


# ----------------------------------------------------------------------------- scikit-learn
def sk_fit(X, labels, rows, l2, task, tol, max_iter, K, init=None, float64=False):
    """One probe with scikit-learn, regularisation mapped to ours. Returns W [F, K], b [K].

    ``init`` (W, b) warm-starts scikit-learn's own solver (used to tighten its fits).
    ``float64``: fit on float64 features. scikit-learn keeps float32 input in float32, where
    the flat objectives of nearly separable probes (a few rows, a weak penalty) stop
    0.5-7 % above their minimum whatever the tolerance: a reference must be float64.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    Xs = X[rows].astype(np.float64) if float64 else X[rows]
    F = X.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if task == "multiclass":
            y = labels[rows]
            m = LogisticRegression(C=1.0 / (l2 * len(rows)), tol=tol, max_iter=max_iter, warm_start=init is not None)
            present = np.unique(y)
            if init is not None and len(present) == K:
                m.coef_, m.intercept_ = init[0].T.copy(), init[1].copy()
            m.fit(Xs, y)
            W, b = np.zeros((F, K)), np.full(K, -30.0)
            W[:, m.classes_], b[m.classes_] = m.coef_.T, m.intercept_  # a class missing from the subset: p ~ 0
            return W, b
        W, b = np.zeros((F, K)), np.zeros(K)
        for k in range(K):
            known = labels[rows, k] >= 0
            yk = labels[rows, k][known]
            if len(np.unique(yk)) < 2:
                continue
            m = LogisticRegression(C=1.0 / (l2 * known.sum()), tol=tol, max_iter=max_iter, warm_start=init is not None)
            if init is not None:
                m.coef_, m.intercept_ = init[0][:, k][None, :].copy(), init[1][k : k + 1].copy()
            m.fit(Xs[known], yk)
            W[:, k], b[k] = m.coef_[0], m.intercept_[0]
        return W, b


def sk_all(X, labels, jobs, task, tol, max_iter, K, n_jobs, inits=None, float64=False):
    inits = inits or [None] * len(jobs)
    if n_jobs == 1:
        return [sk_fit(X, labels, rows, l2, task, tol, max_iter, K, init, float64)
                for (rows, l2), init in zip(jobs, inits)]
    from joblib import Parallel, delayed
    from threadpoolctl import threadpool_limits

    def one(rows, l2, init):
        with threadpool_limits(1):
            return sk_fit(X, labels, rows, l2, task, tol, max_iter, K, init, float64)

    return Parallel(n_jobs=n_jobs, backend="loky")(
        delayed(one)(rows, l2, init) for (rows, l2), init in zip(jobs, inits))


# ----------------------------------------------------------------------------- agreement
def auroc(scores, y):
    """Binary AUROC from ranks (ties averaged)."""
    from scipy.stats import rankdata

    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    if n1 == 0 or n0 == 0:
        return np.nan
    r = rankdata(scores)
    return (r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)


def test_auroc(Xte, labels, W, b, task):
    logits = Xte.astype(np.float64) @ W + b
    K = W.shape[1]
    if task == "multiclass":
        return np.nanmean([auroc(logits[:, k] - np.logaddexp.reduce(logits, axis=1), (labels == k).astype(int))
                           for k in range(K)])
    return np.nanmean([auroc(logits[labels[:, k] >= 0, k], labels[labels[:, k] >= 0, k]) for k in range(K)])


def objective64(X, labels, rows, l2, W, b, task):
    """Our objective in float64 (crs.probe.core docstring)."""
    Z = X[rows].astype(np.float64) @ W + b
    if task == "multiclass":
        y = labels[rows]
        lse = np.logaddexp.reduce(Z, axis=1)
        data = np.mean(lse - Z[np.arange(len(rows)), y])
    else:
        Y = labels[rows]
        known = Y >= 0
        bce = np.logaddexp(0, Z) - (Y == 1) * Z
        data = ((bce * known).sum(0) / np.maximum(known.sum(0), 1)).sum()
    return data + 0.5 * l2 * np.sum(W * W)


# ----------------------------------------------------------------------------- ours
def ours(Xtr, labels, task, order, sizes, l2, K, max_iter, tol, precondition=True, warm_start=False):
    import jax
    import jax.numpy as jnp

    from crs.probe import core
    from crs.probe.problem import TrainingSet
    from crs.probe.run import float_targets as targets

    T, known = targets(labels, task, K)
    data = TrainingSet(jnp.asarray(Xtr), jnp.asarray(T), jnp.asarray(known), jnp.asarray(order), sizes,
                       jnp.asarray(l2, jnp.float32), task)
    options = core.FitOptions(max_iter=max_iter, tol=tol, precondition=precondition, warm_start=warm_start)
    t0 = time.perf_counter()
    fit = core.fit(data, options)
    jax.block_until_ready(fit.W)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit = core.fit(data, options)
    jax.block_until_ready(fit.W)
    run = time.perf_counter() - t0
    return fit, run, max(first - run, 0.0)


def cpu_efficiency(Xtr, labels, task, order, sizes, l2, K):
    """Time of one gradient evaluation of every probe vs the same products as plain jnp.dot calls.

    Both follow the engine's default schedule at this size (``core.solver_loops``: a loop
    per label fraction, the smallest fractions sharing one, the whole-set fraction once),
    all L2 values of a loop together; the gradient is computed as the engine's solver computes it (its
    product forms, ``core.plain_products``, the loss's derivative in the logits, the products' transpose),
    the baseline only the two matrix products (X @ W forward, X^T @ dZ backward) per group, each as one
    plain product per seed.
    """
    import jax
    import jax.numpy as jnp

    from crs.probe import blocks as row_blocks
    from crs.probe import core
    from crs.probe import schedule as schedule_thresholds
    from crs.probe.run import float_targets as targets

    T, known = targets(labels, task, K)
    X, T, known = jnp.asarray(Xtr), jnp.asarray(T), jnp.asarray(known)
    l2 = jnp.asarray(l2, jnp.float32)
    F, n = X.shape[1], X.shape[0]
    schedule = "joint" if n * F < schedule_thresholds.FRACTION_SCHEDULE_FROM else "fraction"
    grads, dots, inputs = [], [], []
    for g_sizes, blocks in core.solver_loops(sizes, n, F, schedule):
        o = jnp.asarray((order[:1] if g_sizes == (n,) else order)[:, : g_sizes[-1]])
        Xo, To, ko = X[o], T[o], known[o]
        x = jax.random.normal(jax.random.PRNGKey(0), (o.shape[0], len(g_sizes), len(l2), F * K + K)) * 0.01

        def gradient(x, Xo, XoT, To, ko, s=g_sizes, blocks=blocks):  # data as arguments, not baked-in constants
            plain = core.plain_products(x.shape)  # the engine's product forms, and its transpose (``_objective``)
            Z = core.block_logits(x, Xo, blocks, XoT, plain)
            dZ = jax.grad(lambda Z: core.loss_from_logits(Z, x, core.Labels(To, ko, s, blocks, task), l2).sum())(Z)
            return core.block_logits_T(dZ, Xo, blocks, x.shape, XoT, plain) + l2[:, None] * x

        grads.append(jax.jit(gradient))

        @jax.jit
        def plain(x, Xo, XoT, To, ko, blocks=blocks):  # forward X @ W and backward X^T @ dZ per block, nothing else
            S, J, L = x.shape[:3]
            W = x[..., : F * K].reshape(S, J, L, F, K)
            out = jnp.zeros((S, F, J * L * K), x.dtype)
            for (lo, hi, first), xt in zip(blocks, XoT):  # the plain per-seed forms (``core.plain_products``)
                Z = jnp.einsum("snf,sfc->snc", Xo[:, lo:hi], row_blocks.as_columns(W[:, first:]))
                out = out.at[:, :, first * L * K:].add(jnp.einsum("sfn,snc->sfc", xt, Z))
            return out

        dots.append(plain)
        inputs.append((x, Xo, core.transposed_blocks(Xo, blocks), To, ko))

    def timeit(fs):
        for f, args in zip(fs, inputs):
            jax.block_until_ready(f(*args))
        times = []
        for _ in range(5):  # the fastest of 5: this VM's timings spread by up to 2x from run to run
            t0 = time.perf_counter()
            for f, args in zip(fs, inputs):
                jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - t0)
        return min(times)

    return timeit(grads), timeit(dots)


# ----------------------------------------------------------------------------- one task
def bench(task, n, n_test, F, K, seeds, fractions, l2, workers, max_iter, tol, log, sk_seeds, with_plain=True,
          jax_only=False):
    from crs.probe import subsets

    rng = np.random.default_rng(7 if task == "multiclass" else 8)
    X, labels = embeddings(n + n_test, F, K, rng, multilabel=task == "multilabel")
    Xtr, Xte = standardise(X[:n], X[n:])
    ytr, yte = labels[:n], labels[n:]
    order = subsets.orders(ytr, task, list(seeds))
    sizes = subsets.sizes(list(fractions), n)
    jobs = [(order[s, : sizes[f]], lam) for s in range(len(seeds)) for f in range(len(fractions)) for lam in l2]
    probes = len(jobs)
    log(f"[{task}] {probes} probes ({len(seeds)} seeds x {len(fractions)} fractions x {len(l2)} L2) "
        f"on {n:,} x {F} training features, {K} {'classes' if task == 'multiclass' else 'labels'}, "
        f"{n_test:,} test images")

    fit, crs_s, compile_s = ours(Xtr, ytr, task, order, sizes, l2, K, max_iter, tol)
    W = np.asarray(fit.W, np.float64).reshape(probes, F, K)
    b = np.asarray(fit.b, np.float64).reshape(probes, K)
    iters = np.asarray(fit.iterations).reshape(-1)
    log(f"  (c) crs engine:        {crs_s:8.2f} s  (+ {compile_s:.1f} s compile; iterations median "
        f"{int(np.median(iters))}, max {iters.max()}; converged {int(np.asarray(fit.converged).sum())}/{probes})")
    if with_plain:
        plain, _, _ = ours(Xtr, ytr, task, order, sizes, l2, K, max_iter, tol, precondition=False)
        plain_iters = np.asarray(plain.iterations).reshape(-1)
        log(f"      without the preconditioner: iterations median {int(np.median(plain_iters))}, "
            f"max {plain_iters.max()}")
    else:
        plain_iters = np.array([-1])
    if jax_only:  # an accelerator's figures: the engine alone, no scikit-learn on the host
        import jax

        return {"crs_s": round(crs_s, 3), "compile_s": round(compile_s, 3), "probes": probes,
                "iterations_median": int(np.median(iters)), "iterations_max": int(iters.max()),
                "converged": int(np.asarray(fit.converged).sum()), "platform": jax.devices()[0].platform}

    # scikit-learn on the first sk_seeds seeds' probes (every fraction and L2 value); times scaled to all seeds
    n_sk = len(fractions) * len(l2) * sk_seeds
    sk_jobs, scale = jobs[:n_sk], len(seeds) / sk_seeds
    note = "" if sk_seeds == len(seeds) else f" (timed on {n_sk} probes of {sk_seeds} seed(s), scaled x{scale:g})"
    t0 = time.perf_counter()
    sk_all(Xtr, ytr, sk_jobs, task, 1e-4, 1000, K, 1)
    sklearn_s = (time.perf_counter() - t0) * scale
    log(f"  (a) scikit-learn loop: {sklearn_s:8.2f} s{note}")
    t0 = time.perf_counter()
    default = sk_all(Xtr, ytr, sk_jobs, task, 1e-4, 1000, K, workers)
    sklearn_best_s = (time.perf_counter() - t0) * scale
    log(f"  (b) scikit-learn, {workers} workers x 1 BLAS thread: {sklearn_best_s:8.2f} s{note}")

    # the reference: scikit-learn's own fits tightened from where (b) stopped (its solver, warm-started)
    tight = sk_all(Xtr, ytr, sk_jobs, task, 1e-9, 20000, K, workers, inits=default, float64=True)
    a_ours = np.array([test_auroc(Xte, yte, W[i], b[i], task) for i in range(n_sk)])
    a_ref = np.array([test_auroc(Xte, yte, Wr, br, task) for Wr, br in tight])
    diff = np.abs(a_ours - a_ref)
    f_ours = np.array([objective64(Xtr, ytr, rows, lam, W[i], b[i], task) for i, (rows, lam) in enumerate(sk_jobs)])
    f_ref = np.array([objective64(Xtr, ytr, rows, lam, Wr, br, task) for (rows, lam), (Wr, br) in zip(sk_jobs, tight)])
    gap = (f_ours - f_ref) / np.abs(f_ref)
    log(f"  agreement with tightly converged scikit-learn ({n_sk} probes): "
        f"test AUROC |diff| max {np.nanmax(diff):.2e}, "
        f"median {np.nanmedian(diff):.2e}; objective relative gap max {gap.max():.2e} "
        f"(negative: ours lower)")
    g_s, d_s = cpu_efficiency(Xtr, ytr, task, order, sizes, l2, K)
    log(f"  one gradient of all probes {g_s * 1e3:.1f} ms vs the same products as plain jnp.dot "
        f"{d_s * 1e3:.1f} ms ({d_s / g_s:.0%} of the matrix-product rate)")
    return {
        "sklearn_s": round(sklearn_s, 3), "sklearn_best_s": round(sklearn_best_s, 3), "crs_s": round(crs_s, 3),
        "compile_s": round(compile_s, 3), "ratio": round(sklearn_s / crs_s, 2),
        "ratio_best": round(sklearn_best_s / crs_s, 2), "probes": probes,
        "auroc_max_abs_diff": float(np.nanmax(diff)), "auroc_median_abs_diff": float(np.nanmedian(diff)),
        "objective_max_rel_gap": float(gap.max()), "iterations_median": int(np.median(iters)),
        "iterations_median_without_preconditioner": int(np.median(plain_iters)),
        "gradient_s": round(g_s, 5), "plain_dot_s": round(d_s, 5), "sklearn_probes_timed": n_sk,
    }


# ----------------------------------------------------------------------------- small data (crs demo's grid)
# (training rows, test rows, live features, classes, task) of crs demo's nine (encoder, dataset) pairs
DEMO_SHAPES = tuple((n, nt, F, K, task) for F3 in ((353, 367, 334), (52, 54, 50), (192, 192, 192))
                    for (n, nt, K, task), F in zip(((770, 220, 4, "multilabel"), (630, 180, 5, "multiclass"),
                                                     (631, 179, 5, "multiclass")), F3))
DEMO_L2 = (1e-3, 1e-2, 1e-1, 1.0)


def small_pairs(store_path: str | None, seeds):
    """The nine pairs: [(name, task, K, Xtr, ytr, Xte, yte, order, sizes)], standardised as crs probe does."""
    from crs.foundations.config import DEFAULT_FRACTIONS
    from crs.probe import subsets

    out = []
    if store_path is None:
        for i, (n, nt, F, K, task) in enumerate(DEMO_SHAPES):
            X, labels = embeddings(n + nt, F, K, np.random.default_rng(100 + i), multilabel=task == "multilabel")
            Xtr, Xte = standardise(X[:n], X[n:])
            out.append((f"synthetic{i}", task, K, Xtr, labels[:n], Xte, labels[n:]))
    else:
        from crs.probe.run import load_split, pairs_in_store
        from crs.store import Store

        store = Store(store_path, mode="r")
        for enc, d in pairs_in_store(store):
            split, table = load_split(store, enc, d), store.dataset(d)
            labels = np.asarray(table.labels)
            te = split.test[~np.isin(split.test, split.failed)]
            out.append((f"{enc} x {d}", table.task, len(table.classes), split.z(split.X[split.train]),
                        labels[split.train], split.z(split.X[te]), labels[te]))
    pairs = []
    for name, task, K, Xtr, ytr, Xte, yte in out:
        order = subsets.orders(ytr, task, list(seeds))
        pairs.append((name, task, K, Xtr, ytr, Xte, yte, order, subsets.sizes(list(DEFAULT_FRACTIONS), len(Xtr))))
    return pairs


def small_engine(store_path, seeds, max_iter, tol, out_path, side_by_side=False) -> None:
    """One process: every pair's grid fitted twice (compile included, then not); W, b and times to ``out_path``.
    ``side_by_side``: every L2 value from zero at once (``warm_start=False``, the default before small data
    walked the L2 path), for the comparison of ``--side-by-side``."""
    import jax

    from crs.probe import core
    from crs.probe.problem import TrainingSet
    from crs.probe.run import compile_cache, float_targets

    compile_cache()  # as crs probe does: $CRS_JAX_CACHE
    saved, times = {}, {"first": [], "second": [], "first_cpu": [], "second_cpu": []}
    for p, (_name, task, K, Xtr, ytr, _Xte, _yte, order, sizes) in enumerate(small_pairs(store_path, seeds)):
        T, known = float_targets(ytr, task, K)
        # numpy in, as ``crs.probe.heads`` passes them (a jnp.asarray of each new shape compiles a program)
        data = TrainingSet(np.asarray(Xtr, np.float32), np.asarray(T, np.float32), np.asarray(known, np.float32),
                           np.asarray(order), sizes, np.asarray(DEMO_L2, np.float32), task)
        for key in ("first", "second"):
            t0, c0 = time.perf_counter(), time.process_time()
            fit = core.fit(data, core.FitOptions(max_iter=max_iter, tol=tol,
                                                 **({"warm_start": False} if side_by_side else {})))
            jax.block_until_ready(fit.W)
            times[key].append(time.perf_counter() - t0)
            times[key + "_cpu"].append(time.process_time() - c0)  # all threads: steadier than wall time under load
        for k in ("W", "b", "converged", "iterations"):
            saved[f"{p}_{k}"] = np.asarray(getattr(fit, k))
    np.savez(out_path, **saved, **{k: np.array(v) for k, v in times.items()})


def small(store_path, seeds, workers, max_iter, tol, log, side_by_side=False) -> dict:
    """The small-data comparison (module docstring); the engine's runs in child processes."""
    import subprocess
    import sys
    import tempfile

    pairs = small_pairs(store_path, seeds)
    L = len(DEMO_L2)
    log(f"[small] {len(pairs)} pairs x {len(seeds)} seeds x 7 fractions x {L} L2 "
        f"({'store ' + store_path if store_path else 'synthetic, the demo store shapes'}): "
        + ", ".join(f"{len(p[3])}x{p[3].shape[1]} K={p[2]}" for p in pairs))
    runs, stage, variants = {}, {}, ("",) + (("side_by_side_",) if side_by_side else ())
    with tempfile.TemporaryDirectory() as tmp:
        for which in ("cold", "warm_disk"):
            for v in variants:  # interleaved: the machine's load falls on both alike
                cache = os.path.join(tmp, f"jax-cache-{v}")
                env = {**os.environ, "CRS_JAX_CACHE": cache}
                out = os.path.join(tmp, f"{v}{which}.npz")
                cmd = [sys.executable, os.path.abspath(__file__), "--small-engine", out, "--seeds", str(len(seeds)),
                       "--max-iter", str(max_iter), "--tol", str(tol)] + (["--store", store_path] if store_path else [])
                t0 = time.perf_counter()
                subprocess.run(cmd + (["--side-by-side"] if v else []), env=env, check=True)
                wall = time.perf_counter() - t0
                runs[v + which] = dict(np.load(out))
                log(f"  engine{' (side by side)' if v else ''}, {which:9s}: "
                    f"fits {runs[v + which]['first'].sum():6.2f} s "
                    f"(process {wall:.1f} s); per pair " + " ".join(f"{t:.1f}" for t in runs[v + which]["first"]))
        for v in variants:
            log(f"  engine{' (side by side)' if v else ''}, warm (same process, second fit): "
                f"{runs[v + 'warm_disk']['second'].sum():6.2f} s")
        if store_path:
            stage = _stage_times(store_path, tmp, log, variants)
    fits = runs["cold"]
    jobs, where = [], []
    for p, (*_, order, sizes) in enumerate(pairs):
        for s in range(len(seeds)):
            for f, m in enumerate(sizes):
                for li, lam in enumerate(DEMO_L2):
                    jobs.append((p, order[s, :m], lam))
                    where.append((p, s, f, li))
    t0 = time.perf_counter()
    _sk_jobs(pairs, jobs, 1e-4, 1000, workers)  # timed only: agreement is measured against the tight fits below
    sklearn_best_s = time.perf_counter() - t0
    log(f"  scikit-learn, {workers} workers x 1 BLAS thread: {sklearn_best_s:6.2f} s ({len(jobs)} probes)")
    tight = _sk_jobs(pairs, jobs, 1e-10, 20000, workers, float64=True)  # cold: a warm start may stop at once
    diffs, flagged, converged, worst = [], 0, 0, (0.0, None)
    for (p, s, f, li), (Wr, br) in zip(where, tight):
        name, task, K, Xtr, ytr, Xte, yte, order, sizes = pairs[p]
        W, b = fits[f"{p}_W"][s, f, li].astype(np.float64), fits[f"{p}_b"][s, f, li].astype(np.float64)
        ok = bool(fits[f"{p}_converged"][s, f, li])
        converged += ok
        flagged += not ok
        rows = order[s, : sizes[f]]
        if task == "multiclass":  # scikit-learn drops a class its subset lacks: another model, not a solver error
            whole = len(np.unique(ytr[rows])) == K
        else:
            whole = all(len(np.unique(ytr[rows, k][ytr[rows, k] >= 0])) == 2 for k in range(K))
        if ok and whole:
            d = abs(test_auroc(Xte, yte, W, b, task) - test_auroc(Xte, yte, Wr, br, task))
            diffs.append(d)
            if d > worst[0]:
                worst = (d, f"{name}, seed {s}, {sizes[f]} rows, l2 {DEMO_L2[li]:g}")
    diffs = np.array(diffs)
    log(f"  agreement with tight scikit-learn: test AUROC |diff| max {np.nanmax(diffs):.2e} ({worst[1]}) over "
        f"the {len(diffs)} converged probes whose subset holds every class ({flagged} flagged not converged)")
    return {"mode": "small", "pairs": len(pairs), "probes": len(jobs),
            "cold_s": round(float(runs["cold"]["first"].sum()), 3),
            "warm_disk_s": round(float(runs["warm_disk"]["first"].sum()), 3),
            "warm_s": round(float(runs["warm_disk"]["second"].sum()), 3),
            "sklearn_best_s": round(sklearn_best_s, 3), "auroc_max_abs_diff": float(np.nanmax(diffs)),
            "auroc_compared": len(diffs), "converged": converged, "flagged": flagged,
            "iterations_max": int(max(fits[f"{p}_iterations"].max() for p in range(len(pairs)))), **stage,
            **({"side_by_side_cold_s": round(float(runs["side_by_side_cold"]["first"].sum()), 3),
                "side_by_side_warm_s": round(float(runs["side_by_side_warm_disk"]["second"].sum()), 3)}
               if side_by_side else {})}


def _stage_times(store_path: str, tmp: str, log, variants=("",)) -> dict:
    """``crs probe --all`` on a copy of the store without its predictions: wall seconds with an empty
    compilation cache (``stage_cold_s``, a first crs demo's probe stage) and again on the filled one.
    The variant "side_by_side_" runs the stage with ``core.warm_path`` answering False (every L2 value
    from zero at once, as before small data walked the L2 path), interleaved with the default."""
    import shutil
    import subprocess
    import sys

    out = {}
    for which in ("cold", "warm_disk"):
        for v in variants:
            copy = os.path.join(tmp, f"stage-{v}{which}.zarr")
            shutil.copytree(store_path, copy)
            for d in os.listdir(os.path.join(copy, "datasets")):
                shutil.rmtree(os.path.join(copy, "datasets", d, "predictions"), ignore_errors=True)
            env = {**os.environ, "CRS_JAX_CACHE": os.path.join(tmp, f"stage-jax-cache-{v}")}
            argv = ["crs", "probe", "--all", "--store", copy,
                    "--results", os.path.join(tmp, f"stage-{v}{which}-results"), "-q"]
            patch = "import crs.probe.core as c; c.warm_path = lambda *a, **k: False; " if v else ""
            code = f"{patch}import sys; from crs.cli import main; sys.argv = {argv!r}; main()"
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", code], env=env)
            if r.returncode not in (0, None):
                raise SystemExit(f"crs probe --all exited {r.returncode}")
            out[f"stage_{v}{which}_s"] = round(time.perf_counter() - t0, 3)
            log(f"  crs probe --all (the whole stage{', side by side' if v else ''}, {which}): "
                f"{out[f'stage_{v}{which}_s']:6.2f} s")
    return out


def _sk_jobs(pairs, jobs, tol, max_iter, workers, inits=None, float64=False):
    """scikit-learn fits of (pair, rows, l2) jobs on ``workers`` processes, one BLAS thread each."""
    from joblib import Parallel, delayed
    from threadpoolctl import threadpool_limits

    inits = inits or [None] * len(jobs)

    def one(p, rows, lam, init):
        name, task, K, Xtr, ytr = pairs[p][:5]
        with threadpool_limits(1):
            return sk_fit(Xtr, ytr, rows, lam, task, tol, max_iter, K, init, float64)

    return Parallel(n_jobs=workers, backend="loky", batch_size=8)(
        delayed(one)(p, rows, lam, init) for (p, rows, lam), init in zip(jobs, inits))


def compile_only(task, n, F, K, seeds, fractions, l2, log) -> dict:
    """Compile time of the large grid alone: one fit with ``max_iter=1`` (compiling, plus one step
    of each loop), timed per solver loop (``core.fit``'s ``on_loop``), with no compilation cache."""
    import jax
    import jax.numpy as jnp

    from crs.probe import core, subsets
    from crs.probe import schedule as schedule_thresholds
    from crs.probe.problem import TrainingSet
    from crs.probe.run import float_targets

    rng = np.random.default_rng(7 if task == "multiclass" else 8)
    X, labels = embeddings(n, F, K, rng, multilabel=task == "multilabel")
    Xtr, _ = standardise(X, X[:1])
    order = subsets.orders(labels, task, list(seeds))
    sizes = subsets.sizes(list(fractions), n)
    T, known = float_targets(labels, task, K)
    data = TrainingSet(jnp.asarray(Xtr), jnp.asarray(T), jnp.asarray(known), jnp.asarray(order), sizes,
                       jnp.asarray(l2, jnp.float32), task)
    marks = [time.perf_counter()]
    fit = core.fit(data, core.FitOptions(max_iter=1), on_loop=lambda: marks.append(time.perf_counter()))
    jax.block_until_ready(fit.W)
    total = time.perf_counter() - marks[0]
    loops = [round(b - a, 2) for a, b in zip(marks[:-1], marks[1:])]
    schedule = "fraction" if n * F >= schedule_thresholds.FRACTION_SCHEDULE_FROM else "joint"
    shapes = [g for g, _ in core.solver_loops(sizes, n, F, schedule)]
    log(f"[{task}] compile (one step per loop) {total:.1f} s; per loop " +
        ", ".join(f"{g}: {t:.1f} s" for g, t in zip(shapes, loops)))
    return {"task": task, "compile_s": round(total, 2), "loops_s": loops}


XLA_DEFAULTS_ENV = "CRS_BENCH_XLA_DEFAULTS"  # --xla-defaults, for child processes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="training images")
    ap.add_argument("--test", type=int, default=5_000, help="test images")
    ap.add_argument("--features", type=int, default=768)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for (b)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--no-multilabel", action="store_true")
    ap.add_argument("--only-multilabel", action="store_true",
                    help="run only the multi-label variant (its figures are then the JSON's top level)")
    ap.add_argument("--skip-plain", action="store_true", help="skip the run without the preconditioner")
    ap.add_argument("--sk-seeds", type=int, default=None,
                    help="time scikit-learn on this many seeds' probes and scale (default: all seeds)")
    ap.add_argument("--quick", action="store_true", help="2,000 x 128, 2 seeds: a smoke test")
    ap.add_argument("--jax-only", action="store_true",
                    help="time only our engine (compile and run), no scikit-learn: for a GPU machine")
    ap.add_argument("--small", action="store_true", help="crs demo's nine pairs: cold, warm and scikit-learn's best")
    ap.add_argument("--store", default=None, help="with --small: take the pairs from this store (default synthetic)")
    ap.add_argument("--small-engine", default=None, help=argparse.SUPPRESS)  # the child process of --small
    ap.add_argument("--side-by-side", action="store_true",
                    help="with --small: also run every L2 value side by side from zero (the path before small "
                         "data walked the L2 path), interleaved with the default, engine and stage")
    ap.add_argument("--compile-only", action="store_true",
                    help="time compiling the grid alone (one step per solver loop), multiclass and multi-label")
    ap.add_argument("--xla-defaults", action="store_true",
                    help="compile the engine's programs with XLA's defaults, not crs.probe.compiled.OPTIONS "
                         "(passed on to --small's child processes)")
    args = ap.parse_args()
    if args.xla_defaults or os.environ.get(XLA_DEFAULTS_ENV):
        from crs.probe import compiled

        os.environ[XLA_DEFAULTS_ENV] = "1"  # the children of --small inherit it
        compiled.use_options(False)
    if args.small_engine:
        small_engine(args.store, tuple(range(args.seeds)), args.max_iter, args.tol, args.small_engine,
                     args.side_by_side)
        return
    if args.small:
        log = lambda m: print(m, flush=True)  # noqa: E731
        print(json.dumps(small(args.store, tuple(range(args.seeds)), args.workers, args.max_iter, args.tol, log,
                               args.side_by_side)))
        return
    if args.quick:
        args.n, args.test, args.features, args.seeds = 2000, 1000, 128, 2
    fractions = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
    seeds = tuple(range(args.seeds))
    log = lambda m: print(m, flush=True)  # noqa: E731
    if args.compile_only:
        tasks = ("multiclass", "multilabel")[args.only_multilabel:2 - args.no_multilabel]
        print(json.dumps([compile_only(t, args.n, args.features, args.classes, seeds, fractions, L2_GRID_8, log)
                          for t in tasks]))
        return
    import jax

    log(f"jax {jax.__version__} on {jax.devices()[0].platform} ({len(jax.devices())} device(s)), "
        f"{os.cpu_count()} CPU cores")
    sk_seeds = min(args.sk_seeds or args.seeds, args.seeds)
    if args.only_multilabel:
        out = bench("multilabel", args.n, args.test, args.features, args.classes, seeds, fractions, L2_GRID_8,
                    args.workers, args.max_iter, args.tol, log, sk_seeds, not args.skip_plain, args.jax_only)
        print(json.dumps({**out, "task": "multilabel"}))
        return
    out = bench("multiclass", args.n, args.test, args.features, args.classes, seeds, fractions, L2_GRID_8,
                args.workers, args.max_iter, args.tol, log, sk_seeds, not args.skip_plain, args.jax_only)
    if not args.no_multilabel:
        out["multilabel"] = bench("multilabel", args.n, args.test, args.features, args.classes, seeds, fractions,
                                  L2_GRID_8, args.workers, args.max_iter, args.tol, log, sk_seeds,
                                  not args.skip_plain, args.jax_only)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
