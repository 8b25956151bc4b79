"""crs.probe.compiled: small calls compile with the options, large ones without, and a jaxlib that refuses the
options falls back to XLA's defaults with the same result."""

import jax.numpy as jnp
import numpy as np
import pytest

from crs.probe import compiled


def _fresh():
    """A function of its own for each test: jax.jit's compiled-shape count is kept per function."""
    return lambda x, w: jnp.tanh(x @ w).sum(0)


def test_small_calls_compile_with_the_options_and_large_ones_without(monkeypatch):
    monkeypatch.setattr(compiled, "SMALL_INPUTS", 100)
    prog = compiled.jit(_fresh())
    small = prog(np.ones((4, 3), np.float32), np.ones((3, 2), np.float32))  # 18 elements
    assert (prog._tuned._cache_size(), prog._plain._cache_size()) == (1, 0)
    large = prog(np.ones((40, 3), np.float32), np.ones((3, 2), np.float32))  # 126 elements
    assert (prog._tuned._cache_size(), prog._plain._cache_size()) == (1, 1)
    assert prog._cache_size() == 2
    np.testing.assert_allclose(small * 10, large, rtol=1e-6)


def test_a_refused_option_falls_back_to_the_defaults_for_every_program(monkeypatch):
    monkeypatch.setattr(compiled, "OPTIONS", {"xla_cpu_no_such_option_in_any_jaxlib": False})
    monkeypatch.setattr(compiled, "_with_options", True)
    x, w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10, np.ones((3, 2), np.float32)
    prog, other = compiled.jit(_fresh()), compiled.jit(lambda x: x * 2)
    np.testing.assert_allclose(prog(x, w), np.tanh(x @ w).sum(0), rtol=1e-6)
    assert compiled._with_options is False and prog._plain._cache_size() == 1
    other(x)  # no second refusal: the next program goes straight to the defaults
    assert other._tuned._cache_size() == 0 and other._plain._cache_size() == 1


def test_other_errors_are_not_taken_for_a_refusal():
    prog = compiled.jit(_fresh())
    with pytest.raises(TypeError):
        prog(np.ones((4, 3), np.float32), np.ones((2, 2), np.float32))  # shapes that do not multiply
    assert compiled._with_options is True
