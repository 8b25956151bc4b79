"""Fixed shapes for the probe stage's many small programs: shape buckets and padded, batched calls.

Every distinct array shape a jitted function sees is one more program to compile, and on small
data compiling costs more than running. So the evaluation programs (predictions, validation
loss, metrics) see only a few shapes: rows padded to a shape bucket (``shape_bucket``) with a
mask saying which rows count, and probes taken a fixed batch at a time (``per_probe``). The
padding is inert by construction: padded rows have a known-label mask of 0, and each
function's value on the probes and rows that count is the one it has on the unpadded arrays.
"""

from __future__ import annotations

import numpy as np


def shape_bucket(v: int) -> int:
    """The smallest of 16, 24, 32, 48, 64, 96, ... (2^k and 3 * 2^(k-1)) that is at least v."""
    b = 16
    while b < v:
        b = b * 3 // 2 if b & (b - 1) == 0 else b * 4 // 3
    return b


PROBE_BATCH = 64  # probes per call of a ``per_probe`` function or a prediction (the last batch padded)
MIN_ROWS = 256  # ``per_probe`` pads every set to at least this many rows: small sets share one program


def row_mask(known, counted=None) -> np.ndarray:
    """The known-label mask [n, K] (float32) with the rows not ``counted`` ([n] bool) set to 0."""
    known = np.asarray(known, np.float32)
    return known if counted is None else known * np.asarray(counted, np.float32)[:, None]


def per_probe(fn, probs, T, known, task: str, counted=None) -> np.ndarray:
    """``fn`` of every probe of probs [..., n, K] against one T, known [n, K]: [..., *out].

    ``fn(P [PROBE_BATCH, n', K], T [n', K], known [n', K], task) -> [PROBE_BATCH, *out]`` is a
    jitted function vmapped over probes whose rows with known = 0 count nowhere (multiclass:
    a row counts where known[:, 0] is 1). The rows are padded to n' = ``shape_bucket(n)``, at
    least ``MIN_ROWS`` (known 0, probabilities 0), and the rows not ``counted`` ([n] bool,
    default all) get known 0 too; probes go PROBE_BATCH at a time, so sets of nearby sizes share
    one compiled program.
    """
    probs = np.asarray(probs, np.float32)
    lead, (n, K) = probs.shape[:-2], probs.shape[-2:]
    n_pad = shape_bucket(max(n, MIN_ROWS))
    Tp = np.zeros((n_pad, K), np.float32)
    kp = np.zeros((n_pad, K), np.float32)
    Tp[:n], kp[:n] = T, row_mask(known, counted)
    out = in_batches(lambda P: fn(P, Tp, kp, task), probs.reshape((-1, n, K)), pad_to=((n_pad, K),))
    return out.reshape(lead + out.shape[1:])


def in_batches(fn, *arrays, pad_to=None) -> np.ndarray:
    """fn over the probes of ``arrays`` (each [P, ...], float32), ``PROBE_BATCH`` at a time: each batch
    zero-padded to PROBE_BATCH probes (and each array's trailing axes to its shape in ``pad_to``, a
    shape per array, where given), so every call has one shape; fn's outputs [PROBE_BATCH, ...] for
    the real probes, concatenated: [P, ...] on the host."""
    P = arrays[0].shape[0]
    outs = []
    for lo in range(0, P, PROBE_BATCH):
        batch = []
        for i, a in enumerate(arrays):
            part = a[lo:lo + PROBE_BATCH]
            full = np.zeros((PROBE_BATCH,) + (a.shape[1:] if pad_to is None else pad_to[i]), np.float32)
            full[(slice(0, len(part)),) + tuple(slice(0, m) for m in part.shape[1:])] = part
            batch.append(full)
        outs.append(np.asarray(fn(*batch))[:min(PROBE_BATCH, P - lo)])
    return np.concatenate(outs) if outs else np.zeros((0,), np.float32)


PREDICT_ROWS = 2048  # rows per call of a head's prediction (``chunked_rows``)


def chunked_rows(predict, arrays, index=None, prepare=None, rows: int = PREDICT_ROWS) -> list[np.ndarray]:
    """``predict(prepare(A) [rows, F'], index) -> [..., rows, K]`` over the rows of every array of
    ``arrays`` ([m_i, F] each), ``rows`` at a time across them (the last chunk padded with zero
    rows after ``prepare``), so every call has one shape: [[..., m_i, K] for each array], on the
    host. ``prepare`` (default none) maps a chunk of rows to what ``predict`` takes, such as the
    standardised features, so only one chunk at a time is held prepared."""
    sizes = [int(a.shape[0]) for a in arrays]
    edges = np.cumsum([0] + sizes)
    total = int(edges[-1])
    out = None
    for lo in range(0, total, rows):
        hi = min(lo + rows, total)
        parts = [a[max(lo, s) - s:min(hi, e) - s]
                 for a, s, e in zip(arrays, edges[:-1], edges[1:]) if s < hi and e > lo]
        chunk = np.concatenate(parts) if len(parts) > 1 else parts[0]
        chunk = chunk if prepare is None else prepare(chunk)
        if len(chunk) < rows:
            chunk = np.concatenate([chunk, np.zeros((rows - len(chunk),) + chunk.shape[1:], chunk.dtype)])
        probs = np.asarray(predict(chunk, index))
        if out is None:
            out = np.empty(probs.shape[:-2] + (total, probs.shape[-1]), np.float32)
        out[..., lo:hi, :] = probs[..., :hi - lo, :]
    if out is None:
        raise ValueError("chunked_rows needs at least one row to predict")
    return [out[..., s:e, :] for s, e in zip(edges[:-1], edges[1:])]
