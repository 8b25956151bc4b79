"""Which solver loops a fit runs, in what shapes, and how much memory each may use.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import numpy as np

from crs.probe.blocks import plan_blocks
from crs.probe.padded import shape_bucket

FRACTION_SCHEDULE_FROM = 1 << 22  # rows x features (about 5,500 x 768) from which a loop per fraction pays


ONE_BLOCK_BELOW = 1 << 20  # rows x features under which a joint loop is one dense block (``solver_loops``)


SHARED_LOOP_BELOW = 1 << 20  # rows x features under which small fractions share one loop (``solver_loops``)


def warm_path(shape, schedule: str, buckets: bool = True) -> bool:
    """Whether ``fit``'s "auto" walks the L2 path (``warm_start``): for the one-dense-block joint loops of
    small data (under ``ONE_BLOCK_BELOW`` training values), the loops that shape buckets serve.

    There a step's fixed work (the line search, the L-BFGS recursion, some hundred kernels) costs
    more than its products, and the weakly regularised probes set the loop's length: started from
    zero they take several times the steps of the strong ones. Started from the next stronger
    penalty's solution they take far fewer, so the L2 values one after the other, each a loop over a
    quarter of the probes, run in less time than all of them side by side. Large data keeps the side by
    side loops, whose products dominate (its one-fraction loops in two halves, ``_stages``)."""
    return buckets and schedule == "joint" and shape[0] * shape[1] < ONE_BLOCK_BELOW


def checked_schedule(sizes, schedule: str, shape) -> tuple[tuple[int, ...], str]:
    """The subset sizes as ints, checked, and the schedule with "auto" resolved for X of ``shape``."""
    sizes = tuple(int(v) for v in sizes)
    if list(sizes) != sorted(sizes) or not 0 < sizes[0] or sizes[-1] > shape[0]:
        raise ValueError(f"subset sizes must increase within 1..{shape[0]}, got {sizes}")
    if schedule not in ("auto", "fraction", "joint"):
        raise ValueError(f"schedule must be 'auto', 'fraction' or 'joint', not {schedule!r}")
    if schedule == "auto":
        schedule = "fraction" if shape[0] * shape[1] >= FRACTION_SCHEDULE_FROM else "joint"
    return sizes, schedule


def loop_count(sizes, n: int, F: int, schedule: str = "auto") -> int:
    """How many solver loops ``fit`` runs on n x F training features (``solver_loops``)."""
    sizes, schedule = checked_schedule(sizes, schedule, (n, F))
    return len(solver_loops(sizes, n, F, schedule))


def solver_loops(sizes, n: int, F: int, schedule: str, min_block_rows: int | None = None):
    """The solver loops of a schedule: (fractions' subset sizes, row blocks) for each.

    "joint": one loop over every fraction. "fraction": a loop per fraction, except that
    the smallest subsets (under ``SHARED_LOOP_BELOW`` rows x features) share one loop:
    their products cost little next to a step's fixed work, and each loop is one more
    program to compile (sharing trades a little run time, as the shared subsets no
    longer stop one by one, for much less compile time). A joint loop on fewer than
    ``ONE_BLOCK_BELOW`` training values, and the shared loop under that many rows x features,
    multiply all their rows as one dense block (unless ``min_block_rows`` says otherwise): each
    block is more code to compile, and on such data compiling costs more than the products the
    blocks save (benchmarks/probe_bench.py measures the trade).
    """
    sizes = tuple(sizes)
    if schedule == "joint":
        return [(sizes, _small_dense(sizes, n, F, min_block_rows))]
    small = tuple(m for m in sizes if m * F < SHARED_LOOP_BELOW and m < n)
    if len(small) < 2:
        small = ()
    loops = [(small, _small_dense(small, small[-1], F, min_block_rows))] if small else []
    return loops + [((m,), ((0, m, 0),)) for m in sizes[len(small):]]


def _small_dense(sizes, rows: int, F: int, min_block_rows: int | None):
    """``plan_blocks`` for a loop over ``rows`` rows: one dense block under ``ONE_BLOCK_BELOW`` rows x features
    (a far smaller program, for a little more run time), unless ``min_block_rows`` is given."""
    if min_block_rows is None and rows * F < ONE_BLOCK_BELOW:
        min_block_rows = rows
    return plan_blocks(sizes, min_block_rows)


class Loop(NamedTuple):
    """One solver loop's data as its program sees it."""

    Xs: jax.Array  # [rows, F'] features (in the eigenbasis when preconditioning)
    T: jax.Array  # [rows, K]
    known: jax.Array  # [rows, K]
    order: jax.Array  # [S, n'] each seed's rows in subset order, the loop's n' first
    sizes: object  # static tuple, or an int32 array [Fr] where the shapes are bucketed
    blocks: tuple
    n_features: object  # None, or F (an int32 scalar) where F' holds padding


def bucketed(loop: Loop) -> Loop:
    """The loop's data padded to a shape bucket (rows: ``shape_bucket``; features: ``small_width``), so one
    compiled program serves every problem of the same bucket, task, class count and grid.

    Padding is inert: the padded features are zero columns (their gradient is l2 W = 0 from
    W = 0, so their weights stay 0), the padded rows come after the last subset in every seed's
    order (no subset holds them; their targets and known-label mask are 0), and the subset
    sizes and the feature count become values of the program instead of constants.
    """
    Xs, T, known, order, sizes = loop.Xs, loop.T, loop.known, loop.order, loop.sizes
    N, F = Xs.shape
    n = sizes[-1]
    n_pad = shape_bucket(n)
    F_pad = small_width(n_pad, F)
    pad = ((0, n_pad - n), (0, 0))
    Xs = np.pad(np.asarray(Xs), ((0, n_pad - n), (0, F_pad - F)))  # on the host: see ``fit``
    tail = np.broadcast_to(np.arange(N, N + n_pad - n, dtype=order.dtype), (order.shape[0], n_pad - n))
    order = np.concatenate([np.asarray(order)[:, :n], tail], axis=1)
    return Loop(Xs, np.pad(np.asarray(T), pad), np.pad(np.asarray(known), pad), order, np.asarray(sizes, np.int32),
                 ((0, n_pad, 0),), np.int32(F))


SMALL_WIDTH = 384  # the narrowest features a bucketed loop sees (``small_width``)


def small_width(n_rows: int, F: int) -> int:
    """The width F features of a bucketed loop of ``n_rows`` (padded) rows are padded to: at least
    ``SMALL_WIDTH`` while the padded problem stays under ``ONE_BLOCK_BELOW`` values, else F's shape bucket.

    So narrow encoders share one compiled program with each other and with 384-wide ones (crs demo's
    50- to 367-wide features: two solver programs instead of six). Each costs seconds to
    compile, more than the zero columns cost to run where a loop holds under a million values and a
    step's fixed work outweighs its products (``warm_path``)."""
    wide = max(SMALL_WIDTH, shape_bucket(F))
    return wide if n_rows * wide < ONE_BLOCK_BELOW else shape_bucket(F)


def one_dense_block(sizes, blocks, shape) -> bool:
    """Whether a loop is the one-dense-block joint loop of small data (``solver_loops``), the loop that
    shape buckets serve: several fractions, all rows one block, under ``ONE_BLOCK_BELOW`` training values."""
    return len(sizes) > 1 and blocks == ((0, sizes[-1], 0),) and shape[0] * shape[1] < ONE_BLOCK_BELOW


def memory_budget(device) -> int:
    """Bytes the probe working set may use: 60 % of the device's memory (of what is free on a CPU)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 (backends without memory stats)
        stats = {}
    if "bytes_limit" in stats:
        return int(0.6 * (stats["bytes_limit"] - stats.get("bytes_in_use", 0)))
    try:
        return int(0.6 * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


HISTORY = 10  # L-BFGS pairs kept per probe (``lbfgs.run``'s default)


ITEMSIZE = 4  # float32


def working_set_bytes(n: int, F: int, K: int, S: int, sizes, blocks, L: int) -> int:
    """An upper estimate of the solver's memory for S seeds and L L2 values on one device.

    The seeds' rows in subset order and transposed (2 x S x n x F), about six live copies of the block
    logits (logits, their change, link values, gradients and trial temporaries), and the
    L-BFGS history (2 m vectors per probe).
    """
    Fr = len(sizes)
    logits = sum((hi - lo) * (Fr - first) for lo, hi, first in blocks) * L * K * S
    d = F * K + K
    history = (2 * HISTORY + 6) * S * Fr * L * d
    return ITEMSIZE * (2 * S * n * F + 6 * logits + history)
