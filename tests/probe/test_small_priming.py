"""The solver's priming pass (``lbfgs.start``): f and g at x0 come from the loop body's own code."""

import jax.numpy as jnp
import numpy as np

from crs.probe import lbfgs


def ridge(A, y, lam):
    """f(x) = ||A x - y||^2 / 2 + lam ||x||^2 / 2 for a batch of problems; A [B, n, d], y [B, n]."""
    return lbfgs.Objective(
        lin=lambda x: jnp.einsum("bnd,bd->bn", A, x),
        lin_T=lambda dZ: jnp.einsum("bnd,bn->bd", A, dZ),
        loss=lambda Z, x: 0.5 * ((Z - y) ** 2).sum(-1) + 0.5 * lam * (x * x).sum(-1),
        along=lambda Z, t, Zp: Z + t[..., None] * Zp,
        links=lambda Z: Z - y,
        change=lambda r, Zp, t, x, p: (t * (r * Zp).sum(-1) + 0.5 * t * t * (Zp * Zp).sum(-1)
                                       + lam * (t * (x * p).sum(-1) + 0.5 * t * t * (p * p).sum(-1))),
    )


def problems():
    rng = np.random.default_rng(3)
    A = jnp.asarray(rng.normal(size=(3, 20, 4)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(3, 20)), jnp.float32)
    lam = 0.5
    x_star = jnp.stack([jnp.linalg.solve(a.T @ a + lam * jnp.eye(4), a.T @ b) for a, b in zip(A, y)])
    return ridge(A, y, lam), x_star


def test_a_loop_of_no_steps_reports_x0_evaluated():
    """max_iter 0: only the priming pass runs; it moves nothing, takes no step and evaluates f and g at x0."""
    obj, x_star = problems()
    rule = lbfgs.gradient_below(1e-4)
    x0 = x_star.at[0].add(1.0)  # problem 0 away from its minimum, 1 and 2 at theirs
    state = lbfgs.run(obj, rule, lbfgs.Backtracking(), lbfgs.start(obj, rule, x0), lbfgs.within(0))
    f0, g0 = obj.value_and_grad(obj.lin(x0), x0)
    np.testing.assert_array_equal(np.asarray(state.x), np.asarray(x0))
    np.testing.assert_allclose(np.asarray(state.f), np.asarray(f0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(state.g), np.asarray(g0), rtol=1e-5, atol=1e-5)
    x, converged, used, gmax = lbfgs.report(rule, state)
    assert converged.tolist() == [False, True, True] and used.tolist() == [0, 0, 0] and int(state.it) == 0
    np.testing.assert_allclose(np.asarray(gmax), np.abs(np.asarray(g0)).max(-1), rtol=1e-5, atol=1e-6)


def test_steps_are_counted_from_the_first_real_step():
    """A problem that starts at its minimum takes no step; the others count only their own steps."""
    obj, x_star = problems()
    rule = lbfgs.gradient_below(1e-4)
    x0 = x_star.at[1].set(0.0)
    state = lbfgs.run(obj, rule, lbfgs.Backtracking(), lbfgs.start(obj, rule, x0), lbfgs.within(50))
    x, converged, used, _ = lbfgs.report(rule, state)
    assert bool(converged.all()) and used.tolist()[0] == 0 and used.tolist()[2] == 0 and 0 < int(used[1]) < 50
    assert int(state.it) == int(used.max())  # the loop ran the priming pass and the slowest problem's steps
    np.testing.assert_allclose(np.asarray(x), np.asarray(x_star), atol=1e-4)
