"""Linear probes in pure JAX: every seed, label fraction and L2 strength in one program.

Objective of one probe (features already standardised; bias not penalised)::

    multiclass:  (1 / n_s) * sum_{i in s} CE(softmax(x_i W + b), y_i)   + (l2 / 2) * ||W||^2
    multilabel:  sum_k (1 / n_sk) * sum_{i in s, label k known} BCE(sigmoid(x_i w_k + b_k), y_ik)
                 + (l2 / 2) * ||W||^2

where ``s`` is the probe's label subset and ``n_s`` its size. Subsets are nested
prefixes of one order per seed, so the rows are multiplied block by block, each block
only by the probes whose subsets reach into it (``plan_blocks``). The multilabel objective is a
sum of independent per-label problems, each averaged over its known labels (unknown
labels, such as CheXpert's U-Ignore, are masked, not guessed). The multiclass one is
scikit-learn's LogisticRegression(C) objective divided by C * n_s, so
``C = 1 / (l2 * n_s)``; the multilabel one is K binary LogisticRegressions with
``C_k = 1 / (l2 * n_sk)``.

The solver (``crs.probe.lbfgs``) is L-BFGS with a backtracking Armijo line search, over the whole
batch of probes in one unbatched ``lax.while_loop`` (so ring-buffer indices stay
scalars, which XLA handles far better than per-probe gathers). The logits are linear in
the parameters, so the line search moves in logit space and its trial points cost no
matrix product. It stops each probe when the gradient's largest component falls below
``tol``, when no decrease can be found, or after ``max_iter`` steps; every probe reports
whether it converged and how many steps it took, and finished probes are frozen while
the slowest ones go on.

Embeddings X [image, feature] are gathered once per seed into subset order and shared
by every probe of that seed (S copies, never one per probe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crs.probe import lbfgs, padded
from crs.probe.lbfgs import dot as _dot
from crs.probe.padded import shape_bucket
from crs.probe.problem import TrainingSet


class Labels(NamedTuple):
    """What a loop's objective reads besides the weights: the targets in each seed's subset order,
    and the static layout of the subsets (``plan_blocks``)."""

    To: jax.Array  # [S, n, K] targets in {0, 1}
    ko: jax.Array  # [S, n, K] known-label mask
    sizes: object  # the subset sizes: static ints, or an int array [Fr] (``fit``'s shape buckets)
    blocks: tuple  # ((lo, hi, first fraction), ...)
    task: str  # static


class Rows(NamedTuple):
    """A loop's training rows in each seed's subset order (``_prepare``): one copy per seed, never one per probe."""

    Xo: jax.Array  # [S, n, F] features (in the eigenbasis when preconditioning)
    XoT: tuple  # each block's rows transposed, [S, F, hi - lo]
    To: jax.Array  # [S, n, K]
    ko: jax.Array  # [S, n, K]
    m2: object  # [S, Fr, F] ``second_moments`` when preconditioning, else None


class Stop(NamedTuple):
    """When a probe is done (values of the program, so changing them compiles nothing): ``_solve``."""

    max_iter: jax.Array  # int32 scalar
    tol: jax.Array  # on the preconditioned gradient's largest component
    gap: jax.Array  # bound on (f - f*) / f (inf: none), broadcasting to [S, Fr, L]


class Fit(NamedTuple):
    W: jax.Array  # [..., feature, class]
    b: jax.Array  # [..., class]
    converged: jax.Array  # [...] bool
    iterations: jax.Array  # [...] int32
    grad_norm: jax.Array  # [...] largest gradient component at the end


def _data_loss(params, X, T, weight, task):
    """Mean loss of one probe. X [n, F]; T [n, K] targets in {0, 1}; weight [n, K] >= 0."""
    W, b = params
    logits = X @ W + b  # [n, K]
    if task == "multiclass":
        ce = -(T * jax.nn.log_softmax(logits)).sum(-1)  # [n]
        w = weight[:, 0]
        return (w * ce).sum() / jnp.maximum(w.sum(), 1.0)
    bce = optax.sigmoid_binary_cross_entropy(logits, T)  # [n, K]
    per_label = (weight * bce).sum(0) / jnp.maximum(weight.sum(0), 1.0)
    return per_label.sum()


def objective(params, X, T, weight, l2, task):
    """One probe's objective with a 0/1 weight per row: the plain definition above.

    The solver uses ``blocked_objectives``; this is the slow, obvious reference it is
    tested against.
    """
    W, _ = params
    return _data_loss(params, X, T, weight, task) + 0.5 * l2 * jnp.sum(W * W)


def _dot2(a, b):
    """<a, b> over the last two axes (weights [..., F, K])."""
    return jnp.einsum("...fk,...fk->...", a, b)


def _split(x, F, K):
    return x[..., : F * K].reshape(x.shape[:-1] + (F, K)), x[..., F * K :]


MIN_BLOCK_SHARE = 0.1  # a block holds at least this share of the rows (benchmarks/probe_bench.py)


def plan_blocks(sizes: tuple[int, ...], min_rows: int | None = None) -> tuple[tuple[int, int, int], ...]:
    """Split the rows (in subset order) into blocks (lo, hi, first fraction using them).

    Subsets are nested prefixes: fraction j uses rows ``:sizes[j]``. A block of rows is
    multiplied only by the probes of the fractions that reach into it, so small subsets
    never pay for the rows they do not use. Each block costs compile time, so blocks
    smaller than ``min_rows`` are merged with the next one and the probes whose subsets
    end inside a block mask the rest of it: small problems get one dense block, large
    ones up to one block per fraction. Default ``min_rows``: 10 % of the rows, which gives
    four blocks for the default fractions (1, 2, 5, 10 % | 25 | 50 | 100 %).
    """
    if min_rows is None:
        min_rows = max(1, math.ceil(MIN_BLOCK_SHARE * sizes[-1]))
    blocks, lo = [], 0
    for j, hi in enumerate(sizes):
        if hi - lo >= min_rows or j == len(sizes) - 1:
            first = next(k for k, m in enumerate(sizes) if m > lo)
            blocks.append((lo, hi, first))
            lo = hi
    return tuple(blocks)


def _columns(W):
    """Weights [S, J, L, F, K] as one matrix per seed, [S, F, J L K]: every probe's classes side by side."""
    S, J, L, F, K = W.shape
    return jnp.moveaxis(W, 3, 1).reshape(S, F, J * L * K)


