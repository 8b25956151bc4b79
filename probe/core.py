"""Linear probes in pure JAX: every seed, label fraction and L2 strength in few compiled programs.

``fit`` is the driver: it resolves the options, plans the solver loops (``crs.probe.schedule``),
rotates the features into the covariance eigenbasis (``crs.probe.precondition``), gathers each
seed's rows into subset order once per seed group (S copies, never one per probe) and runs one
compiled solver loop per group (``crs.probe.solver``), shared across devices along the L2 axis.
The objective is ``crs.probe.objective``'s, multiplied block by block (``crs.probe.blocks``);
predictions and validation losses are ``crs.probe.predict``'s. The names other layers use are
re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from threadpoolctl import threadpool_limits

from crs.probe import compiled
from crs.probe.blocks import block_logits, block_logits_T, plain_products, plan_blocks, transposed_blocks
from crs.probe.objective import Labels, blocked_objectives, link_values, loss_change, loss_from_logits, objective
from crs.probe.precondition import ISOTROPIC_BELOW, rotated, second_moments, unrotate
from crs.probe.predict import log_link, log_probabilities, predict, probabilities, validation_loss, validation_losses
from crs.probe.problem import TrainingSet
from crs.probe.schedule import (
    ONE_BLOCK_BELOW,
    SMALL_WIDTH,
    Loop,
    bucketed,
    checked_schedule,
    loop_count,
    memory_budget,
    one_dense_block,
    small_width,
    solver_loops,
    warm_path,
    working_set_bytes,
)
from crs.probe.solver import Fit, LoopPlan, Rows, Stop, fit_loop

__all__ = [  # the fit and, re-exported, what other layers and the tests use of the modules it drives
    "DEFAULT_GAP", "ISOTROPIC_BELOW", "ONE_BLOCK_BELOW", "SMALL_WIDTH", "Fit", "FitOptions", "Labels",
    "block_logits", "block_logits_T", "blocked_objectives", "fit", "link_values", "log_link", "log_probabilities",
    "loop_count", "loss_change", "loss_from_logits", "memory_budget", "objective", "plain_products", "plan_blocks",
    "predict", "probabilities", "second_moments", "small_width", "solver_loops", "transposed_blocks",
    "validation_loss", "validation_losses", "warm_path", "working_set_bytes",
]

DEFAULT_GAP = 1e-3  # each probe's bound on (f - f*) / f, beside the gradient tolerance (``fraction_gap``)


@dataclass(frozen=True)
class FitOptions:
    """How ``fit`` solves; the defaults are what ``crs probe`` uses (``fit`` says what each does)."""

    max_iter: int = 1000
    tol: float = 1e-4
    gap: float | None = DEFAULT_GAP
    min_block_rows: int | None = None
    precondition: bool = True
    warm_start: bool | str = "auto"
    devices: tuple | None = None
    max_bytes: int | None = None
    schedule: str = "auto"
    buckets: bool = True


class _Solver(NamedTuple):
    """What every loop of one ``fit`` shares: the task and the resolved options."""

    task: str
    warm_start: bool
    precondition: bool
    max_iter: int
    tol: float
    gap: float | None
    devices: tuple
    budget: int  # bytes (``memory_budget``)


def fit(data: TrainingSet, options: FitOptions = FitOptions(), on_loop=None) -> Fit:
    """Fit every probe at once.

    ``data``: X [n, F] standardised training features; T, known [n, K] targets and known-label mask;
    order [S, n] each seed's subset order of the rows; sizes: the subset size of each
    fraction, increasing (static); grid: l2 [L]; the task. Returns a Fit with leading axes [S, Fr, L].
    The ``options`` fields:

    ``schedule`` "fraction" gives each label fraction its own solver loop over all its seeds and L2 values,
    so the large subsets, which cost the most per step and converge in the fewest, stop as soon as they are
    done; a whole-training-set fraction is one problem for every seed and is solved once. "joint" runs every
    probe in one loop (one compiled program, rows multiplied block by block: ``min_block_rows``), which wins
    when compiling costs more than the products. ``solver_loops`` gives the loops of each; "auto" (the
    default) picks "fraction" from ``FRACTION_SCHEDULE_FROM`` rows x features up.

    ``precondition`` solves in the coordinates of ``preconditioner`` (same minimiser, far fewer iterations
    on the anisotropic features encoders produce). ``warm_start`` walks the L2 path from the strongest
    penalty to the weakest, each L2 value's probes (every seed and fraction at once) starting from the
    previous value's solution; without it, every probe starts from zero and all L2 values run side by side.
    Either way, each probe runs to its own gradient tolerance. "auto" (the default) walks the path on small
    data (``warm_path``), where a step's fixed work outweighs its products, and runs side by side otherwise.

    ``devices`` (default: every device JAX sees) share the probes along the L2 axis, each running its own
    solver loop on its share (``jax.shard_map``); the grid is padded to a multiple of the device count and
    the padding dropped. ``max_bytes`` (default: from the device's memory, ``memory_budget``) bounds the
    working set: when all seeds at once would exceed it, seeds are fitted in groups, one compiled program
    reused per group.

    ``buckets``: small joint loops run padded to a shape bucket (``bucketed``), so problems of
    nearby shapes share one compiled program: on small data compiling costs more than fitting.

    ``on_loop`` (where given) is called with no arguments as each solver loop finishes
    (``loop_count`` of them), so a caller can report progress per loop.
    """
    X, T, known, order, o = data.X, data.T, data.known, data.order, options
    sizes, schedule = checked_schedule(data.sizes, o.schedule, X.shape)
    warm_start = o.warm_start
    if warm_start == "auto":
        warm_start = warm_path(X.shape, schedule, o.buckets and o.min_block_rows is None)
    devices = tuple(o.devices) if o.devices is not None else tuple(jax.devices())
    V, Xs = rotated(X, o.precondition)
    # what passes between the compiled programs (orders, results) is handled on the host in numpy:
    # an eager jnp operation compiles a program of its own for every new shape
    order = np.asarray(order)
    S = order.shape[0]
    path, grid = _device_grid(data.grid, warm_start, len(devices), X.dtype)
    budget = memory_budget(devices[0]) if o.max_bytes is None else o.max_bytes
    solver = _Solver(data.task, warm_start, o.precondition, o.max_iter, o.tol, o.gap, devices, budget)
    fits = []
    for g_sizes, blocks in solver_loops(sizes, X.shape[0], X.shape[1], schedule, o.min_block_rows):
        g_order = order[:1] if g_sizes == (X.shape[0],) else order  # the whole set: one problem, whatever the seed
        bucket = o.buckets and o.min_block_rows is None and one_dense_block(g_sizes, blocks, X.shape)
        loop = Loop(Xs, T, known, g_order, g_sizes, blocks, None)
        out = _fit_group(bucketed(loop) if bucket else loop, grid, V, solver)
        _one_full_set_probe(out, g_sizes, X.shape[0])
        fits.append(jax.tree.map(lambda a: np.broadcast_to(a, (S,) + a.shape[1:]), out))
        if on_loop is not None:
            on_loop()
    return _gathered(fits, path, devices)


def _gathered(fits: list[Fit], path: np.ndarray, devices) -> Fit:
    """The solver loops' results joined along the fraction axis, in grid order (padding dropped), where
    ``fit`` leaves them (``_placement``)."""
    out = jax.tree.map(lambda *a: np.concatenate(a, axis=1), *fits) if len(fits) > 1 else fits[0]
    back = np.argsort(path)
    return jax.tree.map(lambda a: jax.device_put(a[:, :, back], _placement(devices)), out)


def _placement(devices):
    """Where ``fit`` leaves its results: the device, or every device of a shared fit (replicated)."""
    if len(devices) == 1:
        return devices[0]
    return NamedSharding(Mesh(np.array(devices), ("probes",)), P())


def _device_grid(l2, warm_start: bool, n_dev: int, dtype):
    """(path, grid): the L2 values in solving order (strongest first with ``warm_start``), padded
    with the last one to a multiple of ``n_dev`` so each device gets a contiguous share;
    ``argsort(path)`` takes the results back to grid order, padding dropped."""
    L = l2.shape[0]
    L_pad = -(-L // n_dev) * n_dev
    path = np.argsort(-np.asarray(l2), kind="stable") if warm_start else np.arange(L)
    grid = np.asarray(np.concatenate([np.asarray(l2)[path], np.repeat(np.asarray(l2)[path][-1:], L_pad - L)]), dtype)
    return path, grid


def _one_full_set_probe(out, sizes, n_rows: int) -> None:
    """Give every seed seed 0's whole-training-set probe, in place, where a shared loop fitted it per seed.

    Each seed fitted the whole set in its own row order: the same problem, equal up to rounding. Every
    seed takes seed 0's, as a loop of the whole set alone does, so the seeds' full-label probes are one
    probe, bit for bit (the image bootstrap scores it once). ``out``: the loop's result arrays
    [seed, fraction, ...]; ``sizes``: its fractions' subset sizes."""
    if sizes[-1] == n_rows and len(sizes) > 1:
        for a in out:
            a[:, -1] = a[0, -1]


def _fit_group(lp: Loop, grid, V, solver: _Solver):
    """The probes of one solver loop's fractions for the seeds of ``lp.order``: one compiled loop run per
    seed group (on data padded to a shape bucket where ``lp.n_features`` is set, ``bucketed``)."""
    bucket = lp.n_features is not None
    S, F = lp.order.shape[0], int(lp.n_features) if bucket else lp.Xs.shape[1]
    n, Fr = lp.blocks[-1][1], len(lp.sizes)
    L_local = grid.shape[0] // len(solver.devices)
    per_seed = working_set_bytes(n, lp.Xs.shape[1], lp.T.shape[1], 1, lp.sizes, lp.blocks, L_local)
    group = int(max(1, min(S, (solver.budget - lp.Xs.size * lp.Xs.dtype.itemsize * 2) // max(per_seed, 1))))
    # one fraction per loop: its L2 values in two halves, one after the other (``_stages``)
    run = _sharded(solver.devices, solver.task, Fr if bucket else lp.sizes, lp.blocks, bool(solver.warm_start),
                   solver.precondition, halves=Fr == 1)
    dims = (lp.sizes, lp.n_features) if bucket else ()
    dtype = lp.Xs.dtype
    # numpy, not jnp.asarray, which compiles a program per shape
    stop = Stop(np.int32(solver.max_iter), np.asarray(solver.tol, dtype),
                np.asarray(np.inf if solver.gap is None else solver.gap, dtype))
    prepare = _prepare_host if bucket else _prepare
    parts = []
    for lo in range(0, S, group):
        seeds = np.asarray(lp.order)[lo:lo + group, :n]
        if seeds.shape[0] < group:  # same shapes for every group: one compiled program
            seeds = np.concatenate([seeds, np.repeat(seeds[-1:], group - seeds.shape[0], axis=0)])
        rows = prepare(lp.Xs, lp.T, lp.known, seeds, lp.sizes, lp.blocks, solver.precondition)
        out = run(rows, grid, stop, *dims)
        del rows
        out = jax.tree.map(np.array, out)  # on the host (``fit``), writable
        if lp.Xs.shape[1] != F:
            out = out._replace(W=out.W[..., :F, :])  # the padded features' weights, all 0
        if V is not None:
            out = out._replace(W=unrotate(V, out.W))
        parts.append(jax.tree.map(lambda a, lo=lo: a[: min(group, S - lo)], out))
    return jax.tree.map(lambda *a: np.concatenate(a, axis=0), *parts) if len(parts) > 1 else parts[0]


def _sharded(devices, task, sizes, blocks, warm_start, precondition=True, halves=False):
    """The compiled solver loop: ``sizes`` static (a tuple), or the number of fractions (an int),
    where the sizes and the feature count come as arguments (``bucketed``)."""
    key = (tuple(devices), task, sizes, blocks, warm_start, precondition, halves)
    if key not in _PROGRAMS:
        dynamic = isinstance(sizes, int)

        plan = LoopPlan(task, blocks, warm_start, halves)

        def local(rows, l2, stop, *dims):
            sz, n_features = dims if dynamic else (sizes, None)
            return fit_loop(rows, l2, stop, plan, sz, n_features)

        if len(devices) == 1:
            _PROGRAMS[key] = compiled.jit(local)
        else:
            mesh = Mesh(np.array(devices), ("probes",))
            spec = P(None, None, "probes")
            specs = (P(), P("probes"), P()) + ((P(), P()) if dynamic else ())
            _PROGRAMS[key] = compiled.jit(jax.shard_map(
                local, mesh=mesh, in_specs=specs, out_specs=Fit(spec, spec, spec, spec, spec), check_vma=False))
    return _PROGRAMS[key]


_PROGRAMS: dict = {}


def _prepare_impl(Xs, T, known, order, sizes, blocks, precondition):
    """Rows in each seed's subset order (Xs already in the eigenbasis when preconditioning).

    Also each block's rows transposed, for the logits' product: made here, outside the
    solver's program, because XLA otherwise re-makes the transposed copy in every
    iteration.
    """
    Xo, To, ko = Xs[order], T[order], known[order]  # [S, n, .]: one copy per seed, never one per probe
    XoT = transposed_blocks(Xo, blocks)
    m2 = second_moments(Xo, sizes) if precondition else None
    return Rows(Xo, XoT, To, ko, m2)


_prepare = compiled.jit(_prepare_impl, static_argnums=(4, 5, 6))


def _prepare_host(Xs, T, known, order, sizes, blocks, precondition):
    """``_prepare_impl`` in numpy, for the small loops of shape buckets (``bucketed``: ``sizes`` an
    int array [Fr]): a few milliseconds of gathers there, against a program to compile per bucket."""
    Xs = np.asarray(Xs, np.float32)
    Xo, To, ko = Xs[order], np.asarray(T)[order], np.asarray(known)[order]
    XoT = tuple(np.ascontiguousarray(np.swapaxes(Xo[:, lo:hi], 1, 2)) for lo, hi, _ in blocks)
    m2 = None
    if precondition:  # ``second_moments``: the mean square of every feature over every subset
        inside = (np.arange(Xo.shape[1])[None, :] < np.asarray(sizes)[:, None]).astype(np.float32)  # [Fr, n]
        with threadpool_limits(1):
            m2 = np.matmul(inside, Xo * Xo) / np.asarray(sizes, np.float32)[None, :, None]  # [S, Fr, F]
    return Rows(Xo, XoT, To, ko, m2)
