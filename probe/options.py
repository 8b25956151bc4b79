"""The settings of one ``crs probe`` run, as one frozen record built from the settings schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from crs.foundations.config import DEFAULT_FRACTIONS, DEFAULT_HIDDEN, DEFAULT_L2, DEFAULT_N_SEEDS

DEFAULT_SEEDS = tuple(range(DEFAULT_N_SEEDS))


SELECT_BY = ("loss", "auroc")  # how L2 is chosen per (seed, fraction) on the validation split


@dataclass(frozen=True)
class ProbeOptions:
    """The settings of one ``probe`` run: which probes are fitted and how the penalty is chosen.

    ``head`` names a record of ``crs.probe.heads`` ("linear" or "mlp"); ``hidden`` is the MLP's
    width and ``mlp_settings`` its optimiser and stopping rule (``crs.probe.mlp.Settings``, default
    ``Settings()``); ``max_iter``, ``tol`` and ``gap`` are the linear solver's."""

    seeds: tuple[int, ...] = DEFAULT_SEEDS
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    l2: tuple[float, ...] = DEFAULT_L2
    max_iter: int = 1000
    tol: float = 1e-4
    select_by: str = "loss"
    gap: float | None = None
    head: str = "linear"
    hidden: int = DEFAULT_HIDDEN
    mlp_settings: object = None
