"""Scoring: run records -> axis values, CRS, ranks, bootstrap intervals (polars + numpy).

``score`` is the entry point; ``axes``, ``crs``, ``ranks`` and ``bootstrap`` hold the
pieces, each a pure function of a DataFrame or of arrays.
"""

from crs.scoring.run import Scores, comparison_set, score

__all__ = ["Scores", "comparison_set", "score"]
