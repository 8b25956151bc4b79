"""The batched L-BFGS on ridge regressions, whose minimisers are known in closed form."""

import jax.numpy as jnp
import numpy as np
import pytest

from crs.probe import lbfgs


def ridge(seed=0, B=3, n=40, d=5):
    """B ridge problems sharing X: f_b(x) = ||X x - y_b||^2 / (2 n) + l2_b ||x||^2 / 2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32) * np.linspace(0.3, 3, d).astype(np.float32)
    y = rng.normal(size=(B, n)).astype(np.float32)
    l2 = np.array([1e-2, 1e-1, 1.0], np.float32)[:B]
    exact = np.stack([np.linalg.solve(X.T @ X / n + l2[b] * np.eye(d), X.T @ y[b] / n) for b in range(B)])
    Xj, yj, lj = jnp.asarray(X), jnp.asarray(y), jnp.asarray(l2)

    def loss(Z, x):
        return 0.5 * ((Z - yj) ** 2).mean(-1) + 0.5 * lj * (x * x).sum(-1)

    obj = lbfgs.Objective(
        lin=lambda x: x @ Xj.T, lin_T=lambda dZ: dZ @ Xj, loss=loss, along=lambda Z, t, Zp: Z + t[:, None] * Zp,
        links=lambda Z: Z - yj,  # the residual: the change below has no cancellation
        change=lambda r, Zp, t, x, p: (t * (r * Zp).mean(-1) + 0.5 * t * t * (Zp * Zp).mean(-1)
                                       + lj * (t * (x * p).sum(-1) + 0.5 * t * t * (p * p).sum(-1))),
    )
    return obj, jnp.zeros((B, d), jnp.float32), exact


@pytest.mark.parametrize("first_step", [lbfgs.unit_step, lbfgs.unit_length_step])
def test_reaches_the_closed_form_minimiser(first_step):
    obj, x0, exact = ridge()
    rule = lbfgs.gradient_below(1e-5)
    state = lbfgs.run(obj, rule, lbfgs.Backtracking(first_step), lbfgs.start(obj, rule, x0), lbfgs.within(200))
    x, converged, used, gmax = lbfgs.report(rule, state)
    assert bool(converged.all()) and (np.asarray(gmax) < 1e-5).all()
    np.testing.assert_allclose(np.asarray(x), exact, atol=1e-4)
    assert (np.asarray(used) <= int(state.it)).all() and state.Z is None


def test_a_stricter_rule_takes_more_steps_and_a_paused_loop_resumes():
    obj, x0, exact = ridge(seed=1)
    loose = lbfgs.gradient_below(1e-2)
    strict = lbfgs.with_bound(loose, lambda x, g, f: jnp.abs(g).max(-1) < 1e-5)
    search = lbfgs.Backtracking()
    a = lbfgs.run(obj, loose, search, lbfgs.start(obj, loose, x0), lbfgs.within(200))
    b = lbfgs.run(obj, strict, search, lbfgs.start(obj, strict, x0), lbfgs.within(200))
    assert (np.asarray(b.used) >= np.asarray(a.used)).all() and (np.asarray(b.used) > np.asarray(a.used)).any()
    # stop after 2 steps, then go on from the returned state: same minimiser
    paused = lbfgs.run(obj, strict, search, lbfgs.start(obj, strict, x0), lambda s: lbfgs.within(200)(s) & (s.it < 2))
    assert int(paused.it) == 2
    done = lbfgs.run(obj, strict, search, lbfgs.resume(obj, paused), lbfgs.within(200))
    np.testing.assert_allclose(np.asarray(done.x), exact, atol=1e-4)
    assert bool(lbfgs.report(strict, done)[1].all())


@pytest.mark.parametrize("it", [1, 3, 12])
def test_the_direction_from_inner_products_is_the_two_loop_recursion(it):
    """``gram_direction`` (what the solver runs) against the two-loop recursion as written in
    Nocedal & Wright (``direction``), on curvature pairs of random convex functions: a partly filled
    ring (it 1, 3), a wrapped one (12), a pair that failed the curvature test (rho 0) and unfilled slots
    holding garbage. Each pair has its own curvature, as along a real path, so <s_i, y_k> is not symmetric.
    The Gram matrices come in stale in the newest slot, as the solver hands them on."""
    m, d, batch = 5, 7, (3, 2)
    rng = np.random.default_rng(it)
    B = rng.normal(size=batch + (m, d, d))
    # an SPD Hessian per problem and pair (<s_i, y_k> is not symmetric)
    A = B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(d)
    S = rng.normal(size=batch + (m, d))
    Y = np.einsum("...mij,...mj->...mi", A, S)
    rho = 1.0 / np.einsum("...md,...md->...m", S, Y)
    filled = [(it - 1 - k) % m for k in range(min(it, m))]  # the slots the last min(it, m) steps wrote
    for j in range(m):
        if j not in filled:  # never written in this ring: garbage, rho 0
            S[..., j, :] = 1e3 * rng.normal(size=batch + (d,))
            Y[..., j, :], rho[..., j] = rng.normal(size=batch + (d,)), 0
    if len(filled) > 2:
        rho[..., filled[1]] = 0.0  # a pair that failed the curvature test
    g = rng.normal(size=batch + (d,))
    SY, YY = np.einsum("...id,...kd->...ik", S, Y), np.einsum("...id,...kd->...ik", Y, Y)
    newest = (it - 1) % m
    stale_SY, stale_YY = SY.copy(), YY.copy()
    stale_SY[..., newest, :] = stale_SY[..., :, newest] = 7.0
    stale_YY[..., newest, :] = stale_YY[..., :, newest] = -3.0
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    p, SY_out, YY_out = lbfgs.gram_direction(f32(g), f32(S), f32(Y), f32(rho), f32(stale_SY), f32(stale_YY),
                                            jnp.int32(it), m)
    ref = lbfgs.direction(f32(g), f32(np.moveaxis(S, -2, 0)), f32(np.moveaxis(Y, -2, 0)), f32(np.moveaxis(rho, -1, 0)),
                          jnp.int32(it), m)
    scale = np.abs(np.asarray(ref)).max()
    np.testing.assert_allclose(np.asarray(p), np.asarray(ref), atol=2e-5 * scale)
    # the filled slots' entries are the true inner products again (the garbage slots' do not matter)
    k = np.array(filled)
    np.testing.assert_allclose(np.asarray(SY_out)[..., k[:, None], k], SY[..., k[:, None], k], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(YY_out)[..., k[:, None], k], YY[..., k[:, None], k], rtol=1e-4, atol=1e-3)
    # and a real quasi-Newton step: it descends wherever some pair is kept
    assert (np.einsum("...d,...d->...", np.asarray(p), g) < 0).all()
