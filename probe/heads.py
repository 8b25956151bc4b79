"""The probe heads, as data: one record per head, looked up by name.

A head says how it fits every probe of one (encoder, dataset) at once, under which name
its results are written, and which options of ``crs.probe.run.probe`` it takes. Adding
a head is one ``register(Head(...))`` here plus its test; a name can be registered once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from crs.foundations.config import DEFAULT_HIDDEN  # noqa: F401 (the one schema's default, re-exported)
from crs.foundations.errors import BadInput
from crs.probe.problem import TrainingSet  # noqa: F401 (re-exported: what every head fits on)


class Fitted(NamedTuple):
    """Every probe of the grid, fitted: leading axes [S, Fr, L]."""

    converged: np.ndarray  # [S, Fr, L] bool
    iterations: np.ndarray  # [S, Fr, L] solver steps taken
    predict: Callable  # (A [n, F] standardised, index=None) -> log-probabilities [..., n, K]; index picks probes
    # (``crs.probe.run`` calls it on chunks of ``crs.probe.padded.PREDICT_ROWS`` rows: one shape)


@dataclass(frozen=True)
class Head:
    """One probe head.

    ``fit(data, **options)`` fits the whole grid; ``options`` maps the ``probe`` keyword
    arguments the head takes to a check that returns the value to use (or raises
    ``BadInput``); ``suffixed`` heads write their results under ``ENCODER+NAME``, so scoring
    ranks them as a model of their own, the others under the encoder's name. ``loops(n, F,
    sizes)`` is how many solver loops ``fit`` runs on n x F training features; ``fit`` calls
    its ``on_loop`` keyword (where given) as each one finishes (progress per loop).
    """

    name: str
    fit: Callable[..., Fitted]
    options: Mapping[str, Callable] = field(default_factory=dict)
    suffixed: bool = True
    recorded: tuple[str, ...] = ()  # options written into the stored predictions' attributes
    loops: Callable[[int, int, tuple], int] = lambda n, F, sizes: len(sizes)

    def result_name(self, encoder: str) -> str:
        return f"{encoder}+{self.name}" if self.suffixed else encoder

    def checked(self, given: Mapping[str, object]) -> dict:
        """This head's options out of everything ``probe`` was given, each checked."""
        return {k: check(given[k]) for k, check in self.options.items()}

    def attrs(self, encoder: str, options: Mapping[str, object]) -> dict:
        """What the stored predictions of a suffixed head say about it."""
        if not self.suffixed:
            return {}
        return {"head": self.name, **{k: options[k] for k in self.recorded}, "embeddings_of": encoder}


REGISTRY: dict[str, Head] = {}


def register(head: Head) -> Head:
    if head.name in REGISTRY:
        raise ValueError(f"a probe head named {head.name!r} is already registered")
    if "+" in head.name or head.name != head.name.lower():
        raise ValueError(f"head names are lowercase without '+', not {head.name!r}")
    REGISTRY[head.name] = head
    return head


def get(name: str) -> Head:
    if name not in REGISTRY:
        raise BadInput(f"head must be one of {', '.join(REGISTRY)}, not {name!r}")
    return REGISTRY[name]


# ------------------------------------------------------------------ linear
def _fit_linear(data: TrainingSet, *, max_iter: int, tol: float, gap: float | None, on_loop=None) -> Fitted:
    from crs.probe import core  # jax: crs plan imports crs.probe.run without it

    # numpy in: each jnp.asarray of a new shape compiles a small program of its own
    X, T, known = (np.asarray(a, np.float32) for a in (data.X, data.T, data.known))
    problem = data._replace(X=X, T=T, known=known, order=np.asarray(data.order),
                            grid=np.asarray(data.grid, np.float32))
    options = core.FitOptions(max_iter=max_iter, tol=tol, gap=core.DEFAULT_GAP if gap is None else gap)
    fit = core.fit(problem, options, on_loop)

    W_all, b_all = np.asarray(fit.W), np.asarray(fit.b)  # on the host: an index taken on the device compiles per shape

    def predict(A, index=None):
        W, b = (W_all, b_all) if index is None else (W_all[index], b_all[index])
        return core.predict(A, W, b, data.task)

    return Fitted(fit.converged, fit.iterations, predict)


def _same(v):
    return v


def _linear_loops(n: int, F: int, sizes) -> int:
    from crs.probe import core  # jax: crs plan imports crs.probe.run without it

    return core.loop_count(sizes, n, F)


register(Head("linear", _fit_linear, options={"max_iter": _same, "tol": _same, "gap": _same}, suffixed=False,
              loops=_linear_loops))


# --------------------------------------------------------------------- mlp
def _fit_mlp(data: TrainingSet, *, hidden: int, mlp_settings, on_loop=None) -> Fitted:
    import jax.numpy as jnp  # jax: crs plan imports crs.probe.run without it

    from crs.probe import mlp  # jax: crs plan imports crs.probe.run without it

    settings = mlp_settings if mlp_settings is not None else mlp.Settings()
    fit = mlp.fit(data._replace(grid=np.asarray(data.grid, np.float32)), hidden, settings, on_loop)

    def predict(A, index=None):
        params = fit.params if index is None else mlp.take(fit.params, index)
        return mlp.log_probabilities(jnp.asarray(A), params, data.task)

    return Fitted(fit.converged, fit.steps, predict)


def _hidden(v) -> int:
    if not (isinstance(v, (int, np.integer)) and v >= 1):
        raise BadInput(f"hidden must be a whole number of at least 1, not {v!r}")
    return int(v)


register(Head("mlp", _fit_mlp, options={"hidden": _hidden, "mlp_settings": _same}, recorded=("hidden",)))

# The settings check `[probe] head` and `--head` against crs.foundations.names.HEADS without importing JAX;
# a head registered here must be named there too (tests/probe/test_heads.py checks both ways).
