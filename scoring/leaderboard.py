"""The leaderboard: which columns of the scores' encoders table it shows, in which order, and which encoder
is the reference. One builder for every place that shows it: the terminal (`crs score`, `crs run`), the
report's page and its tables/leaderboard.{csv,parquet}; `--json` carries the whole encoders table it is
built from."""

from __future__ import annotations

import polars as pl

from crs.scoring.axes import AXES

COST_COLUMNS = ("parameters", "gflops", "width", "images_per_s", "device")  # recorded by `crs extract`
MODEL_COLUMNS = ("revision", "licence", "gated")  # the weights scored
COLUMNS = ["encoder", "reference", "crs_rank", "crs", "crs_low", "crs_high", "tier", "tie_group", "crs_diff",
           "crs_diff_low", "crs_diff_high", "rank_low", "rank_high", "p_rank1", "auroc", "auroc_rank",
           *[c for a in AXES for c in (a, f"{a}_low", f"{a}_high")], *[f"q_{a}" for a in AXES], "dominance",
           "balance", "worst_axis", "pareto", "ties_marked", *COST_COLUMNS, *MODEL_COLUMNS, "revision_expected"]


def board(encoders: pl.DataFrame) -> pl.DataFrame:
    """The overall leaderboard: the encoders table's ``COLUMNS`` it has, rows in the score's order (best CRS
    first)."""
    return encoders.select([c for c in COLUMNS if c in encoders.columns])


def reference(board: pl.DataFrame, named: str | None) -> str | None:
    """The reference encoder (the zero point of every q): the one the scores flag in their ``reference``
    column, else ``named`` (the settings' reference) where it is an encoder of ``board``; None for the
    per-axis median."""
    if "reference" in board.columns and board["reference"].fill_null(False).any():
        return board.filter(pl.col("reference").fill_null(False))["encoder"][0]
    return named if "encoder" in board.columns and named in board["encoder"].to_list() else None
