"""A score as the command line prints it: the leaderboard, its marks and the verdict's sentences.

The scoring modules say how a score reads (``crs.scoring.leaderboard``, ``verdict``, ``diagnostics``);
these are their entry points for the printers, so the command line reaches scoring through this layer.
Importing this module imports polars.
"""

from __future__ import annotations

from crs.scoring.bootstrap import unit_words
from crs.scoring.diagnostics import TIE_MARK, mark
from crs.scoring.leaderboard import board, reference
from crs.scoring.verdict import scale_sentence, sentences
from crs.scoring.versions import get as definition

__all__ = ["TIE_MARK", "board", "definition", "mark", "reference", "scale_sentence", "sentences", "unit_words"]
