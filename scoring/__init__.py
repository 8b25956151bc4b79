"""Scoring: run records -> axis values, CRS, ranks, bootstrap intervals (polars + numpy).

``score`` is the entry point and ``ScoreOptions`` its settings; ``axes``, ``crs``, ``ranks``
and ``bootstrap`` hold the pieces, each a pure function of a DataFrame or of arrays.
"""

from crs.scoring.comparison import comparison_set
from crs.scoring.options import ScoreOptions
from crs.scoring.run import Scores, score

__all__ = ["ScoreOptions", "Scores", "comparison_set", "score"]
