"""MLP probes in JAX and flax: every seed and weight decay of a label fraction in one program.

The head (``Head``) is Dense(hidden) -> GELU (tanh form) -> Dense(K). Objective of one
probe (features already standardised; biases not penalised)::

    multiclass:  (1 / n_s) * sum_{i in s} CE(softmax(f(x_i)), y_i)            + (wd / 2) * (||W1||^2 + ||W2||^2)
    multilabel:  sum_k (1 / n_sk) * sum_{i in s, label k known} BCE(sigmoid(f_k(x_i)), y_ik)
                 + (wd / 2) * (||W1||^2 + ||W2||^2)

the same data terms and masks as the linear probe's (``crs.probe.core``): ``s`` is the
probe's label subset, the first ``n_s`` rows of its seed's order; unknown multilabel
entries (``known == 0``) carry no weight, whatever their target value.

Optimiser: L-BFGS (``optax.lbfgs``, memory 10, zoom line search under the strong Wolfe
conditions) on the whole objective, full batch: the problems are small and
deterministic, and the line search only accepts steps that decrease the objective.

Stopping rule: before each step a probe whose largest gradient component is at most
``tol`` stops (its parameters are frozen while the others go on); ``converged`` says
whether the returned parameters pass that test, so a probe that used ``max_steps``
steps without passing it reports False. The objective is not convex: converged means
a stationary point reached by descent, not the global minimum. All-zero kernels are a
stationary point (GELU(0) = 0), and the minimum under a strong enough weight decay,
where the probe predicts the training prior.

Initialisation: flax's defaults (LeCun-normal kernels, zero biases) from a key made of
the seed alone, so every weight decay and fraction of a seed starts from the same
parameters.

Layout: for a fraction of size m, each seed's rows are gathered once into subset order,
Xo [S, m, F], and shared by that seed's weight decays through ``vmap`` (the data axis is
not mapped, so nothing is copied per probe). Parameters are [S, L, ...] in the program
and [S, Fr, L, ...] in the result.

Programs: tracing and compiling a fraction's program takes seconds (about 5 s on a CPU core:
the L-BFGS line search is a loop inside the training loop, both batched). Where a step's
work is small (``shared``: S * L * n * hidden * (F + K) at most ``SHARED_WORK``) every
fraction runs one program: Xo holds all n rows in each seed's order and rows from m on get
weight 0 (``known``), which the data terms above leave out exactly. The subset size is
then a value, not a shape, so a pair compiles one program, not one per fraction, and each
fraction trains on n rows instead of m. Larger problems run one program per fraction, each
on its m rows only. The two layouts give the same probes up to float32 rounding (the sums
run over other lengths; a weakly penalised probe can end at another nearby point).
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from crs.foundations.labels import check_task
from crs.probe import compiled, core
from crs.probe.problem import TrainingSet

SEED_SALT = 0x6D6C70  # keys the initialisation: fold_in(key(SEED_SALT), seed)


class Head(nn.Module):
    """Dense(hidden) -> GELU -> Dense(classes)."""

    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.hidden)(x)
        x = nn.gelu(x)  # the tanh approximation (flax's default)
        return nn.Dense(self.classes)(x)


class MLPFit(NamedTuple):
    params: dict  # flax params, each leaf [..., *leaf shape]
    converged: jax.Array  # [...] bool: met the stopping rule before max_steps
    steps: jax.Array  # [...] int32: L-BFGS steps taken
    objective: jax.Array  # [...] final training objective
    grad_max: jax.Array  # [...] largest gradient component at the end


class Settings(NamedTuple):
    """The optimiser's knobs (``memory`` is static: each value is its own compiled program)."""

    max_steps: int = 500
    tol: float = 1e-4  # on the largest gradient component, as the linear probe's raw test
    memory: int = 10  # L-BFGS pairs kept


DEFAULT_SETTINGS = Settings()


class Arch(NamedTuple):
    """What a compiled training program is specialised to (static, hashable)."""

    task: str
    hidden: int
    memory: int  # L-BFGS pairs kept


class Stop(NamedTuple):
    """The stopping rule's values (traced: changing them compiles nothing)."""

    max_steps: jax.Array  # int32 scalar
    tol: jax.Array  # float32 scalar


def init_params(seed: int, F: int, hidden: int, K: int) -> dict:
    """One probe's initial parameters; depends on the seed and the shapes only."""
    key = jax.random.fold_in(jax.random.key(SEED_SALT), int(seed))
    return Head(hidden, K).init(key, jnp.zeros((1, F), jnp.float32))["params"]


def data_loss(logits, T, known, task):
    """Mean data term of one probe: logits, T, known [n, K] (known: 0/1 weights)."""
    if check_task(task).exclusive:
        ce = -(T * jax.nn.log_softmax(logits)).sum(-1)  # [n]
        w = known[:, 0]
        return (w * ce).sum() / jnp.maximum(w.sum(), 1.0)
    bce = optax.sigmoid_binary_cross_entropy(logits, T)  # [n, K]
    # where, not a product: an unknown entry's target never reaches the value or the gradient
    bce = jnp.where(known > 0, bce, 0.0)
    return (bce.sum(0) / jnp.maximum(known.sum(0), 1.0)).sum()


