"""One compiled solver loop: every probe of a seed group and its fractions, to its own tolerance.

The solver (``crs.probe.lbfgs``) is L-BFGS with a backtracking Armijo line search, over the whole
batch of probes in one unbatched ``lax.while_loop`` (so ring-buffer indices stay
scalars, which XLA handles far better than per-probe gathers). The logits are linear in
the parameters, so the line search moves in logit space and its trial points cost no
matrix product. It stops each probe when the gradient's largest component falls below
``tol``, when no decrease can be found, or after ``max_iter`` steps; every probe reports
whether it converged and how many steps it took, and finished probes are frozen while
the slowest ones go on.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from crs.probe import lbfgs
from crs.probe.blocks import along_blocks, block_logits, block_logits_T, plain_products, split_params
from crs.probe.lbfgs import dot as _dot
from crs.probe.objective import Labels, link_values, loss_change, loss_from_logits, per_probe, static_sizes
from crs.probe.precondition import ISOTROPIC_BELOW, preconditioner


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
    lam = jnp.broadcast_to(per_probe(l2), (S_, J, L))
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


def fit_loop(rows: Rows, l2, stop: Stop, plan: LoopPlan, sizes, n_features=None):
    """Every probe of one loop: rows from ``_prepare``; l2 [L]; ``sizes`` static ints, or an int array [Fr]
    with ``n_features`` (an int32 scalar) where the shapes are bucketed (``bucketed``)."""
    Xo, To, m2 = rows.Xo, rows.To, rows.m2
    task, blocks, warm_start = plan.task, plan.blocks, plan.warm_start
    F, K = Xo.shape[2], To.shape[2]
    S, L, d = Xo.shape[0], l2.shape[0], F * K + K
    Fr = len(sizes) if static_sizes(sizes) else sizes.shape[0]
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
    W, b = split_params(x, F, K)
    return Fit(W, b, converged, used, gmax)


def _stages(L: int, warm_start: bool, halves: bool) -> int:
    """How many solver loops, one after the other, a program runs its L values in (one compiled loop body).

    The warm path (``warm_path``): one value per stage, each from the last one's solution. ``halves``
    (the one-fraction loops of the "fraction" schedule, for an even L): two stages of L / 2, each
    from zero. The weakly regularised probes set a loop's length; in the strong half the loop stops
    far sooner. Stages keep one loop body per program: a second loop over the slow probes alone runs
    a little faster but compiles far longer (``benchmarks/probe_bench.py``)."""
    if warm_start:
        return L
    return 2 if halves and L % 2 == 0 else 1
