"""Run records -> the four CRS axis values per (encoder, dataset, seed), and their seed means.

Every function takes a polars DataFrame and returns one, so they chain with ``.pipe``.
The definitions are those of docs/crs-v1.md section 1:

    D = A(1.0, clean)
    C = 1 - ECE(1.0, clean)
    L = mean over fractions f < 1 of retain(A(f, clean))
    R = P, or (P + S) / 2 where the dataset has a shift target
        P = mean over perturbed conditions k@v of retain(A(1.0, k@v))
        S = retain(A(1.0, shift:X))
    retain(a) = clip((a - 0.5) / (D - 0.5), 0, 1), and 0 where D <= 0.5

Rows the definition does not use (a perturbed or shift condition at a fraction below 1)
are ignored.
"""

from __future__ import annotations

import polars as pl

from crs.conditions import parse

AXES = ("discrimination", "calibration", "label_efficiency", "robustness")
KEYS = ("encoder", "dataset", "seed")
FRACTION_TOL = 1e-9  # fractions within this of 1.0 count as the full label set
REQUIRED = ("encoder", "dataset", "seed", "fraction", "condition", "auroc", "ece")
_EXAMPLES = 5  # rows quoted in an error message


def _examples(rows: pl.DataFrame) -> list[dict]:
    return rows.head(_EXAMPLES).select(*KEYS, "fraction", "condition").to_dicts()


def retain(a: pl.Expr, d: pl.Expr) -> pl.Expr:
    """retain(a) = clip((a - 0.5) / (D - 0.5), 0, 1), and 0 where D <= 0.5 (docs/crs-v1.md section 1)."""
    return pl.when(d > 0.5).then(((a - 0.5) / (d - 0.5)).clip(0.0, 1.0)).otherwise(0.0)


def require_columns(records: pl.DataFrame) -> None:
    """ValueError naming the columns of REQUIRED that ``records`` lacks."""
    missing = [c for c in REQUIRED if c not in records.columns]
    if missing:
        raise ValueError(
            f"run records lack column(s) {missing}; crs.records.COLUMNS lists the table's columns"
        )