def transposed_blocks(Xo, blocks) -> tuple:
    """Each block's rows of Xo [S, n, F] transposed, [S, F, hi - lo]: the XoT of ``block_logits``."""
    return tuple(jnp.swapaxes(Xo[:, lo:hi], 1, 2) for lo, hi, _ in blocks)


def plain_products(shape) -> bool:
    """Whether a solver loop of x's ``shape`` [S, Fr, L, d] multiplies in the plain forms of ``block_logits``:
    the loops of one fraction, whose few dozen columns per seed (L x K) meet thousands of rows.

    There XLA:CPU ran the products straight into the logits' rows-last layout at about half the rate of
    plain per-seed products; for the several fractions of a shared or joint loop (a hundred columns and
    more, a thousand rows or fewer) it was the other way round (benchmarks/probe_bench.py)."""
    return shape[1] == 1


def block_logits(x, Xo, blocks, XoT=None, plain=False):
    """Logits per block, linear in x [S, Fr, L, d]: [S, Fr - first, L, K, hi - lo] each.

    Xo [S, n, F] holds the training rows in each seed's subset order (``plan_blocks``);
    XoT, where given, each block's rows transposed ([S, F, hi - lo]), which lets the
    product run without a transposed copy. Rows are the last axis, so the per-row work
    over a handful of classes runs along long contiguous vectors. ``plain`` (``plain_products``):
    each seed's rows times its weights as one plain product (rows x features times features x
    probes' classes), turned rows-last afterwards; XoT is then not used.
    """
    F = Xo.shape[-1]
    W, b = _split(x, F, x.shape[-1] // (F + 1))
    if XoT is None and not plain:
        XoT = transposed_blocks(Xo, blocks)
    out = []
    for i, (lo, hi, first) in enumerate(blocks):
        Wb = W[:, first:]
        if plain:  # the barrier keeps XLA from fusing the turn into the product, which ran it 3-5x slower
            z = jax.lax.optimization_barrier(jnp.einsum("snf,sfc->snc", Xo[:, lo:hi], _columns(Wb)))
            z = jnp.swapaxes(z, 1, 2).reshape(Wb.shape[:3] + (Wb.shape[-1], hi - lo))  # [S, J, L, K, rows]
        else:
            z = jnp.einsum("sfn,sjlfk->sjlkn", XoT[i], Wb)
        out.append(z + b[:, first:, :, :, None])
    return tuple(out)


def block_logits_T(dZ, Xo, blocks, shape, XoT=None, plain=False):
    """The transpose of ``block_logits``: cotangents per block -> x [S, Fr, L, d].

    Contracts each block's rows with Xo [S, n, F] as stored (rows major), so no transposed copy
    of X is made per iteration; ``plain``: with the block's transposed rows XoT (made from Xo where
    not given) as one plain product per seed, features x rows times rows x probes' classes.
    """
    S, Fr, L, d = shape
    F = Xo.shape[-1]
    K = d // (F + 1)
    gW = jnp.zeros((S, Fr, L, F, K), dZ[0].dtype)
    gb = jnp.zeros((S, Fr, L, K), dZ[0].dtype)
    if XoT is None and plain:
        XoT = transposed_blocks(Xo, blocks)
    for i, ((lo, hi, first), dz) in enumerate(zip(blocks, dZ)):  # dz [S, Fr - first, L, K, nb]
        if plain:
            J = Fr - first
            rows = jnp.swapaxes(dz.reshape(S, J * L * K, hi - lo), 1, 2)  # [S, nb, J L K]
            g = jnp.moveaxis(jnp.einsum("sfn,snc->sfc", XoT[i], rows).reshape(S, F, J, L, K), 1, 3)
        else:
            g = jnp.einsum("snf,sjlkn->sjlfk", Xo[:, lo:hi], dz)
        gW = gW.at[:, first:].add(g)
        gb = gb.at[:, first:].add(dz.sum(-1))
    return jnp.concatenate([gW.reshape(S, Fr, L, F * K), gb], axis=-1)


def along_blocks(Z, t, Zp):
    """Z + t * Zp per block; t [S, Fr, L]; a block spans the last fractions (its axis 1)."""
    return tuple(z + t[:, t.shape[1] - z.shape[1] :, :, None, None] * zp for z, zp in zip(Z, Zp))


def _reduce_rows(parts, x, ko, sizes, blocks, task):
    """Sum per-row data terms over each probe's subset and normalise: [S, Fr, L].

    parts: one array per block, [S, Fr - first, L, nb] (multiclass) or
    [S, Fr - first, L, K, nb] (multilabel, already multiplied by the known-label mask).
    ko [S, n, K]. ``sizes``: the subset sizes, static ints or an int array [Fr] (``fit``'s
    shape buckets, where rows past the last subset are padding).
    """
    S, Fr, L, _ = x.shape
    multiclass = task == "multiclass"
    total = jnp.zeros((S, Fr, L) if multiclass else (S, Fr, L, ko.shape[-1]), x.dtype)
    for (lo, hi, first), part in zip(blocks, parts):
        inside = _inside(sizes, lo, hi, first)  # which of the block's rows each of its fractions' subsets holds
        if isinstance(inside, np.ndarray) and inside.all():  # every fraction holds the whole block
            summed = part.sum(-1)
        else:  # masked and summed along the rows (as a product over them, XLA transposes the terms first)
            mask = jnp.expand_dims(jnp.asarray(inside, x.dtype), tuple(range(1, part.ndim - 2)))  # [J, 1(, 1), nb]
            summed = (part * mask).sum(-1)  # [S, Fr - first, L(, K)]
        total = total + jnp.pad(summed, ((0, 0), (first, 0)) + ((0, 0),) * (summed.ndim - 2))
    if multiclass:
        return total / jnp.asarray(sizes, x.dtype)[None, :, None]
    last = (np.asarray(sizes) if _static(sizes) else sizes) - 1
    n = jnp.cumsum(ko, axis=1)[:, last]  # known labels per subset [S, Fr, K]
    return (total / jnp.maximum(n, 1.0)[:, :, None, :]).sum(-1)


def _static(sizes) -> bool:
    """Whether the subset sizes are static ints (a tuple) rather than an array inside the program."""
    return isinstance(sizes, (tuple, list))


def _inside(sizes, lo: int, hi: int, first: int):
    """[Fr - first, hi - lo] bool: which rows lo..hi each fraction from ``first`` on holds (a numpy
    constant for static sizes, else an array of the program)."""
    if _static(sizes):
        return np.arange(lo, hi)[None, :] < np.asarray(sizes[first:])[:, None]
    return jnp.arange(lo, hi)[None, :] < sizes[first:, None]


def _class_sum(a):
    """Sum over the class axis (-2) of [..., K, rows], class by class.

    Written as K - 1 additions of slices because XLA on the CPU turns a product summed
    over a short axis, (a * b).sum(-2), into a batched dot that runs far slower.
    """
    out = a[..., 0, :]
    for k in range(1, a.shape[-2]):
        out = out + a[..., k, :]
    return out


def _class_max(a):
    """Max over the class axis (-2) of [..., K, rows], class by class (``_class_sum``: XLA on the CPU
    runs a reduction over a short axis as a library call that costs more than the slices)."""
    out = a[..., 0, :]
    for k in range(1, a.shape[-2]):
        out = jnp.maximum(out, a[..., k, :])
    return out


def _log_softmax(z):
    """log softmax over the class axis (-2) of logits [..., K, rows], with the class reductions of
    ``_class_max`` and ``_class_sum``; as jax.nn.log_softmax, the max is a constant to the gradient."""
    shifted = z - jax.lax.stop_gradient(_class_max(z))[..., None, :]
    return shifted - jnp.log(_class_sum(jnp.exp(shifted)))[..., None, :]


def _weights(x, K):
    return _split(x, (x.shape[-1] - K) // K, K)[0]


def _rows_last(A, lo, hi):
    """[S, n, K] -> the block's rows as [S, 1, 1, K, nb]."""
    return jnp.swapaxes(A[:, lo:hi], 1, 2)[:, None, None]


def loss_from_logits(Z, x, labels: Labels, l2):
    """Objectives [S, Fr, L] from the block logits of ``block_logits`` and the parameters."""
    To, ko, sizes, blocks, task = labels
    K = To.shape[-1]
    parts = []
    for (lo, hi, first), logits in zip(blocks, Z):  # logits [S, Fr - first, L, K, nb]
        Tb, kb = _rows_last(To, lo, hi), _rows_last(ko, lo, hi)
        if task == "multiclass":
            parts.append(-_class_sum(Tb * _log_softmax(logits)))
        else:
            parts.append(optax.sigmoid_binary_cross_entropy(logits, Tb) * kb)
    W = _weights(x, K)
    return _reduce_rows(parts, x, ko, sizes, blocks, task) + 0.5 * _per_probe(l2) * _dot2(W, W)


def _per_probe(l2):
    """The L2 grid [L] as [1, 1, L], or already one value per probe [S, Fr, L]."""
    return l2[None, None, :] if l2.ndim == 1 else l2


def link_values(Z, task):
    """What ``loss_change`` needs from the current logits, per block.

    Softmax: (probabilities, log-probabilities); sigmoid: (sigmoid(z), sigmoid(-z), z).
    Both sides of the sigmoid are computed directly, because 1 - sigmoid(z) is 0 in
    float32 from z = 17 up.
    """
    if task == "multiclass":
        return tuple((jnp.exp(ls), ls) for ls in (_log_softmax(z) for z in Z))
    return tuple((jax.nn.sigmoid(z), jax.nn.sigmoid(-z), z) for z in Z)


SATURATED = -0.9  # below this, 1 + q in the log1p forms of ``loss_change`` has lost its digits


def _where_saturated(q, near, far):
    """``near`` where q > SATURATED, else ``far()``, which is only computed when some row needs it."""
    saturated = q <= SATURATED
    return jax.lax.cond(saturated.any(), lambda: jnp.where(saturated, far(), near), lambda: near)


def loss_change(P, Zp, t, x, p, labels: Labels, l2):
    """f(x + t p) - f(x) per probe [S, Fr, L], accurate when the change is tiny.

    Near a minimum the change is far below float32's resolution of f itself, so the
    difference of two objective values is noise and a line search stalls. Computed from
    the link values P at x (``link_values``) and the logits' change d = t Zp instead,
    every term stays small and nothing overflows:

        softmax:  lse(z + d) - lse(z) = M + log1p(q),  q = sum_k softmax(z)_k expm1(d_k - M),
                  M = max(0, max_k d_k);
        sigmoid:  softplus(z + d) - softplus(z) = log1p(q),  q = s expm1(d)          (d <= 0)
                                                = d + log1p(q),  q = (1 - s) expm1(-d)  (d > 0),
                  s = sigmoid(z);

    minus the targets' share T d; the penalty changes by l2 t <W, P> + l2 t^2 ||P||^2 / 2.

    Where q nears -1 (a step that hands a row to a class whose probability underflowed:
    nearly separable probes with large logits), 1 + q has lost its digits and log1p(q)
    can be -inf, which would let the line search accept steps that raise the objective.
    There the change is large, and it is taken from log-space values instead:
    logsumexp_k(log softmax(z)_k + d_k), or softplus(z + d) - softplus(z).
    """
    To, ko, sizes, blocks, task = labels
    K = To.shape[-1]
    parts = []
    for (lo, hi, first), pz, zp in zip(blocks, P, Zp):
        Tb, kb = _rows_last(To, lo, hi), _rows_last(ko, lo, hi)
        dz = t[:, t.shape[1] - zp.shape[1]:, :, None, None] * zp  # [S, J, L, K, nb]
        if task == "multiclass":
            prob, logp = pz
            M = jnp.maximum(_class_max(dz)[..., None, :], 0.0)
            q = _class_sum(prob * jnp.expm1(dz - M))
            near = M[..., 0, :] + jnp.log1p(jnp.maximum(q, SATURATED))
            lse = _where_saturated(q, near, lambda: jax.nn.logsumexp(logp + dz, axis=-2))
            parts.append(lse - _class_sum(Tb * dz))
        else:
            s, s_neg, z = pz
            up = dz > 0
            q = jnp.where(up, s_neg, s) * jnp.expm1(-jnp.abs(dz))
            near = jnp.where(up, dz, 0.0) + jnp.log1p(jnp.maximum(q, SATURATED))
            sp = _where_saturated(q, near, lambda: jax.nn.softplus(z + dz) - jax.nn.softplus(z))
            parts.append((sp - Tb * dz) * kb)
    W, Pw = _weights(x, K), _weights(p, K)
    penalty = _per_probe(l2) * (t * _dot2(W, Pw) + 0.5 * t * t * _dot2(Pw, Pw))
    return _reduce_rows(parts, x, ko, sizes, blocks, task) + penalty


def blocked_objectives(x, Xo, To, ko, sizes, l2, task, min_rows: int | None = None):
    """Objectives of every probe at once, x [S, Fr, L, d] -> [S, Fr, L].

    Same value as ``objective`` with a 0/1 subset weight, probe by probe (tested).
    """
    blocks = plan_blocks(tuple(sizes), min_rows)
    return loss_from_logits(block_logits(x, Xo, blocks), x, Labels(To, ko, sizes, blocks, task), l2)


DEFAULT_GAP = 1e-3  # each probe's bound on (f - f*) / f, beside the gradient tolerance (``fraction_gap``)
FRACTION_SCHEDULE_FROM = 1 << 22  # rows x features (about 5,500 x 768) from which a loop per fraction pays
ONE_BLOCK_BELOW = 1 << 20  # rows x features under which a joint loop is one dense block (``solver_loops``)
SHARED_LOOP_BELOW = 1 << 20  # rows x features under which small fractions share one loop (``solver_loops``)


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

    ``buckets``: small joint loops run padded to a shape bucket (``_bucketed``), so problems of
    nearby shapes share one compiled program: on small data compiling costs more than fitting.

    ``on_loop`` (where given) is called with no arguments as each solver loop finishes
    (``loop_count`` of them), so a caller can report progress per loop.
    """
    X, T, known, order, o = data.X, data.T, data.known, data.order, options
    sizes, schedule = _checked(data.sizes, o.schedule, X.shape)
    warm_start = o.warm_start
    if warm_start == "auto":
        warm_start = warm_path(X.shape, schedule, o.buckets and o.min_block_rows is None)
    devices = tuple(o.devices) if o.devices is not None else tuple(jax.devices())
    V, Xs = _rotated(X, o.precondition)
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
        bucket = o.buckets and o.min_block_rows is None and _one_dense_block(g_sizes, blocks, X.shape)
        loop = _Loop(Xs, T, known, g_order, g_sizes, blocks, None)
        out = _fit_group(_bucketed(loop) if bucket else loop, grid, V, solver)
        _one_full_set_probe(out, g_sizes, X.shape[0])
        fits.append(jax.tree.map(lambda a: np.broadcast_to(a, (S,) + a.shape[1:]), out))
        if on_loop is not None:
            on_loop()
    out = jax.tree.map(lambda *a: np.concatenate(a, axis=1), *fits) if len(fits) > 1 else fits[0]
    back = np.argsort(path)  # grid order, padding dropped
    return jax.tree.map(lambda a: jax.device_put(a[:, :, back], _placement(devices)), out)


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


def _rotated(X, precondition: bool):
    """(V, X V): the feature covariance's eigenvectors and the features in that basis (``rotation``),
    or (None, X) without preconditioning; the penalty is rotation-invariant. Small data (under
    ``ONE_BLOCK_BELOW`` values) has its few products on the host."""
    if not precondition:
        return None, X
    host = X.shape[0] * X.shape[1] < ONE_BLOCK_BELOW
    V = rotation(X, host)
    return V, _host_rotate(X, V) if host else _rotate(X, np.asarray(V, X.dtype))


def _placement(devices):
    """Where ``fit`` leaves its results: the device, or every device of a shared fit (replicated)."""
    if len(devices) == 1:
        return devices[0]
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    return NamedSharding(Mesh(np.array(devices), ("probes",)), P())


def _checked(sizes, schedule: str, shape) -> tuple[tuple[int, ...], str]:
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
    sizes, schedule = _checked(sizes, schedule, (n, F))
    return len(solver_loops(sizes, n, F, schedule))


def _device_grid(l2, warm_start: bool, n_dev: int, dtype):
    """(path, grid): the L2 values in solving order (strongest first with ``warm_start``), padded
    with the last one to a multiple of ``n_dev`` so each device gets a contiguous share;
    ``argsort(path)`` takes the results back to grid order, padding dropped."""
    L = l2.shape[0]
    L_pad = -(-L // n_dev) * n_dev
    path = np.argsort(-np.asarray(l2), kind="stable") if warm_start else np.arange(L)
    grid = np.asarray(np.concatenate([np.asarray(l2)[path], np.repeat(np.asarray(l2)[path][-1:], L_pad - L)]), dtype)
    return path, grid


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
    blocks save (the shared loop of 20,000 x 768: 2.8 s to compile instead of 4.5, 0.5 s more to run).
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


class _Loop(NamedTuple):
    """One solver loop's data as its program sees it."""

    Xs: jax.Array  # [rows, F'] features (in the eigenbasis when preconditioning)
    T: jax.Array  # [rows, K]
    known: jax.Array  # [rows, K]
    order: jax.Array  # [S, n'] each seed's rows in subset order, the loop's n' first
    sizes: object  # static tuple, or an int32 array [Fr] where the shapes are bucketed
    blocks: tuple
    n_features: object  # None, or F (an int32 scalar) where F' holds padding


def _bucketed(loop: _Loop) -> _Loop:
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
    return _Loop(Xs, np.pad(np.asarray(T), pad), np.pad(np.asarray(known), pad), order, np.asarray(sizes, np.int32),
                 ((0, n_pad, 0),), np.int32(F))


SMALL_WIDTH = 384  # the narrowest features a bucketed loop sees (``small_width``)


def small_width(n_rows: int, F: int) -> int:
    """The width F features of a bucketed loop of ``n_rows`` (padded) rows are padded to: at least
    ``SMALL_WIDTH`` while the padded problem stays under ``ONE_BLOCK_BELOW`` values, else F's shape bucket.

    So narrow encoders share one compiled program with each other and with 384-wide ones (crs demo's
    50- to 367-wide features: two solver programs instead of six). Each costs 1-2 s to
    compile, more than the zero columns cost to run where a loop holds under a million values and a
    step's fixed work outweighs its products (``warm_path``)."""
    wide = max(SMALL_WIDTH, shape_bucket(F))
    return wide if n_rows * wide < ONE_BLOCK_BELOW else shape_bucket(F)


def _one_dense_block(sizes, blocks, shape) -> bool:
    """Whether a loop is the one-dense-block joint loop of small data (``solver_loops``), the loop that
    shape buckets serve: several fractions, all rows one block, under ``ONE_BLOCK_BELOW`` training values."""
    return len(sizes) > 1 and blocks == ((0, sizes[-1], 0),) and shape[0] * shape[1] < ONE_BLOCK_BELOW


def _one_full_set_probe(out, sizes, n_rows: int) -> None:
    """Give every seed seed 0's whole-training-set probe, in place, where a shared loop fitted it per seed.

    Each seed fitted the whole set in its own row order: the same problem, equal up to rounding. Every
    seed takes seed 0's, as a loop of the whole set alone does, so the seeds' full-label probes are one
    probe, bit for bit (the image bootstrap scores it once). ``out``: the loop's result arrays
    [seed, fraction, ...]; ``sizes``: its fractions' subset sizes."""
    if sizes[-1] == n_rows and len(sizes) > 1:
        for a in out:
            a[:, -1] = a[0, -1]


def _fit_group(lp: _Loop, grid, V, solver: _Solver):
    """The probes of one solver loop's fractions for the seeds of ``lp.order``: one compiled loop run per
    seed group (on data padded to a shape bucket where ``lp.n_features`` is set, ``_bucketed``)."""
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
    stop = Stop(np.int32(solver.max_iter), np.asarray(solver.tol, dtype),
                np.asarray(np.inf if solver.gap is None else solver.gap, dtype))  # numpy: jnp.asarray compiles per shape
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
        parts.append(jax.tree.map(lambda a: a[: min(group, S - lo)], out))
    return jax.tree.map(lambda *a: np.concatenate(a, axis=0), *parts) if len(parts) > 1 else parts[0]


def memory_budget(device) -> int:
    """Bytes the probe working set may use: 60 % of the device's memory (of what is free on a CPU)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 (backends without memory stats)
        stats = {}
    if "bytes_limit" in stats:
        return int(0.6 * (stats["bytes_limit"] - stats.get("bytes_in_use", 0)))
    try:
        import os

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


def _sharded(devices, task, sizes, blocks, warm_start, precondition=True, halves=False):
    """The compiled solver loop: ``sizes`` static (a tuple), or the number of fractions (an int),
    where the sizes and the feature count come as arguments (``_bucketed``)."""
    key = (tuple(devices), task, sizes, blocks, warm_start, precondition, halves)
    if key not in _PROGRAMS:
        dynamic = isinstance(sizes, int)

        plan = LoopPlan(task, blocks, warm_start, halves)

        def local(rows, l2, stop, *dims):
            sz, n_features = dims if dynamic else (sizes, None)
            return _fit_impl(rows, l2, stop, plan, sz, n_features)

        if len(devices) == 1:
            _PROGRAMS[key] = jax.jit(local)
        else:
            from jax.sharding import Mesh, PartitionSpec as P

            mesh = Mesh(np.array(devices), ("probes",))
            spec = P(None, None, "probes")
            specs = (P(), P("probes"), P()) + ((P(), P()) if dynamic else ())
            _PROGRAMS[key] = jax.jit(jax.shard_map(
                local, mesh=mesh, in_specs=specs, out_specs=Fit(spec, spec, spec, spec, spec), check_vma=False))
    return _PROGRAMS[key]


_PROGRAMS: dict = {}


@jax.jit
def _covariance(X):
    return X.T @ X / X.shape[0]


def rotation(X, host: bool = False) -> np.ndarray:
    """Eigenvectors V [F, F] of the feature covariance X^T X / n, largest variance first.

    The product runs on the device (``host``: in numpy, float64, as small data's is one more
    program to compile for a few milliseconds of work); the small F x F eigendecomposition runs
    in LAPACK on the host (float64, one thread), because XLA's CPU eigh is orders of magnitude slower.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # BLAS threads would fight JAX's pool for the cores
        if host:
            X64 = np.asarray(X, np.float64)
            C = X64.T @ X64 / X64.shape[0]
        else:
            C = np.asarray(_covariance(X), np.float64)
        _, V = np.linalg.eigh(C)
    return V[:, ::-1].astype(np.float32)


def _host_rotate(X, V) -> np.ndarray:
    """X V on the host (float32, one BLAS thread): small data's rotation (``fit``)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return np.asarray(X, np.float32) @ V


def second_moments(Xo, sizes):
    """Mean square of every feature over every subset: Xo [S, n, F] in subset order -> [S, Fr, F]."""
    if not _static(sizes):  # sizes an array of the program: a masked sum over all rows
        inside = _inside(sizes, 0, Xo.shape[1], 0).astype(Xo.dtype)  # [Fr, n]
        return jnp.einsum("jn,snf->sjf", inside, Xo * Xo) / sizes.astype(Xo.dtype)[None, :, None]
    edges = (0,) + tuple(sizes)
    segments = jnp.stack([jnp.sum(Xo[:, lo:hi] ** 2, axis=1) for lo, hi in zip(edges[:-1], edges[1:])], axis=1)
    return jnp.cumsum(segments, axis=1) / jnp.asarray(sizes, Xo.dtype)[None, :, None]


ISOTROPIC_BELOW = 0.2  # subsets of fewer than this share of F rows get the isotropic scale (``preconditioner``)


def preconditioner(m2, l2, task, K, sizes=None, n_features=None):
    """Per-probe diagonal scaling in the covariance eigenbasis: x = scale * u.

    In the rotated features Xr = X V the data term's Hessian of a probe on subset s is
    close to c * diag(m_s) (m_s: each direction's mean square over the subset, from
    ``second_moments``; c the curvature of the link at the start: 1/K for softmax, 1/4
    for sigmoid), plus l2 from the penalty. Solving for u with W' = u / sqrt(c m_s + l2)
    makes that Hessian close to the identity, which is what L-BFGS needs to take few
    steps when the feature spectrum spans orders of magnitude. The penalty is unchanged
    because V is orthogonal. The bias is scaled by 1 / sqrt(c).

    A subset of m rows, fewer than the F features (``sizes``, below ``ISOTROPIC_BELOW`` * F),
    gets one scale for every direction instead: its data Hessian c X_s^T X_s / m has rank m,
    and its m non-zero eigenvalues, those of the Gram matrix c X_s X_s^T / m, average
    c * sum_f m_sf / m, far above any one m_sf when m << F. Started from zero, the iterates
    stay in the span of the subset's rows, where the diagonal would under-estimate the
    curvature by about F / m and the solver crawl; the isotropic scale
    1 / sqrt(c * sum_f m_sf / m + l2) fits that span.
    m2 [S, Fr, F], l2 [L] -> scale [S, Fr, L, F*K + K].
    """
    c = 1.0 / K if task == "multiclass" else 0.25
    if sizes is not None and _static(sizes) and n_features is None:
        F = m2.shape[-1]
        m = np.asarray(sizes, np.float64)
        iso = m < ISOTROPIC_BELOW * F  # [Fr] static
        if iso.any():
            mean_eig = m2.sum(-1, keepdims=True) / jnp.asarray(np.minimum(m, F), m2.dtype)[None, :, None]
            m2 = jnp.where(jnp.asarray(iso)[None, :, None], jnp.broadcast_to(mean_eig, m2.shape), m2)
    elif sizes is not None:  # sizes and the feature count are values of the program (``fit``'s shape buckets)
        F = jnp.asarray(m2.shape[-1] if n_features is None else n_features, m2.dtype)
        m = jnp.asarray(sizes).astype(m2.dtype)
        iso = m < ISOTROPIC_BELOW * F  # [Fr]
        mean_eig = m2.sum(-1, keepdims=True) / jnp.minimum(m, F)[None, :, None]
        m2 = jnp.where(iso[None, :, None], jnp.broadcast_to(mean_eig, m2.shape), m2)
    sw = jax.lax.rsqrt(c * m2[:, :, None, :] + l2[None, None, :, None])  # [S, Fr, L, F]
    sw = jnp.repeat(sw, K, axis=-1)  # row-major (F, K) layout of W in x
    sb = jnp.full(sw.shape[:-1] + (K,), 1.0 / math.sqrt(c), m2.dtype)
    return jnp.concatenate([sw, sb], axis=-1)


def _solve(x0, scale, rows: Rows, labels: Labels, l2, stop: Stop, precondition: bool):
    """Probes [S, Fr, L] from x0 (their own parameters); returns x and the solver's report.

    Solved in u, x = scale * u (``preconditioner``). The tolerance applies to the
    preconditioned gradient: there the Hessian is close to the identity, so
    max|g_u| < tol bounds each probe's distance to its optimum whatever its L2 (the raw
    gradient lets weakly regularised probes stop far from it).

    ``stop.gap`` (where given) adds a bound on each probe's distance to its minimum: the
    penalty makes the objective l2-strongly convex in W, so f - f* <= ||grad_W f||^2 / (2 l2)
    (the bias, unpenalised, aside); a probe also needs that bound below ``gap`` times its
    objective. It matters for the weakly regularised probes of small subsets, which are
    nearly separable: their objectives are so flat that a small gradient still leaves
    them far from the minimum. ``gap`` is a scalar or broadcasts to [S, Fr, L]
    (``fraction_gap``: one value per fraction).
    """
    FK = rows.Xo.shape[-1] * rows.To.shape[-1]
    S_, J, L = x0.shape[:3]
    lam = jnp.broadcast_to(_per_probe(l2), (S_, J, L))
    search = lbfgs.Backtracking(lbfgs.unit_step if precondition else lbfgs.unit_length_step)

    obj = _objective(scale, lam, rows, labels, x0.shape)
    rule = _stopping_rule(stop.tol, stop.gap, scale, lam, FK)
    state = lbfgs.run(obj, rule, search, lbfgs.start(obj, rule, x0 / scale), lbfgs.within(stop.max_iter))
    u, converged, used, gmax = lbfgs.report(rule, state)
    return scale * u, converged, used, gmax


def _objective(scale, lam, rows: Rows, labels: Labels, shape) -> lbfgs.Objective:
    """The probes' objective in the solver's coordinates u, x = scale * u; shape: u's [S, Fr, L, d]."""
    plain = plain_products(shape)
    Xo, XoT, blocks, task = rows.Xo, rows.XoT, labels.blocks, labels.task
    return lbfgs.Objective(
        lin=lambda u: block_logits(scale * u, Xo, blocks, XoT, plain),
        lin_T=lambda dZ: scale * block_logits_T(dZ, Xo, blocks, shape, XoT, plain),
        loss=lambda Z, u: loss_from_logits(Z, scale * u, labels, lam),
        along=along_blocks,
        links=lambda Z: link_values(Z, task),
        change=lambda P, Zp, t, u, p: loss_change(P, Zp, t, scale * u, scale * p, labels, lam),
    )


def _stopping_rule(tol, gap, scale, lam, FK):
    """max|g_u| < tol, and where ``gap`` is given, ||grad_W f||^2 / (2 l2) <= gap * |f| (``_solve``)."""
    rule = lbfgs.gradient_below(tol)
    if gap is None:
        return rule

    def close_enough(u, g_u, f):
        g_w = g_u[..., :FK] / scale[..., :FK]  # the gradient in W itself
        return _dot(g_w, g_w) <= 2.0 * lam * gap * jnp.abs(f)

    return lbfgs.with_bound(rule, close_enough)


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


_prepare = jax.jit(_prepare_impl, static_argnums=(4, 5, 6))


def _prepare_host(Xs, T, known, order, sizes, blocks, precondition):
    """``_prepare_impl`` in numpy, for the small loops of shape buckets (``_bucketed``: ``sizes`` an
    int array [Fr]): a few milliseconds of gathers there, against a program to compile per bucket."""
    from threadpoolctl import threadpool_limits

    Xs = np.asarray(Xs, np.float32)
    Xo, To, ko = Xs[order], np.asarray(T)[order], np.asarray(known)[order]
    XoT = tuple(np.ascontiguousarray(np.swapaxes(Xo[:, lo:hi], 1, 2)) for lo, hi, _ in blocks)
    m2 = None
    if precondition:  # ``second_moments``: the mean square of every feature over every subset
        inside = (np.arange(Xo.shape[1])[None, :] < np.asarray(sizes)[:, None]).astype(np.float32)  # [Fr, n]
        with threadpool_limits(1):
            m2 = np.matmul(inside, Xo * Xo) / np.asarray(sizes, np.float32)[None, :, None]  # [S, Fr, F]
    return Rows(Xo, XoT, To, ko, m2)


@jax.jit
def _rotate(X, V):
    return X @ V


def unrotate(V, W) -> np.ndarray:
    """Weights W [..., F, K] in the eigenbasis back to the features: V W (float32, on the host, one BLAS thread)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # BLAS threads would fight JAX's pool for the cores
        return np.matmul(V, W)


def fraction_gap(gap, sizes, F):
    """Each fraction's bound on (f - f*) / f, [1, Fr, 1]: ``gap``, and ``TINY_GAP_SHARE`` of it for
    subsets of fewer than ``ISOTROPIC_BELOW`` * F rows.

    Such probes are nearly separable under a weak penalty: their objectives are tiny and flat
    along the valley of separating directions, so a relative gap that is small in f still
    leaves the weights, and the test AUROC, visibly off the minimum (up to 0.006 on crs demo's
    8-row subsets at gap 1e-3 against scikit-learn in float64; 0.002 at 1e-4). They are also
    the cheapest probes, and in a joint loop the slowest, so the tighter bound costs a few
    more steps of one loop, while the large subsets keep ``gap``.
    """
    m = jnp.asarray(sizes).astype(jnp.float32)
    tiny = m < ISOTROPIC_BELOW * jnp.asarray(F, jnp.float32)
    return jnp.where(tiny, TINY_GAP_SHARE * gap, gap)[None, :, None]


TINY_GAP_SHARE = 0.1  # ``fraction_gap``


class LoopPlan(NamedTuple):
    """What a compiled solver loop is specialised to (static, hashable)."""

    task: str
    blocks: tuple  # ``plan_blocks``
    warm_start: bool  # walk the L2 path (``_stages``)
    halves: bool = False  # the L2 values in two halves, one after the other (``_stages``)


def _fit_impl(rows: Rows, l2, stop: Stop, plan: LoopPlan, sizes, n_features=None):
    """Every probe of one loop: rows from ``_prepare``; l2 [L]; ``sizes`` static ints, or an int array [Fr]
    with ``n_features`` (an int32 scalar) where the shapes are bucketed (``_bucketed``)."""
    Xo, To, m2 = rows.Xo, rows.To, rows.m2
    task, blocks, warm_start = plan.task, plan.blocks, plan.warm_start
    F, K = Xo.shape[2], To.shape[2]
    S, L, d = Xo.shape[0], l2.shape[0], F * K + K
    Fr = len(sizes) if _static(sizes) else sizes.shape[0]
    precondition = m2 is not None
    stop = stop._replace(gap=fraction_gap(stop.gap, sizes, F if n_features is None else n_features))
    labels = Labels(To, rows.ko, sizes, blocks, task)

    def scale_for(l2v):
        if precondition:
            return preconditioner(m2, l2v, task, K, sizes, n_features)
        return jnp.ones((S, Fr, l2v.shape[0], d), Xo.dtype)

    stages = _stages(L, warm_start, plan.halves)
    if stages > 1:
        path = jnp.argsort(-l2)  # strongest penalty first
        width = L // stages

        def stage(x_prev, l2v):  # on the warm path each probe starts from the last stage's; else from zero
            x0 = x_prev if warm_start else jnp.zeros_like(x_prev)
            out = _solve(x0, scale_for(l2v), rows, labels, l2v, stop, precondition)
            return out[0], out

        _, out = jax.lax.scan(stage, jnp.zeros((S, Fr, width, d), Xo.dtype), l2[path].reshape(stages, width))
        back = jnp.argsort(path)  # [stages, S, Fr, width, ...] in path order -> [S, Fr, L, ...] in grid order
        x, converged, used, gmax = (jnp.moveaxis(a, 0, 2).reshape((S, Fr, L) + a.shape[4:])[:, :, back]
                                    for a in out)
    else:
        x, converged, used, gmax = _solve(jnp.zeros((S, Fr, L, d), Xo.dtype), scale_for(l2), rows, labels, l2,
                                          stop, precondition)
    W, b = _split(x, F, K)
    return Fit(W, b, converged, used, gmax)


def _stages(L: int, warm_start: bool, halves: bool) -> int:
    """How many solver loops, one after the other, a program runs its L values in (one compiled loop body).

    The warm path (``warm_path``): one value per stage, each from the last one's solution. ``halves``
    (the one-fraction loops of the "fraction" schedule, for an even L): two stages of L / 2, each
    from zero. The weakly regularised probes set a loop's length; in the strong half the loop stops
    far sooner. It used to drop finished probes instead (a second loop over the slow half, gathered
    once half of them had stopped), which ran 5-10 % faster but put two loop bodies in each program:
    compiling 20,000 x 768 took 20-22 s instead of 14-15 (``benchmarks/probe_bench.py``)."""
    if warm_start:
        return L
    return 2 if halves and L % 2 == 0 else 1


def probabilities(X, W, b, task: str):
    """X [n, F]; W [..., F, K]; b [..., K] -> probabilities [..., n, K]."""
    logits = jnp.einsum("nf,...fk->...nk", X, W) + b[..., None, :]
    return jax.nn.softmax(logits, -1) if task == "multiclass" else jax.nn.sigmoid(logits)


def log_link(logits, task: str):
    """Log-probabilities [..., K] of logits [..., K] that stay distinct where probabilities saturate.

    Softmax: log p_k = d_k - log1p(r), d = z - max z, r = sum of exp(d_j) over the classes other
    than the (first) top one. The usual log-softmax takes log(1 + r) after rounding 1 + r, which is
    exactly 1 in float32 once every other logit is about 17 below the top: every such row's top
    class gets log p = 0 and ties. log1p(r) keeps r itself down to float32's smallest normal, so
    two rows whose top margins are 40 and 50 stay apart (-4.2e-18 against -1.9e-22).
    Sigmoid: log p = -softplus(-z) (jax.nn.log_sigmoid, likewise exact near 0).
    """
    if task != "multiclass":
        return jax.nn.log_sigmoid(logits)
    K = logits.shape[-1]
    d = logits - jax.lax.stop_gradient(logits.max(-1, keepdims=True))
    top = jnp.arange(K) == jnp.argmax(logits, -1)[..., None]
    rest = jnp.where(top, 0.0, jnp.exp(d)).sum(-1, keepdims=True)
    return d - jnp.log1p(rest)


def log_probabilities(X, W, b, task: str):
    """X [n, F]; W [..., F, K]; b [..., K] -> log-probabilities [..., n, K] (``log_link``)."""
    return log_link(jnp.einsum("nf,...fk->...nk", X, W) + b[..., None, :], task)


_log_probabilities = jax.jit(log_probabilities, static_argnums=3)


def predict(X, W, b, task: str) -> np.ndarray:
    """``log_probabilities`` in few compiled shapes: the features padded to a shape bucket (zero columns
    of X, zero rows of W: the logits are unchanged), so encoders of nearby widths share one program,
    and the probes taken ``padded.PROBE_BATCH`` at a time (the last batch padded with zero weights).
    X [n, F], W [..., F, K], b [..., K] (host or device) -> [..., n, K] on the host."""
    X, W, b = np.asarray(X, np.float32), np.asarray(W, np.float32), np.asarray(b, np.float32)
    lead, (F, K) = W.shape[:-2], W.shape[-2:]
    F_pad = shape_bucket(F)
    X = np.pad(X, ((0, 0), (0, F_pad - F)))
    out = padded.in_batches(lambda Wb, bb: _log_probabilities(X, Wb, bb, task), W.reshape((-1, F, K)),
                            b.reshape((-1, K)), pad_to=((F_pad, K), (K,)))
    return out.reshape(lead + (X.shape[0], K))


def validation_loss(log_probs, T, known, task: str):
    """Mean NLL on the validation split. log_probs [..., n, K] (``log_probabilities``); T, known [n, K] -> [...].

    Multiclass: over the rows where known[:, 0] is 1 (padding has 0); multilabel: per label
    over its known entries, then the mean over labels."""
    eps = 1e-7
    p = jnp.clip(jnp.exp(log_probs), eps, 1 - eps)
    if task == "multiclass":
        w = known[..., 0]
        return -((T * jnp.log(p)).sum(-1) * w).sum(-1) / jnp.maximum(w.sum(-1), 1.0)
    ll = T * jnp.log(p) + (1 - T) * jnp.log1p(-p)
    per_label = -(known * ll).sum(-2) / jnp.maximum(known.sum(-2), 1.0)
    return per_label.mean(-1)


_validation_loss = jax.jit(jax.vmap(validation_loss, in_axes=(0, None, None, None)), static_argnums=3)


def validation_losses(probs, T, known, task: str) -> np.ndarray:
    """``validation_loss`` of every probe of probs [..., n, K] (numpy), shapes padded as
    ``crs.probe.padded.per_probe`` says."""
    return padded.per_probe(_validation_loss, probs, T, known, task)
