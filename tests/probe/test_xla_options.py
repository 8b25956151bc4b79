"""The probe programs' XLA compile options (``crs.probe.xla_options``): where they apply, that an XLA
without them still compiles, and that they change how the solver is compiled, not what it solves."""

import jax.numpy as jnp
import numpy as np
import pytest

from crs.probe import core, xla_options


def test_the_options_apply_on_the_cpu_only_and_yield_to_xla_flags(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_options.for_platform("cpu") == xla_options.CPU_OPTIONS
    assert xla_options.for_platform("gpu") is None and xla_options.for_platform("tpu") is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_cpu_use_fusion_emitters=true")
    assert xla_options.for_platform("cpu") is None  # the user's own setting wins


def test_an_xla_without_the_option_compiles_as_before(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(xla_options, "CPU_OPTIONS", {"xla_cpu_no_such_option_in_any_xla": False})
    xla_options._accepted.cache_clear()
    try:
        assert xla_options.for_platform("cpu") is None
    finally:
        xla_options._accepted.cache_clear()


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_the_solver_compiled_either_way_finds_the_same_probes(monkeypatch, task):
    rng = np.random.default_rng(3)
    n, F, K = 120, 10, 3
    X = rng.normal(size=(n, F)).astype(np.float32)
    if task == "multiclass":
        T = np.eye(K, dtype=np.float32)[rng.integers(0, K, n)]
    else:
        T = (rng.random((n, K)) < 0.4).astype(np.float32)
    X += T @ rng.normal(size=(K, F)).astype(np.float32)
    order = np.stack([rng.permutation(n) for _ in range(2)])
    l2 = jnp.asarray([1e-2, 1e-1], jnp.float32)

    def fitted():
        core._PROGRAMS.clear()  # compile again, with the options of this moment
        return core.fit(X, T, np.ones_like(T), order, (30, n), l2, task=task, tol=1e-6)

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_options.for_platform("cpu") is not None  # the first fit has the options
    ours = fitted()
    monkeypatch.setattr(xla_options, "for_platform", lambda platform: None)
    default = fitted()
    core._PROGRAMS.clear()
    assert bool(np.all(ours.converged)) and bool(np.all(default.converged))
    np.testing.assert_allclose(np.asarray(ours.W), np.asarray(default.W), atol=2e-4)
    np.testing.assert_allclose(np.asarray(ours.b), np.asarray(default.b), atol=2e-4)
