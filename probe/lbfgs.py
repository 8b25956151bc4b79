"""L-BFGS over a batch of independent problems whose data term sees x only through a linear map.

Each problem minimises f(x) = loss(lin(x), x), x [..., d]. ``lin`` is linear (the logits
of a linear probe, without a constant term), so a line search can move in its image:
one product lin(p) per iteration gives every trial point's objective without another
matrix product, and trial steps cost elementwise work only. An iteration does two
matrix products (lin(p) and the gradient's transpose).

One unbatched ``lax.while_loop`` runs the whole batch, so ring-buffer indices stay
scalars; a probe that meets its stopping rule, or finds no decrease, is frozen while the
others go on. The variants are explicit arguments:

* ``Objective``: the problem (its linear map, loss, and the cancellation-free change of f
  along a step that the line search tests);
* the stopping rule: a function (x, g, f) -> bool per problem (``gradient_below``,
  ``with_bound``);
* ``Backtracking``: the Armijo line search and its first trial step (``unit_step`` for a
  preconditioned problem, where -g is close to the Newton step; ``unit_length_step``
  otherwise);
* the loop condition: a function of the ``State`` (``within``, or a caller's own), so a
  caller can stop a loop early and ``resume`` it from the state it returned.

Compiling costs more than solving on small problems, and XLA's time goes into each fused
kernel, so the program is kept small: the two-loop recursion is computed from inner products
(``gram_direction``: a few products over the history and two small triangular solves, where
the loop written out is twenty small dots and updates per step), and the objective and its
gradient appear once, in the loop body (``start`` leaves them to the loop's first pass).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

REFRESH = 8  # solver steps between remaking the carried logits from the parameters


class State(NamedTuple):
    """What the solver loop carries; every field has the batch's leading axes [...]."""

    x: jax.Array  # [..., d] parameters
    Z: object  # lin(x), carried as Z + t Zp between products (None in a returned state)
    f: jax.Array  # [...] objective
    g: jax.Array  # [..., d] gradient
    S: jax.Array  # [..., m, d] steps of the ring buffer (the batch axes first, as the products over slots want)
    Y: jax.Array  # [..., m, d] gradient changes
    rho: jax.Array  # [..., m] 1 / <s, y>; 0 for an empty slot or a pair that failed the curvature test
    SY: jax.Array  # [..., m, m] <s_i, y_k> of the ring's slots (``gram_direction``)
    YY: jax.Array  # [..., m, m] <y_i, y_k>
    gmax: jax.Array  # [...] largest gradient component at the last accepted point
    active: jax.Array  # [...] bool: still going
    used: jax.Array  # [...] int32: steps taken while active
    it: jax.Array  # scalar int32: the loop counter, the same for every problem


class Objective(NamedTuple):
    """f(x) = loss(lin(x), x) and what the line search needs to test steps exactly."""

    lin: Callable  # x [..., d] -> Z (a pytree), linear
    lin_T: Callable  # dZ -> [..., d], the transpose of ``lin``
    loss: Callable  # (Z, x) -> f [...]
    along: Callable  # (Z, t, Zp) -> Z + t * Zp, t [...]
    links: Callable  # Z -> what ``change`` needs from the logits at x (made once per iteration)
    change: Callable  # (links, Zp, t, x, p) -> f(x + t p) - f(x) [...], without cancellation

    def value_and_grad(self, Z, x):
        f, pullback = jax.vjp(self.loss, Z, x)
        dZ, dx = pullback(jnp.ones_like(f))
        return f, self.lin_T(dZ) + dx


def dot(a, b):
    # as an einsum: XLA on the CPU runs it faster than (a * b).sum(-1)
    return jnp.einsum("...d,...d->...", a, b)


# ------------------------------------------------------------ stopping rules
def gradient_below(tol) -> Callable:
    """Converged where the gradient's largest component is below ``tol``."""
    return lambda x, g, f: jnp.abs(g).max(-1) < tol


def with_bound(rule: Callable, bound: Callable) -> Callable:
    """Converged where ``rule`` and ``bound(x, g, f)`` both hold."""
    return lambda x, g, f: rule(x, g, f) & bound(x, g, f)