def penalty(params):
    """(1/2) * sum of squared kernel entries (biases left out)."""
    return 0.5 * sum(jnp.sum(layer["kernel"] ** 2) for layer in params.values())


def objective(params, X, T, known, wd, task, hidden):
    """One probe's training objective (the module docstring's formula)."""
    logits = Head(hidden, T.shape[-1]).apply({"params": params}, X)
    return data_loss(logits, T, known, task) + wd * penalty(params)


def _gmax(g):
    return jnp.max(jnp.stack([jnp.abs(a).max() for a in jax.tree.leaves(g)]))


def _train(params0, Xo, To, ko, wd, stop: Stop, arch: Arch):
    """Train probes [S, L] to the stopping rule: params0 leaves [S, ...]; Xo [S, m, F]; wd [L].

    One unbatched loop over steps; each step is one probe's L-BFGS step vmapped over weight
    decays (the data shared, not mapped) and seeds. A vmapped line search runs until the
    slowest probe's is done, the others' trials being discarded, so a probe's path is the
    one it would take alone.
    """
    (max_steps, tol), (task, hidden, memory) = stop, arch
    opt = optax.lbfgs(memory_size=memory)
    L = wd.shape[0]

    def step_one(params, state, X, T, k, w, go):
        fun = lambda p: objective(p, X, T, k, w, task, hidden)  # noqa: E731
        f, g = optax.value_and_grad_from_state(fun)(params, state=state)  # reuses the line search's last value
        done = _gmax(g) <= tol
        updates, new_state = opt.update(g, state, params, value=f, grad=g, value_fn=fun)
        move = go & ~done
        keep = lambda new, old: jnp.where(move, new, old)  # noqa: E731 (a stopped probe stays as it is)
        return (jax.tree.map(keep, optax.apply_updates(params, updates), params),
                jax.tree.map(keep, new_state, state), done, move)

    def report_one(params, X, T, k, w):
        f, g = jax.value_and_grad(objective)(params, X, T, k, w, task, hidden)
        return f, _gmax(g)

    over_wd = (0, 0, None, None, None, 0, 0)
    step = jax.vmap(jax.vmap(step_one, in_axes=over_wd), in_axes=(0, 0, 0, 0, 0, None, 0))
    report = jax.vmap(jax.vmap(report_one, in_axes=(0, None, None, None, 0)), in_axes=(0, 0, 0, 0, None))

    S = Xo.shape[0]
    params = jax.tree.map(lambda a: jnp.broadcast_to(a[:, None], (S, L) + a.shape[1:]), params0)
    state = jax.vmap(jax.vmap(opt.init))(params)

    def body(c):
        params, state, active, steps, t = c
        params, state, done, moved = step(params, state, Xo, To, ko, wd, active)
        return params, state, active & ~done, steps + moved.astype(jnp.int32), t + 1

    def cond(c):
        return (c[4] < max_steps) & c[2].any()

    init = (params, state, jnp.ones((S, L), bool), jnp.zeros((S, L), jnp.int32), jnp.int32(0))
    params, _, _, steps, _ = jax.lax.while_loop(cond, body, init)
    f, gmax = report(params, Xo, To, ko, wd)  # the returned parameters' own test
    return params, gmax <= tol, steps, f, gmax


class Subset(NamedTuple):
    """A fraction's rows: each seed's first ``m`` rows of ``order`` [S, r] (r >= m; in the program rows from
    m on get weight 0, see Programs in the module docstring). ``m`` is traced: it compiles nothing."""

    order: jax.Array  # int [S, r]
    m: jax.Array  # int32 scalar


def _fraction_impl(X, T, known, subset: Subset, wd, params0, stop: Stop, arch: Arch):
    order = subset.order
    Xo, To, ko = X[order], T[order], known[order]  # [S, r, .]: one copy per seed, never one per probe
    ko = jnp.where((jnp.arange(order.shape[1]) < subset.m)[None, :, None], ko, 0.0)
    return _train(params0, Xo, To, ko, wd, stop, arch)


# the step budget, tolerance and subset size are traced, so changing them does not compile again
_fraction = compiled.jit(_fraction_impl, static_argnums=(7,))

# a step's multiply-adds (S * L * n * hidden * (F + K)) up to which every fraction runs in one program
# (Programs, above). benchmarks/mlp_bench.py --layout both, 2 cores, 2 seeds x 7 fractions x 2 weight decays,
# hidden 32, first call (compiling included) per fraction / shared: 2.84 at 300 rows x 64 features (2.6 M),
# 2.11 at 1,000 x 128 (17 M); a second call, compiled: 0.50 and 0.49 (the shared layout trains on n rows)
SHARED_WORK = 16_000_000


def shared(S: int, L: int, n: int, F: int, K: int, hidden: int) -> bool:
    """Whether the fractions of a grid share one program (Programs, in the module docstring)."""
    return S * L * n * hidden * (F + K) <= SHARED_WORK


