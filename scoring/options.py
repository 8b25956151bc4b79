"""``ScoreOptions``: how ``crs.scoring.run.score`` scores, one frozen record.

Its fields are the settings schema's ``[score]`` section (``crs.foundations.config.Score``) by name, plus
``simplex_step``; the score stage builds it with ``crs.foundations.config.options_record``, tests and
benchmarks by keyword.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crs.scoring import crs as core
from crs.scoring.analysis import SIMPLEX_STEP
from crs.scoring.settle import MIN_DIFFERENCE


@dataclass(frozen=True)
class ScoreOptions:
    """The settings of one score (docs/crs-v2.md, docs/crs-v1.md).

    ``reference``: an encoder name or 'median'; ``weights``: (dominance, balance, worst_axis),
    non-negative and summing to 1; ``bootstrap``: the bootstrap replicates; ``bootstrap_unit``: 'both', 'seed'
    or 'image' (docs/crs-v1.md section 5); ``simplex_step``: the weight-sensitivity grid's step;
    ``crs_version``: "2" or "1"; ``min_difference``: the true CRS difference the verdict's plan to settle a tie
    is sized to detect (``settle.plan``).
    """

    reference: str = core.MEDIAN
    weights: Sequence[float] = core.DEFAULT_WEIGHTS
    bootstrap: int = 1000
    seed: int = 0
    bootstrap_unit: str = "both"
    simplex_step: float = SIMPLEX_STEP
    crs_version: str = core.LATEST
    min_difference: float = MIN_DIFFERENCE
