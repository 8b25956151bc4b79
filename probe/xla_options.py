"""XLA compile options of the probe programs (``jax.jit(..., compiler_options=...)``).

On the CPU the solver loops and MLP programs are compiled with XLA:CPU's classic LLVM
emitters (``xla_cpu_use_fusion_emitters`` False) instead of its newer fusion emitters:
compiling the 20,000 x 768 grid's five solver loops took 22.5 CPU s against 32.8
(11.6 s against 17.3 s on 2 cores), an MLP program 3.0-4.1 s against 5.0 s, for a run
6-14 % slower (benchmarks/probe_bench.py; its docstring has the figures). Most first
runs, and the tests, are small, and there compiling costs more than running.

Only where it applies: on CPU devices, when the installed XLA knows the option (checked once
per process by compiling a one-line program; an XLA without it compiles as before), and
unless $XLA_FLAGS names the option itself (the user's choice wins). GPU programs are
compiled as before.
"""

from __future__ import annotations

import functools
import os

CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


def for_platform(platform: str) -> dict | None:
    """The compile options of a probe program that runs on ``platform`` ("cpu", "gpu", ...), or None."""
    if platform != "cpu" or any(name in os.environ.get("XLA_FLAGS", "") for name in CPU_OPTIONS):
        return None
    return dict(CPU_OPTIONS) if _accepted() else None


@functools.cache
def _accepted() -> bool:
    import jax
    import numpy as np

    try:
        jax.jit(lambda x: x + 1, compiler_options=CPU_OPTIONS)(np.float32(0))
    except Exception:  # noqa: BLE001 (an XLA that no longer has the option: "No such compile option")
        return False
    return True
