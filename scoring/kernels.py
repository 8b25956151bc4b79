"""Compiled loops of the image bootstrap (numba), for what numpy can only write as a Python loop.

The exact bootstrap AUROC is a running sum down each class's sorted images, replicate by
replicate. In numpy that takes either a Python loop over the sorted positions or a gathered
[position, class, replicate] copy of the multiplicities summed with a strided cumsum; both
move the whole copy through memory several times per array. Compiled, one pass reads each
image's row of multiplicities once (contiguous, from the cache) and keeps the running totals
of one class in registers. numba is imported here only, on first use (``crs --help`` and the
other stages never load it); ``cache=True`` keeps the machine code beside this file (or in
``NUMBA_CACHE_DIR``), so a later process loads it instead of compiling.
"""

from __future__ import annotations

import warnings

import numpy as np

_KERNELS: dict = {}

# Image-bootstrap work (classes x images x replicates, summed over a process's batches) that numpy's kernel
# (``metrics.weighted_auroc``, the same values to the bit) takes before the compiled pass does: numpy takes
# about 4.2 ns an element here (200 images x 1,000 replicates x 5 classes in 4.2 ms), so 2^28 is about 1.1 s,
# what importing numba and loading the pass from its cache costs (1.2 s: crs demo's 231 arrays, 231 M
# elements); compiling it on a first run (a fresh clone, a new numba) costs 4.2 s more.
NUMPY_WORK = 1 << 28
_numpy_work = [0]


def numpy_takes(work: int) -> bool:
    """Whether a batch of ``work`` elements goes to numpy's kernel: while the compiled pass is not loaded in
    this process and numpy's total stays within ``NUMPY_WORK``; the first batch past it loads the pass, which
    takes every batch after."""
    if "runs" in _KERNELS or _numpy_work[0] + work > NUMPY_WORK:
        return False
    _numpy_work[0] += work
    return True


def _jit(cache: bool):
    import numba  # numba: imported only when scoring resamples images

    return numba.njit(cache=cache, nogil=True, boundscheck=False)(_auroc_rows)


def _run(*args) -> None:
    """``_auroc_rows`` compiled (from the cache where it holds this signature), run on ``args``.

    A cache file that cannot be read (damaged on disk, cut short), or no writable cache folder, makes
    numba raise: the loop is then compiled afresh without the cache, the cache's index is emptied so that the
    next process writes it anew, and a warning says so. An error that is not the cache's is raised
    again by the fresh compile, as it would be without a cache."""
    kernel = _KERNELS.get("runs")
    try:
        if kernel is None:  # numba refuses cache=True where no cache folder is writable: handled below
            kernel = _KERNELS["runs"] = _jit(cache=True)
        kernel(*args)
        return
    except Exception as exc:  # noqa: BLE001 - the cache's, or ours: the compile below tells them apart
        fresh = _jit(cache=False)
        fresh(*args)
        _KERNELS["runs"] = fresh
        cache = getattr(kernel, "_cache", None)
        try:
            cache.flush()
            where = f" ({cache.cache_path})"
        except Exception:  # noqa: BLE001 - an unwritable cache: this process still runs on the fresh compile
            where = ""
        warnings.warn(f"the compiled code cache of crs.scoring.kernels{where} could not be read "
                      f"({type(exc).__name__}: {str(exc)[:120]}); compiled afresh for this run, and the cache "
                      "is rewritten by the next one", RuntimeWarning, stacklevel=3)


def auroc_rows(scores, order, pos, neg, counts) -> np.ndarray:
    """Exact AUROC float64 [class, replicate] of one array's classes under integer multiplicities
    counts [image, replicate].

    ``scores`` [class, image] the array's scores, ``order`` [class, position] each class's images
    in ascending order of score (any order within a tie), ``pos``/``neg`` [class, image] whether
    an image is a known positive / known negative of the class. Per replicate,
    ``metrics.weighted_auroc``'s formula: the sum over positives of its multiplicity times
    (negative multiplicity before its run of tied scores + through that run), halved, over P x N,
    with every sum in int64 (exact) and the same two float64 operations at the end, so the values
    equal the numpy kernel's to the bit. NaN where a replicate has no positive or no negative weight.
    """
    order = np.ascontiguousarray(order, dtype=np.int64)
    scores = np.ascontiguousarray(scores, dtype=np.float64)  # one compiled variant for float32 and float64 arrays
    pos, neg = (np.ascontiguousarray(a, dtype=np.bool_) for a in (pos, neg))
    counts = np.ascontiguousarray(counts)
    if counts.dtype not in (np.int16, np.int32, np.int64):
        counts = counts.astype(np.int64)
    out = np.empty((order.shape[0], counts.shape[1]))
    _run(scores, order, pos, neg, counts, out)
    return out


def _auroc_rows(scores, order, pos, neg, counts, out):  # pragma: no cover - runs compiled
    R, n = order.shape
    B = counts.shape[1]
    cum = np.zeros(B, np.int64)  # negatives' multiplicity so far
    before = np.zeros(B, np.int64)  # ... before the current tie run
    num = np.zeros(B, np.int64)  # twice the positives' weighted count of negatives below (ties one half)
    ptot = np.zeros(B, np.int64)  # positives' multiplicity
    for r in range(R):
        cum[:] = 0
        num[:] = 0
        ptot[:] = 0
        q = 0
        while q < n:
            e = q  # the run of scores equal to this one: positions q..e
            while e + 1 < n and scores[r, order[r, e + 1]] == scores[r, order[r, q]]:
                e += 1
            if e == q:  # a run of one: a negative adds to the total, a positive reads it (before = through)
                o = order[r, q]
                if neg[r, o]:
                    for b in range(B):
                        cum[b] += counts[o, b]
                elif pos[r, o]:
                    for b in range(B):
                        w = np.int64(counts[o, b])
                        num[b] += 2 * w * cum[b]
                        ptot[b] += w
            else:  # a tie run: its negatives first, then each positive reads before + through
                before[:] = cum
                for j in range(q, e + 1):
                    o = order[r, j]
                    if neg[r, o]:
                        for b in range(B):
                            cum[b] += counts[o, b]
                for j in range(q, e + 1):
                    o = order[r, j]
                    if pos[r, o]:
                        for b in range(B):
                            w = np.int64(counts[o, b])
                            num[b] += w * (before[b] + cum[b])
                            ptot[b] += w
            q = e + 1
        for b in range(B):
            den = np.float64(ptot[b]) * np.float64(cum[b])
            out[r, b] = (np.float64(num[b]) / 2.0) / den if den > 0 else np.nan