# ------------------------------------------------------------- line search
def unit_step(g):
    """First trial step 1: the Newton step when the preconditioned Hessian is close to the identity."""
    return 1.0


def unit_length_step(g):
    """First trial step that moves about 1 in parameter norm."""
    return 1.0 / jnp.maximum(jnp.sqrt(dot(g, g)), 1e-12)


class Backtracking(NamedTuple):
    """Backtracking from t0, halving t until the Armijo condition f(x + t p) - f(x) <= c1 t <g, p>.

    The first iteration tries ``first_step(g)``, later ones the full quasi-Newton step 1.
    """

    first_step: Callable = unit_length_step
    c1: float = 1e-4
    max_halvings: int = 30

    def t0(self, g, it, batch, dtype):
        return jnp.broadcast_to(jnp.where(it == 0, self.first_step(g), 1.0), batch).astype(dtype)

    def search(self, trial: Callable, t0, slope, active):
        """(t, f(x + t p) - f(x)): the accepted step, or the last tried where none passed."""

        def armijo(t, df):
            return (df <= self.c1 * t * slope) | ~active

        def cond(c):
            t, f_try, i = c
            return (i < self.max_halvings) & ~armijo(t, f_try).all()

        def body(c):
            t, f_try, i = c
            ok = armijo(t, f_try)
            t = jnp.where(ok, t, 0.5 * t)
            return t, jnp.where(ok, f_try, trial(t)), i + 1

        t, f_try, _ = jax.lax.while_loop(cond, body, (t0, trial(t0), jnp.int32(0)))
        return t, f_try, armijo(t, f_try)


# ------------------------------------------------------------ loop conditions
def within(max_iter) -> Callable:
    """Go on while some problem is active, for at most ``max_iter`` steps in all."""
    return lambda s: (s.it < max_iter) & s.active.any()


# ------------------------------------------------------------------ solver
def direction(g, S, Y, rho, it, m):
    """L-BFGS two-loop recursion (Nocedal & Wright, Algorithm 7.4) over a ring buffer, as written there.

    g [..., d]; S, Y [m, ..., d]; rho [m, ...]. ``it`` is the loop counter (a scalar,
    the same for every probe), so ring positions are plain indices; a slot with
    ``rho == 0`` (empty, or a pair that failed the curvature test) contributes nothing.
    The solver uses ``gram_direction``, the same direction from inner products; this is the
    reference it is tested against.
    """
    newest = (it - 1) % m

    def back(i, carry):
        q, alpha = carry
        j = (newest - i) % m
        a = rho[j] * dot(S[j], q)
        return q - a[..., None] * Y[j], alpha.at[j].set(a)

    q, alpha = jax.lax.fori_loop(0, m, back, (g, jnp.zeros(rho.shape, g.dtype)))
    sy, yy = dot(S[newest], Y[newest]), dot(Y[newest], Y[newest])
    gamma = jnp.where((rho[newest] > 0) & (yy > 0), sy / jnp.where(yy > 0, yy, 1.0), 1.0)
    r = gamma[..., None] * q

    def forward(i, r):
        j = (newest - (m - 1) + i) % m
        beta = rho[j] * dot(Y[j], r)
        return r + S[j] * (alpha[j] - beta)[..., None]

    return -jax.lax.fori_loop(0, m, forward, r)


def _over_slots(H, v):
    """<H_i, v> for every slot i: H [..., m, d], v [..., d] -> [..., m]."""
    return jnp.einsum("...md,...d->...m", H, v)


def _unit_triangular(A, b, lower: bool):
    """x with (I + A) x = b, A [..., m, m] strictly triangular, b [..., m]: the recursions of
    ``gram_direction`` as one batched triangular solve (a library call: far less to compile than the
    m^2 scalar updates written out)."""
    return jax.lax.linalg.triangular_solve(A, b[..., None], left_side=True, lower=lower, unit_diagonal=True)[..., 0]


