"""``jit``: how every probe program is compiled: on small inputs, with XLA:CPU's fusion emitters off (``OPTIONS``).

XLA:CPU's newer fusion emitters make the probe's programs compile far longer; on large inputs they make
the solver run faster, on small ones that gain is a fraction of a second. Measured side by side
(``benchmarks/probe_bench.py --jax-only``, with and without ``--xla-defaults``, 2 cores, no cache):

* crs demo's nine pairs (inputs up to about 2 M elements): the two solver programs compiled in 7.3 and
  4.8 s with the emitters, 4.1-4.4 and 1.9-2.4 s without; the probe's other programs 1.3 s less in all.
* 8,000 x 384, five classes, 3 seeds (about 18 M elements): compiled in 8.9 / 9.3 s with them, 4.9 / 8.0 s
  without; ran in 8.3 / 8.2 s against 7.0 / 9.1 s. Multi-label: compiled 5.2 / 5.9 against 2.6 / 5.2 s,
  ran 9.1 / 8.4 against 9.8 / 10.7 s.
* 12,000 x 512, eight labels (about 37 M): compiled 15.7 / 16.6 / 17.6 s with them, 9.7 / 10.4 / 10.6 s
  without; ran 6.8 / 7.2 / 6.9 s against 9.5 / 9.1 / 9.3 s: a third slower, which a run from the
  compilation cache (a re-run, another encoder of the same width) pays without the compile's saving.

So a call whose array inputs hold at most ``SMALL_INPUTS`` elements compiles with ``OPTIONS`` and a larger
one with XLA's defaults: a few seconds less compiling where compiling is most of the work, and at most
about half a second more running. On a GPU the options are XLA:CPU's alone and change nothing.

The option is XLA's, not JAX's, and a jaxlib may drop it: the first compile that is refused for it
("No such compile option") switches every probe program to XLA's defaults for the rest of the
process, and that call is compiled again without it. Different code generation rounds floats
differently, so the solver may stop a step apart: crs demo's probe metrics moved by up to 0.005.
"""

from __future__ import annotations

import jax

OPTIONS = {"xla_cpu_use_fusion_emitters": False}
SMALL_INPUTS = 1 << 23  # array elements over all of a call's inputs (module docstring)

_with_options = True  # False once a compile refused ``OPTIONS`` (or a benchmark said so: ``use_options``)


def jit(fun, **kwargs) -> Program:
    """``jax.jit(fun, **kwargs)``, compiled with ``OPTIONS`` for calls on small inputs where this jaxlib takes them."""
    return Program(fun, kwargs)


class Program:
    """A jitted function in two forms, with ``OPTIONS`` and without: a call on at most ``SMALL_INPUTS`` array
    elements goes to the first (until a compile refuses the options), any other to the second."""

    def __init__(self, fun, kwargs: dict):
        self._plain = jax.jit(fun, **kwargs)
        try:
            self._tuned = jax.jit(fun, compiler_options=OPTIONS, **kwargs)
        except TypeError:  # a jax.jit without compiler_options
            self._tuned = self._plain

    def __call__(self, *args, **kwargs):
        if _with_options and small(args, kwargs):
            try:
                return self._tuned(*args, **kwargs)
            except Exception as err:  # XLA's runtime error; its class has moved between jax versions
                if not refuses_options(err):
                    raise
                use_options(False)
        return self._plain(*args, **kwargs)

    def _cache_size(self) -> int:
        """Compiled shapes of both forms (``jax.jit``'s own count, for the tests that count programs)."""
        forms = {id(f): f for f in (self._tuned, self._plain)}.values()
        return sum(f._cache_size() for f in forms)


def small(args, kwargs) -> bool:
    """Whether a call's array inputs hold at most ``SMALL_INPUTS`` elements in all."""
    return sum(getattr(leaf, "size", 0) for leaf in jax.tree.leaves((args, kwargs))) <= SMALL_INPUTS


def use_options(on: bool) -> None:
    """Compile every probe program from now on with ``OPTIONS`` (True) or with XLA's defaults (False), as
    ``benchmarks/probe_bench.py --xla-defaults`` does to compare them side by side."""
    global _with_options
    _with_options = on


def refuses_options(err: Exception) -> bool:
    """Whether ``err`` is XLA refusing one of ``OPTIONS`` by name (a jaxlib without it)."""
    text = str(err)
    return "compile option" in text and any(name in text for name in OPTIONS)