def fit(data: TrainingSet, hidden: int = 128, settings: Settings = DEFAULT_SETTINGS, on_loop=None,
        layout: str | None = None) -> MLPFit:
    """Fit every MLP probe: one compiled program for every label fraction of a small grid, else one per
    fraction (Programs, in the module docstring); ``layout`` 'shared' or 'per_fraction' forces one.

    ``data``: X [n, F] standardised training features; T, known [n, K] targets and known-label
    mask; order [S, n] each seed's subset order of the rows; sizes: the subset size of
    each fraction, increasing; grid: wd [L] the weight decays; seeds [S] the integer seeds
    that key the initialisation; the task. Returns an MLPFit with leading axes [S, Fr, L].
    ``on_loop`` (where given) is called with no arguments as each fraction's program finishes.
    """
    X, T, known, order, sizes, wd, task, seeds = data
    sizes = tuple(int(v) for v in sizes)
    if list(sizes) != sorted(sizes) or not 0 < sizes[0] or sizes[-1] > X.shape[0]:
        raise ValueError(f"subset sizes must increase within 1..{X.shape[0]}, got {sizes}")
    if int(hidden) < 1:
        raise ValueError(f"hidden width must be at least 1, not {hidden!r}")
    check_task(task)  # a ValueError naming the kinds for anything else
    if settings.max_steps < 1 or not settings.tol >= 0:
        raise ValueError(f"max_steps must be at least 1 and tol at least 0, not {settings.max_steps}, {settings.tol}")
    seeds = [int(v) for v in np.asarray(seeds).reshape(-1)]
    order = np.asarray(order)
    if order.shape[0] != len(seeds):
        raise ValueError(f"order has {order.shape[0]} rows, one per seed, but {len(seeds)} seeds were given")
    F, K = X.shape[1], T.shape[1]
    inits = [init_params(sd, F, int(hidden), K) for sd in seeds]
    params0 = jax.tree.map(lambda *a: jnp.stack(a), *inits)  # [S, ...]
    X, T, known = jnp.asarray(X, jnp.float32), jnp.asarray(T, jnp.float32), jnp.asarray(known, jnp.float32)
    wd = jnp.asarray(wd, jnp.float32)
    stop = Stop(jnp.int32(settings.max_steps), jnp.float32(settings.tol))
    arch = Arch(task, int(hidden), int(settings.memory))
    if layout not in (None, "shared", "per_fraction"):
        raise ValueError(f"layout must be 'shared' or 'per_fraction', not {layout!r}")
    one = shared(len(seeds), wd.shape[0], X.shape[0], F, K, int(hidden)) if layout is None else layout == "shared"
    outs = []
    for m in sizes:
        subset = Subset(jnp.asarray(order if one else order[:, :m]), np.int32(m))
        outs.append(MLPFit(*_fraction(X, T, known, subset, wd, params0, stop, arch)))
        if on_loop is not None:
            jax.block_until_ready(outs[-1])
            on_loop()
    return jax.tree.map(lambda *a: jnp.stack(a, axis=1), *outs)  # [S, Fr, L, ...]


def _apply_one(params, X, hidden, K):
    return Head(hidden, K).apply({"params": params}, X)


def probabilities(X, params, task: str, batch: int = 8):
    """X [n, F]; params with leading probe axes [...] -> probabilities [..., n, K].

    Probes are evaluated ``batch`` at a time (``lax.map``), which bounds the hidden
    activations to batch x n x hidden.
    """
    k2 = params["Dense_1"]["kernel"]
    hidden, K = k2.shape[-2], k2.shape[-1]
    lead = k2.shape[:-2]
    flat = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[len(lead):]), params)
    logits = _map_apply(flat, jnp.asarray(X, jnp.float32), hidden, K, batch)
    probs = jax.nn.softmax(logits, -1) if check_task(task).exclusive else jax.nn.sigmoid(logits)
    return probs.reshape(lead + probs.shape[1:])


def log_probabilities(X, params, task: str, batch: int = 8):
    """``probabilities`` as log-probabilities that do not saturate (``crs.probe.core.log_link``)."""
    k2 = params["Dense_1"]["kernel"]
    hidden, K = k2.shape[-2], k2.shape[-1]
    lead = k2.shape[:-2]
    flat = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[len(lead):]), params)
    out = core.log_link(_map_apply(flat, jnp.asarray(X, jnp.float32), hidden, K, batch), task)
    return out.reshape(lead + out.shape[1:])


def _map_apply_impl(flat, X, hidden, K, batch):
    return jax.lax.map(lambda p: _apply_one(p, X, hidden, K), flat, batch_size=batch)


_map_apply = compiled.jit(_map_apply_impl, static_argnums=(2, 3, 4))


def take(params, index):
    """Index every leaf's leading axes, e.g. the chosen probe per (seed, fraction)."""
    return jax.tree.map(lambda a: a[index], params)


def kernel_norm(params):
    """||W1||^2 + ||W2||^2 per probe: leading axes [...] -> [...]."""
    lead = params["Dense_1"]["kernel"].ndim - 2
    return sum(jnp.sum(layer["kernel"] ** 2, axis=tuple(range(lead, layer["kernel"].ndim)))
               for layer in params.values())
