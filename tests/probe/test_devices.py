"""Probes shared across devices and fitted in seed groups give the results of one plain fit."""

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from crs.probe import core, subsets
from crs.probe.problem import TrainingSet

SCRIPT = textwrap.dedent("""
    import jax, numpy as np, jax.numpy as jnp
    from crs.probe import core, subsets
    from crs.probe.problem import TrainingSet
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)
    n, F, K = 300, 12, 3
    y = rng.integers(0, K, n)
    X = (rng.normal(size=(K, F))[y] + rng.normal(size=(n, F))).astype(np.float32)
    T = np.eye(K, dtype=np.float32)[y]
    order = subsets.orders(y, "multiclass", [0, 1, 2])
    sizes = subsets.sizes([0.1, 0.5, 1.0], n)
    data = TrainingSet(jnp.asarray(X), jnp.asarray(T), jnp.ones((n, K), jnp.float32), jnp.asarray(order), sizes,
                       jnp.asarray([1e-3, 1e-2, 1e-1, 1.0, 3.0], jnp.float32), "multiclass")  # 5 L2 values, 4 devices
    for warm, schedule in ((False, "joint"), (True, "joint"), (False, "fraction")):
        one = core.fit(data, core.FitOptions(tol=1e-5, devices=jax.devices()[:1], warm_start=warm,
                                             schedule=schedule))
        four = core.fit(data, core.FitOptions(tol=1e-5, warm_start=warm, schedule=schedule))
        assert four.W.shape == one.W.shape == (3, 3, 5, F, K), four.W.shape
        assert len(four.W.sharding.device_set) == 4 or not hasattr(four.W, "sharding"), four.W.sharding
        assert np.asarray(four.converged).all() and np.asarray(one.converged).all()
        # each probe's path is its own, but another batch shape rounds differently and the difference
        # grows along the path: weakly regularised probes (flat objectives) end a little apart, at the
        # same minimum to the solver's tolerance
        if not warm:
            np.testing.assert_allclose(np.asarray(four.W), np.asarray(one.W), atol=2e-3)
            np.testing.assert_allclose(np.asarray(four.b), np.asarray(one.b), atol=2e-3)
        for s in range(3):  # a device's share of a warm-start path starts cold: another path, the same minimum
            for j, m in enumerate(sizes):
                w = np.zeros((n, K), np.float32)
                w[order[s, :m]] = 1
                for i in range(5):
                    f1, f4 = (float(core.objective((fit.W[s, j, i], fit.b[s, j, i]), data.X, data.T,
                                                   jnp.asarray(w), data.grid[i], "multiclass")) for fit in (one, four))
                    assert abs(f1 - f4) <= 1e-4 * abs(f1) + 1e-6, (s, j, i, f1, f4)
    print("SAME")
""")


@pytest.mark.slow  # started first (tests/conftest.py)
def test_four_cpu_devices_give_the_one_device_results():
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()  # with the suite's
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SAME" in out.stdout


@pytest.mark.parametrize("warm", [False, True])
def test_seed_groups_under_a_small_memory_budget_match_all_seeds_at_once(warm):
    """Seeds fitted two at a time (2 + 2 + 1) give the probes of all five at once: side by side, the same
    to rounding; along the warm L2 path (small data's default), the same minima to the solver's tolerance
    (each stage starts where the last one stopped, so a rounding apart can become a step apart)."""
    rng = np.random.default_rng(1)
    n, F, K = 240, 10, 3
    y = rng.integers(0, K, n)
    X = (rng.normal(size=(K, F))[y] + rng.normal(size=(n, F))).astype(np.float32)
    T = np.eye(K, dtype=np.float32)[y]
    order = subsets.orders(y, "multiclass", [0, 1, 2, 3, 4])
    sizes = subsets.sizes([0.2, 1.0], n)
    data = TrainingSet(jnp.asarray(X), jnp.asarray(T), jnp.ones((n, K), jnp.float32), jnp.asarray(order), sizes,
                       jnp.asarray([1e-2, 1e-1], jnp.float32), "multiclass")
    whole = core.fit(data, core.FitOptions(warm_start=warm))
    blocks = core.plan_blocks(tuple(sizes))
    per_seed = core.working_set_bytes(n, F, K, 1, sizes, blocks, 2)
    grouped = core.fit(data, core.FitOptions(warm_start=warm,
                                             max_bytes=X.nbytes * 2 + 2 * per_seed))  # two seeds a group: 2+2+1
    np.testing.assert_array_equal(np.asarray(whole.converged), np.asarray(grouped.converged))
    if not warm:
        for a, b in zip(whole, grouped):  # another batch shape: the same to rounding
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-5)
        return
    assert np.asarray(whole.converged).all()
    for s in range(5):
        for j, m in enumerate(sizes):
            w = np.zeros((n, K), np.float32)
            w[order[s, :m]] = 1
            for i in range(2):
                f = [float(core.objective((fit.W[s, j, i], fit.b[s, j, i]), data.X, data.T, jnp.asarray(w),
                                          data.grid[i], "multiclass")) for fit in (whole, grouped)]
                assert abs(f[0] - f[1]) <= 1e-4 * abs(f[0]) + 1e-6, (s, j, i, f)


def test_the_working_set_estimate_grows_with_seeds_and_rows():
    blocks = core.plan_blocks((10, 100))
    one = core.working_set_bytes(100, 8, 3, 1, (10, 100), blocks, 4)
    assert core.working_set_bytes(100, 8, 3, 2, (10, 100), blocks, 4) == 2 * one
    assert core.working_set_bytes(1000, 8, 3, 1, (10, 100), blocks, 4) > one
