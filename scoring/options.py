"""``ScoreOptions``: how ``crs.scoring.run.score`` scores, one frozen record.

Built from the settings schema's ``[score]`` section (``crs.config.Score``) by
``ScoreOptions.from_settings``; tests and benchmarks construct it by keyword.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crs.config import Score
from crs.scoring import crs as core
from crs.scoring.analysis import SIMPLEX_STEP
from crs.scoring.settle import MIN_DIFFERENCE


@dataclass(frozen=True)
class ScoreOptions:
    """The settings of one score (docs/crs-v2.md, docs/crs-v1.md).

    ``reference``: an encoder name or 'median'; ``weights``: (dominance, balance, worst_axis),
    non-negative and summing to 1; ``bootstrap_unit``: 'both', 'seed' or 'image'
    (docs/crs-v1.md section 5); ``simplex_step``: the weight-sensitivity grid's step;
    ``crs_version``: "2" or "1"; ``min_difference``: the true CRS difference the verdict's plan to settle a tie
    is sized to detect (``settle.plan``).
    """

    reference: str = core.MEDIAN
    weights: Sequence[float] = core.DEFAULT_WEIGHTS
    n_bootstrap: int = 1000
    seed: int = 0
    bootstrap_unit: str = "both"
    simplex_step: float = SIMPLEX_STEP
    crs_version: str = core.LATEST
    min_difference: float = MIN_DIFFERENCE

    @classmethod
    def from_settings(cls, settings: Score, reference: str | None = None) -> ScoreOptions:
        """The options of the settings schema's ``[score]`` section; ``reference``: the encoder the caller
        resolved ``settings.reference`` to (its 'auto' names the registry's), else ``settings.reference``."""
        return cls(
            reference=settings.reference if reference is None else reference,
            weights=settings.weights,
            n_bootstrap=settings.bootstrap,
            seed=settings.seed,
            bootstrap_unit=settings.bootstrap_unit,
            crs_version=settings.crs_version,
            min_difference=settings.min_difference,
        )
