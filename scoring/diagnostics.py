"""Probe diagnostics that can make an axis untrustworthy, from the run records, shown beside the verdict.

Per (encoder, dataset): the features left out of the probe (``features_left_out``), the largest
standardised value any image reached (``max_scaled``, against the clean test's), and every
condition whose share of tied test scores (``tie_share``, the largest over seeds) exceeds
``TIE_SHOWN``. An axis value computed from a condition whose tie share exceeds ``TIE_MARKED`` is
marked: its AUROC then counts ties rather than a ranking (``used_axes`` says which AUROC feeds
which axis). Which conditions feed which axis is
docs/crs-v1.md section 1's rule (``used_axes``). Run records from before a column existed give
nulls for it, and no mark.
"""

from __future__ import annotations

import polars as pl

from crs.scoring.axes import AXES, FRACTION_TOL, REGISTRY

TIE_SHOWN = 0.05  # conditions above this tie share are listed
TIE_MARKED = 0.20  # an axis value from a condition above this is marked
SYMBOL = {a: REGISTRY[a].symbol for a in AXES}


def used_axes(condition: pl.Expr, fraction: pl.Expr) -> pl.Expr:
    """The AUROC-based axes a run-record row feeds (a list of axis names, empty for a row none reads):
    clean at fraction 1 -> discrimination, and label efficiency and robustness, whose retention
    divides by it; clean below 1 -> label efficiency; perturbed or shift at fraction 1 -> robustness.
    Calibration is an ECE, which ties do not make arbitrary."""
    full = (fraction - 1.0).abs() <= FRACTION_TOL
    clean = condition == "clean"
    return (pl.when(clean & full).then(pl.lit(["discrimination", "label_efficiency", "robustness"]))
            .when(clean).then(pl.lit(["label_efficiency"]))
            .when(full & (condition != "validation")).then(pl.lit(["robustness"]))
            .otherwise(pl.lit([], dtype=pl.List(pl.String))))


def tied_conditions(records: pl.DataFrame, limit: float = TIE_SHOWN) -> pl.DataFrame:
    """(encoder, dataset, condition, axis, tie_share) for every condition and axis it feeds whose largest
    tie share over the rows the axis reads exceeds ``limit``, worst first within each pair."""
    schema = {"encoder": pl.String, "dataset": pl.String, "condition": pl.String, "axis": pl.String,
              "tie_share": pl.Float64}
    if "tie_share" not in records.columns:
        return pl.DataFrame(schema=schema)
    rows = records.with_columns(axis=used_axes(pl.col("condition"), pl.col("fraction").cast(pl.Float64)))
    return (rows.explode("axis").filter(pl.col("axis").is_not_null() & pl.col("tie_share").is_not_nan())
            .group_by("encoder", "dataset", "condition", "axis")
            .agg(pl.col("tie_share").max())
            .filter(pl.col("tie_share") > limit)
            .sort(["encoder", "dataset", "tie_share", "condition", "axis"],
                  descending=[False, False, True, False, False])
            .select(list(schema)))


def probe_health(records: pl.DataFrame) -> pl.DataFrame:
    """One row per (encoder, dataset): features_left_out, max_scaled_clean (the clean test's largest |z|),
    max_scaled and max_scaled_condition (the largest over every condition), tied (the conditions above
    ``TIE_SHOWN``, as 'condition 37 %' text) and marked (the axis symbols resting on a condition above
    ``TIE_MARKED``)."""
    cols = records.columns
    scaled = pl.col("max_scaled") if "max_scaled" in cols else pl.lit(None, pl.Float64)
    left = pl.col("features_left_out") if "features_left_out" in cols else pl.lit(None, pl.Int64)
    base = (records.with_columns(_scaled=scaled.cast(pl.Float64), _left=left.cast(pl.Int64))
            .group_by("encoder", "dataset")
            .agg(features_left_out=pl.col("_left").max(),
                 max_scaled_clean=pl.col("_scaled").filter(pl.col("condition") == "clean").max(),
                 max_scaled=pl.col("_scaled").max(),
                 max_scaled_condition=pl.col("condition").sort_by("_scaled", descending=True, nulls_last=True)
                 .first()))
    tied = tied_conditions(records)
    per_condition = (tied.group_by("encoder", "dataset", "condition", maintain_order=True)
                     .agg(pl.col("tie_share").max(), marked=pl.col("axis").filter(pl.col("tie_share") > TIE_MARKED)))
    text = per_condition.group_by("encoder", "dataset", maintain_order=True).agg(
        tied=pl.format("{} {}%", pl.col("condition"), (100 * pl.col("tie_share")).round(0).cast(pl.Int64))
        .str.join(", "),
        marked=pl.col("marked").list.explode(keep_nulls=False, empty_as_null=False).unique().sort())
    out = base.join(text, on=["encoder", "dataset"], how="left").sort("encoder", "dataset")
    symbols = pl.col("marked").map_elements(lambda m: marks_text([a for a in AXES if a in m]), return_dtype=pl.String)
    return out.with_columns(marked=pl.when(pl.col("marked").is_null()).then(pl.lit("")).otherwise(symbols))


def marked_axes(health: pl.DataFrame) -> dict[str, list[str]]:
    """encoder -> the axes (in ``AXES`` order) marked on any of its datasets."""
    by_symbol = {sym: a for a, sym in SYMBOL.items()}
    out: dict[str, set] = {}
    for r in health.select("encoder", "marked").iter_rows(named=True):
        out.setdefault(r["encoder"], set()).update(by_symbol[x] for x in (r["marked"] or "").split())
    return {e: [a for a in AXES if a in s] for e, s in out.items()}


def marks_text(axes: list[str]) -> str:
    """'R' or 'D C' for the marked axes; '' where none is."""
    return " ".join(SYMBOL[a] for a in axes)


TIE_MARK = "†"  # beside an axis value in a leaderboard: it rests on a condition above TIE_MARKED ties


def mark(row: dict, symbol: str) -> str:
    """' †' after an encoders-table row's axis value (``symbol``, e.g. 'R') marked in ``ties_marked``; else ''."""
    return f" {TIE_MARK}" if symbol in (row.get("ties_marked") or "").split() else ""


def notes(records: pl.DataFrame, limit: float = TIE_MARKED) -> list[str]:
    """One sentence per (encoder, axis) whose value rests on a condition above ``limit`` tied scores."""
    tied = tied_conditions(records, limit)
    out = []
    for (encoder, axis), g in tied.group_by("encoder", "axis", maintain_order=True):
        named = ", ".join(f"{r['condition']} on {r['dataset']} ({r['tie_share']:.0%})" for r in g.head(4).iter_rows(
            named=True)) + (f" and {g.height - 4} more" if g.height > 4 else "")
        out.append(f"{encoder}'s {axis.replace('_', ' ')} ({SYMBOL[axis]}) rests on AUROCs with more than "
                   f"{limit:.0%} tied test scores ({named}): those AUROCs count ties, not a ranking")
    return sorted(out)