def condition_kinds(records: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct condition with its kind ('clean' | 'perturbed' | 'shift').

    Raises ValueError (from ``crs.conditions.parse``) on a name that is none of these.
    """
    names = records.get_column("condition").unique().sort().to_list()
    return pl.DataFrame(
        {"condition": names, "kind": [parse(n).kind for n in names]},
        schema={"condition": pl.String, "kind": pl.String},
    )


def used_rows(records: pl.DataFrame) -> pl.DataFrame:
    """The rows docs/crs-v1.md reads: clean at every fraction, other conditions at fraction 1.0.

    Adds ``kind`` and ``full`` (fraction within FRACTION_TOL of 1.0) and snaps full
    fractions to exactly 1.0. Checks what the axes need and raises ValueError saying
    what is wrong: missing columns, fractions outside (0, 1], missing or NaN metrics,
    duplicate rows, and (encoder, seed) runs of a dataset that lack a (fraction,
    condition) the dataset's other runs have.
    """
    require_columns(records)
    rows = records.select(REQUIRED).with_columns(pl.col("fraction").cast(pl.Float64))
    bad = rows.filter(
        pl.col("fraction").is_null()
        | pl.col("fraction").is_nan()
        | (pl.col("fraction") <= 0.0)
        | (pl.col("fraction") > 1.0 + FRACTION_TOL)
    )
    if bad.height:
        raise ValueError(
            f"fraction must lie in (0, 1]; {bad.height} row(s) do not, e.g. {_examples(bad)}"
        )
    full = (pl.col("fraction") - 1.0).abs() <= FRACTION_TOL
    rows = (
        rows.join(condition_kinds(rows), on="condition", how="left")
        .with_columns(full=full)
        .with_columns(fraction=pl.when("full").then(1.0).otherwise(pl.col("fraction")))
        .filter((pl.col("kind") == "clean") | pl.col("full"))
    )

    needs_ece = (pl.col("kind") == "clean") & pl.col("full")
    nan = rows.filter(
        pl.col("auroc").is_null()
        | pl.col("auroc").is_nan()
        | (needs_ece & (pl.col("ece").is_null() | pl.col("ece").is_nan()))
    )
    if nan.height:
        raise ValueError(
            f"{nan.height} run record(s) have a missing or NaN auroc (or ece on the clean, "
            f"full-label row), e.g. {_examples(nan)}; "
            "re-run the probe for them or remove them"
        )

    cell = [*KEYS, "fraction", "condition"]
    dups = rows.group_by(cell).len().filter(pl.col("len") > 1).sort(cell)
    if dups.height:
        raise ValueError(
            f"{dups.height} (encoder, dataset, seed, fraction, condition) cell(s) have more "
            f"than one run record, e.g. {dups.head(_EXAMPLES).drop('len').to_dicts()}; "
            "keep one row per cell"
        )

    # Every run of a dataset must have the same cells, or its axes are means over
    # different things and the encoders are not comparable.
    cells = rows.select("dataset", "fraction", "condition", "kind").unique()
    runs = rows.select(KEYS).unique()
    holes = runs.join(cells, on="dataset").join(rows, on=cell, how="anti").sort(cell)
    if holes.height:
        raise ValueError(
            f"{holes.height} run record(s) are missing that other runs of the same dataset "
            f"have, e.g. {holes.head(_EXAMPLES).select(cell).to_dicts()}; re-run the probe "
            "for them or remove the other runs' extra rows"
        )
    for dataset, group in cells.sort("dataset").group_by("dataset", maintain_order=True):
        name = dataset[0]
        clean = group.filter(pl.col("kind") == "clean")
        if not clean.filter(pl.col("fraction") == 1.0).height:
            raise ValueError(
                f"dataset {name!r} has no clean row at fraction 1.0, which every axis needs"
            )
        if not clean.filter(pl.col("fraction") < 1.0).height:
            raise ValueError(
                f"dataset {name!r} has no clean row at a fraction below 1; label efficiency "
                "needs at least one"
            )
        if not group.filter(pl.col("kind") != "clean").height:
            raise ValueError(
                f"dataset {name!r} has no perturbed or shift condition at fraction 1.0; "
                "robustness needs at least one"
            )
    return rows


def axes_by_seed(records: pl.DataFrame) -> pl.DataFrame:
    """Axis values per (encoder, dataset, seed), docs/crs-v1.md section 1.

    Returns columns encoder, dataset, seed, discrimination, calibration,
    label_efficiency, robustness, and the two parts of robustness: perturbation (P)
    and shift (S, null where the dataset has no shift target). Where a dataset has
    several shift targets S is the mean of their retentions; where it has no perturbed
    condition, R = S.
    """
    rows = used_rows(records)
    clean_full = (pl.col("kind") == "clean") & pl.col("full")
    d = rows.filter(clean_full).select(*KEYS, d=pl.col("auroc"))
    rows = rows.join(d, on=KEYS).with_columns(retain=retain(pl.col("auroc"), pl.col("d")))
    return (
        rows.group_by(KEYS)
        .agg(
            discrimination=pl.col("auroc").filter(clean_full).first(),
            calibration=(1.0 - pl.col("ece")).filter(clean_full).first(),
            label_efficiency=pl.col("retain")
            .filter((pl.col("kind") == "clean") & ~pl.col("full"))
            .mean(),
            perturbation=pl.col("retain").filter(pl.col("kind") == "perturbed").mean(),
            shift=pl.col("retain").filter(pl.col("kind") == "shift").mean(),
        )
        # mean_horizontal skips nulls: (P + S) / 2 with a shift target, P (or S) alone otherwise
        .with_columns(robustness=pl.mean_horizontal("perturbation", "shift"))
        .select(*KEYS, *AXES, "perturbation", "shift")
        .sort(KEYS)
    )


def seed_means(axes: pl.DataFrame) -> pl.DataFrame:
    """Mean over seeds of each axis per (encoder, dataset), docs/crs-v1.md section 1; adds n_seeds."""
    return (
        axes.group_by("encoder", "dataset")
        .agg(*[pl.col(a).mean() for a in AXES], n_seeds=pl.len().cast(pl.Int64))
        .sort("encoder", "dataset")
    )