def gram_direction(g, S, Y, rho, SY, YY, it, m):
    """``direction`` computed from inner products (the "vector-free" form of the two-loop recursion).

    Every vector of the recursion is g plus a combination of the stored s_i and y_i, so its
    coefficients follow from <s_i, g>, <y_i, g> and the Gram matrices SY (<s_i, y_k>) and
    YY (<y_i, y_k>), kept up to date a slot at a time: the newest pair's row and column are
    made here, at the next step. The batch axes come first: g [..., d]; S, Y [..., m, d];
    rho [..., m]; SY, YY [..., m, m]:

        backward, newest to oldest:  alpha_i = rho_i (<s_i, g> - sum_{k newer} alpha_k <s_i, y_k>)
        q = g - sum_k alpha_k y_k,   gamma = <s, y> / <y, y> of the newest pair
        forward, oldest to newest:   beta_i = rho_i (gamma <y_i, q> + sum_{k older} (alpha_k - beta_k) <s_k, y_i>),
                                     <y_i, q> = <y_i, g> - sum_k alpha_k <y_i, y_k>
        -p = gamma q + sum_k (alpha_k - beta_k) s_k

    Both recursions are unit-triangular systems in the slots' age order, solved as such
    (``_unit_triangular``). The buffers are read in seven matrix-vector products per step instead of
    twenty small dots and updates: on crs demo's probes that loop of small kernels took about a
    third of each step (``benchmarks/probe_bench.py``). A slot with ``rho == 0`` contributes nothing,
    as in ``direction``, which this equals up to rounding (tested). Returns (p, SY, YY), the
    matrices with the newest pair's entries.
    """
    newest = (it - 1) % m
    # the newest pair (the last step's) enters the Gram matrices here, before the step overwrites a slot
    # in place (products of the buffers after that would make XLA copy them every step); one matrix-vector
    # product per vector (XLA's library call for several vectors at once runs slower here)
    s_new, y_new = S[..., newest, :], Y[..., newest, :]
    y_y = _over_slots(Y, y_new)
    SY = SY.at[..., :, newest].set(_over_slots(S, y_new)).at[..., newest, :].set(_over_slots(Y, s_new))
    YY = YY.at[..., :, newest].set(y_y).at[..., newest, :].set(y_y)
    age = (newest - jnp.arange(m)) % m  # slot of each age, newest first (a rotation: its own inverse map)
    r_a, sg, yg = rho[..., age], _over_slots(S, g)[..., age], _over_slots(Y, g)[..., age]
    sy, yy = SY[..., age, :][..., age], YY[..., age, :][..., age]
    # backward: alpha_a + rho_a sum_{b newer} <s_a, y_b> alpha_b = rho_a <s_a, g>, a unit lower-triangular
    # system in age order (newest first); forward: an upper one for the coefficients of the s_b
    alpha = _unit_triangular(r_a[..., :, None] * jnp.tril(sy, -1), r_a * sg, lower=True)
    y0, s0 = yy[..., 0, 0], sy[..., 0, 0]
    gamma = jnp.where((r_a[..., 0] > 0) & (y0 > 0), s0 / jnp.where(y0 > 0, y0, 1.0), 1.0)
    yq = yg - jnp.einsum("...ab,...b->...a", yy, alpha)  # <y_a, q>
    older = r_a[..., :, None] * jnp.triu(jnp.swapaxes(sy, -1, -2), 1)  # [a, b]: rho_a <s_b, y_a>, b older
    cs = _unit_triangular(older, alpha - r_a * gamma[..., None] * yq, lower=False)
    cs, cy = cs[..., age], (-gamma[..., None] * alpha)[..., age]  # back to ring order
    p = -(gamma[..., None] * g + jnp.einsum("...m,...md->...d", cs, S) + jnp.einsum("...m,...md->...d", cy, Y))
    return p, SY, YY


def start(obj: Objective, converged: Callable, x0, m: int = 10) -> State:
    """The state before the first step from x0 [..., d], to be primed by ``run``'s first pass.

    Its objective and gradient are not evaluated here: the loop's first pass (``it == -1``)
    takes a step of length zero and evaluates them at x0 with the loop body's own code, so a
    compiled program holds the objective's gradient once, not twice.
    """
    batch, d = x0.shape[:-1], x0.shape[-1]
    Z0 = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(obj.lin, x0))  # remade by the first pass
    zeros = jnp.zeros(batch + (m, d), x0.dtype)
    gram = jnp.zeros(batch + (m, m), x0.dtype)
    return State(x=x0, Z=Z0, f=jnp.zeros(batch, x0.dtype), g=jnp.zeros_like(x0), S=zeros, Y=zeros,
                 rho=jnp.zeros(batch + (m,), x0.dtype), SY=gram, YY=gram, gmax=jnp.zeros(batch, x0.dtype),
                 active=jnp.ones(batch, bool), used=jnp.zeros(batch, jnp.int32), it=jnp.int32(-1))


def resume(obj: Objective, state: State) -> State:
    """A returned state, ready to go on: the logits are not carried between loops, one product remakes them."""
    return state._replace(Z=obj.lin(state.x))


def run(obj: Objective, converged: Callable, search: Backtracking, state: State, go: Callable,
        m: int = 10) -> State:
    """Step while ``go(state)``; returns the last state (its ``Z`` dropped)."""
    out = jax.lax.while_loop(go, lambda s: step(obj, converged, search, s, m), state)
    return out._replace(Z=None)


def report(converged: Callable, s: State):
    """(x, converged, steps used, largest gradient component) of a returned state."""
    return s.x, converged(s.x, s.g, s.f), s.used, s.gmax


def _descent(s: State, m: int):
    """The quasi-Newton direction p, or -g where it does not descend, its slope <p, g>, and the Gram
    matrices with the newest pair's entries (``gram_direction``)."""
    p, SY, YY = gram_direction(s.g, s.S, s.Y, s.rho, s.SY, s.YY, s.it, m)
    slope = dot(p, s.g)
    descent = slope < 0
    p = jnp.where(descent[..., None], p, -s.g)  # fall back to steepest descent
    slope = jnp.where(descent, slope, -dot(s.g, s.g))
    return p, slope, SY, YY


def step(obj: Objective, converged: Callable, search: Backtracking, s: State, m: int) -> State:
    """One L-BFGS iteration of every active problem; frozen problems stay where they are.

    The priming pass (``it == -1``, from ``start``: g = 0, so p = 0 and every trial change is
    0) stays at x0, remakes the logits there and evaluates f and g; its history pair has
    <s, y> = 0 and is never used.
    """
    first = s.it < 0
    p, slope, SY, YY = _descent(s, m)
    Zp = obj.lin(p)
    t0 = search.t0(s.g, s.it, s.x.shape[:-1], s.x.dtype)
    links = obj.links(s.Z)  # once per iteration, not per trial
    t, f_try, ok = search.search(lambda t: obj.change(links, Zp, t, s.x, p), t0, slope, s.active)
    moved = s.active & ((ok & (f_try <= 0)) | first)
    t = jnp.where(moved, t, 0.0)
    x = s.x + t[..., None] * p
    # the logits are carried (Z + t Zp) between products; float32 rounding accumulates along the
    # path, so every REFRESH steps they are remade from x (and on the priming pass, it = -1)
    Z = jax.lax.cond((s.it + 1) % REFRESH == 0, lambda: obj.lin(x), lambda: obj.along(s.Z, t, Zp))
    f, g = obj.value_and_grad(Z, x)
    sv, yv = x - s.x, g - s.g
    sy = dot(sv, yv)
    keep = moved & (sy > 1e-10 * jnp.maximum(dot(yv, yv), 1e-30))  # keeps the inverse Hessian positive definite
    slot = s.it % m
    gmax = jnp.abs(g).max(-1)
    return State(
        x=x, Z=Z, f=jnp.where(moved, f, s.f), g=jnp.where(moved[..., None], g, s.g),
        S=s.S.at[..., slot, :].set(sv), Y=s.Y.at[..., slot, :].set(yv),
        rho=s.rho.at[..., slot].set(jnp.where(keep, 1.0 / jnp.where(keep, sy, 1.0), 0.0)), SY=SY, YY=YY,
        gmax=jnp.where(moved, gmax, s.gmax), active=moved & ~converged(x, g, f),
        used=s.used + (s.active & ~first).astype(jnp.int32), it=s.it + 1,
    )
