"""Run records -> the CRS axis values per (encoder, dataset, seed), and their seed means.

Every table function takes a polars DataFrame and returns one, so they chain with
``.pipe``. The axes are a registry (``REGISTRY``, in order; ``AXES`` their names): each
``Axis`` record carries its symbol, meaning, how it is computed from one run's records
(a polars aggregation) and from the image bootstrap's arrays (a numpy function), so adding
an axis is one ``register`` call here plus its test. The definitions are those of
docs/crs-v1.md section 1:

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.conditions import parse
from crs.foundations.errors import BadInput

KEYS = ("encoder", "dataset", "seed")
FRACTION_TOL = 1e-9  # fractions within this of 1.0 count as the full label set
REQUIRED = ("encoder", "dataset", "seed", "fraction", "condition", "auroc", "ece")
_EXAMPLES = 5  # rows quoted in an error message


def _examples(rows: pl.DataFrame) -> list[dict]:
    return rows.head(_EXAMPLES).select(*KEYS, "fraction", "condition").to_dicts()


# ------------------------------------------------------------------ retain
def retain_array(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """retain(a) = clip((a - 0.5) / (D - 0.5), 0, 1), and 0 where D <= 0.5 (docs/crs-v1.md section 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip((a - 0.5) / (d - 0.5), 0.0, 1.0)
    return np.where(d > 0.5, r, 0.0)


def retain(a: pl.Expr, d: pl.Expr) -> pl.Expr:
    """``retain_array`` as a polars expression (tested equal to it)."""
    return pl.when(d > 0.5).then(((a - 0.5) / (d - 0.5)).clip(0.0, 1.0)).otherwise(0.0)


# ---------------------------------------------------------------- registry
class AxisArrays(NamedTuple):
    """What the image bootstrap has per run, each [...] over replicates (and any leading axes)."""

    d: np.ndarray  # clean AUROC at fraction 1
    ece: np.ndarray  # clean ECE at fraction 1
    low_fraction: np.ndarray  # [..., f] clean AUROC at each fraction below 1
    perturbed: np.ndarray | None  # [..., c] AUROC per perturbed condition at fraction 1
    shift: np.ndarray | None  # [..., t] AUROC on each shift target at fraction 1


@dataclass(frozen=True)
class Axis:
    """One CRS axis: higher-better, in [0, 1]."""

    name: str  # the column name in every table
    symbol: str  # one letter, in figures and the report
    meaning: str
    value: pl.Expr  # over one run's used rows (``used_rows`` plus retain): the axis value
    array: Callable[[AxisArrays], np.ndarray]  # the same from the bootstrap's arrays


REGISTRY: dict[str, Axis] = {}


def register(axis: Axis) -> Axis:
    """Add an axis at the end of the order; a name or symbol already taken is refused."""
    if axis.name in REGISTRY or axis.symbol in {a.symbol for a in REGISTRY.values()}:
        raise ValueError(f"an axis named {axis.name!r} or with symbol {axis.symbol!r} is already registered")
    REGISTRY[axis.name] = axis
    return axis


_CLEAN = pl.col("kind") == "clean"
_CLEAN_FULL = _CLEAN & pl.col("full")
# the parts of robustness, kept as columns of axes_by_seed: P, and S (null without a shift target)
PARTS = {
    "perturbation": pl.col("retain").filter(pl.col("kind") == "perturbed").mean(),
    "shift": pl.col("retain").filter(pl.col("kind") == "shift").mean(),
}


def _robustness(x: AxisArrays) -> np.ndarray:
    dd = x.d[..., None]
    parts = [retain_array(v, dd).mean(axis=-1) for v in (x.perturbed, x.shift) if v is not None and v.shape[-1]]
    if not parts:
        raise BadInput("robustness needs at least one perturbed or shift condition, and the run records hold none: "
                       "extract with perturbations (drop --no-perturb) or a shift target, then `crs probe` again")
    return sum(parts) / len(parts)


register(Axis("discrimination", "D", "macro one-vs-rest AUROC on the clean test split, all training labels",
              pl.col("auroc").filter(_CLEAN_FULL).first(), lambda x: x.d))
register(Axis("calibration", "C", "1 - top-label ECE (15 equal-width bins), clean, all training labels",
              (1.0 - pl.col("ece")).filter(_CLEAN_FULL).first(), lambda x: 1.0 - x.ece))
register(Axis("label_efficiency", "L", "mean retained AUROC over the label fractions below 1, clean",
              pl.col("retain").filter(_CLEAN & ~pl.col("full")).mean(),
              lambda x: retain_array(x.low_fraction, x.d[..., None]).mean(axis=-1)))
# mean_horizontal skips nulls: (P + S) / 2 with a shift target, P (or S) alone otherwise
register(Axis("robustness", "R", "mean retained AUROC under perturbations, averaged with the shift target's",
              pl.mean_horizontal(PARTS["perturbation"], PARTS["shift"]), _robustness))

AXES = tuple(REGISTRY)


def axes_from(x: AxisArrays) -> np.ndarray:
    """The axis values [..., axis] in ``AXES`` order from the bootstrap's arrays."""
    return np.stack([a.array(x) for a in REGISTRY.values()], axis=-1)


def require_columns(records: pl.DataFrame) -> None:
    """BadInput (a ValueError) naming the columns of REQUIRED that ``records`` lacks."""
    missing = [c for c in REQUIRED if c not in records.columns]
    if missing:
        raise BadInput(
            f"run records lack column(s) {missing}; crs.foundations.records.COLUMNS lists the table's columns"
        )


def condition_kinds(records: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct condition with its kind ('clean' | 'perturbed' | 'shift').

    Raises BadInput naming a condition that is none of these (a damaged or hand-edited
    run record).
    """
    names = records.get_column("condition").unique().sort().to_list()
    kinds = []
    for n in names:
        try:
            kinds.append(parse(n).kind)
        except (ValueError, TypeError) as exc:  # parse's own refusal of the name, or a null
            raise BadInput(f"the run records hold a condition that is not one: {exc}; re-run `crs probe` for "
                           "the pair that wrote it, or remove its rows") from exc
    return pl.DataFrame({"condition": names, "kind": kinds}, schema={"condition": pl.String, "kind": pl.String})


def used_rows(records: pl.DataFrame) -> pl.DataFrame:
    """The rows docs/crs-v1.md reads: clean at every fraction, other conditions at fraction 1.0.

    Adds ``kind`` and ``full`` (fraction within FRACTION_TOL of 1.0) and snaps full
    fractions to exactly 1.0. Checks what the axes need and raises BadInput (a
    ValueError) saying what is wrong: missing columns, fractions outside (0, 1], missing
    or NaN metrics, duplicate rows, and (encoder, seed) runs of a dataset that lack a
    (fraction, condition) the dataset's other runs have.
    """
    require_columns(records)
    rows = records.select(REQUIRED).with_columns(pl.col("fraction").cast(pl.Float64))
    _check_fractions(rows)
    full = (pl.col("fraction") - 1.0).abs() <= FRACTION_TOL
    rows = (
        rows.join(condition_kinds(rows), on="condition", how="left")
        .with_columns(full=full)
        .with_columns(fraction=pl.when("full").then(1.0).otherwise(pl.col("fraction")))
        .filter((pl.col("kind") == "clean") | pl.col("full"))
    )
    for check in (_check_metrics, _check_duplicates, _check_grid):
        check(rows)
    return rows


def _check_fractions(rows: pl.DataFrame) -> None:
    bad = rows.filter(
        pl.col("fraction").is_null()
        | pl.col("fraction").is_nan()
        | (pl.col("fraction") <= 0.0)
        | (pl.col("fraction") > 1.0 + FRACTION_TOL)
    )
    if bad.height:
        raise BadInput(f"fraction must lie in (0, 1]; {bad.height} row(s) do not, e.g. {_examples(bad)}")


def _check_metrics(rows: pl.DataFrame) -> None:
    nan = rows.filter(
        pl.col("auroc").is_null()
        | pl.col("auroc").is_nan()
        | (_CLEAN_FULL & (pl.col("ece").is_null() | pl.col("ece").is_nan()))
    )
    if nan.height:
        raise BadInput(
            f"{nan.height} run record(s) have a missing or NaN auroc (or ece on the clean, "
            f"full-label row), e.g. {_examples(nan)}; "
            "re-run the probe for them or remove them"
        )


def _check_duplicates(rows: pl.DataFrame) -> None:
    cell = [*KEYS, "fraction", "condition"]
    dups = rows.group_by(cell).len().filter(pl.col("len") > 1).sort(cell)
    if dups.height:
        raise BadInput(
            f"{dups.height} (encoder, dataset, seed, fraction, condition) cell(s) have more "
            f"than one run record, e.g. {dups.head(_EXAMPLES).drop('len').to_dicts()}; "
            "keep one row per cell"
        )


def _holes_message(holes: pl.DataFrame) -> str:
    """What each (encoder, dataset) lacks of the cells other runs of its dataset have, and the fix for each kind:
    a condition it lacks was never extracted for it (encoders extracted with other perturbation families or
    severities, or without a shift target), so probing again cannot make it; a fraction or seed it lacks
    can be (the probe run with other --fractions or --seeds)."""
    lacks = (holes.with_columns(what=pl.when(pl.col("kind") == "clean")
                                .then(pl.format("clean at fraction {}", pl.col("fraction")))
                                .otherwise(pl.col("condition")))
             .group_by("encoder", "dataset", maintain_order=True)
             .agg(pl.col("what").unique(maintain_order=True), pl.col("seed").unique().sort(),
                  extract=(pl.col("kind") != "clean").any()))
    said = [f"{r['encoder']} on {r['dataset']} lacks {', '.join(r['what'][:4])}"
            + (f" and {len(r['what']) - 4} more" if len(r['what']) > 4 else "") + f" (seeds {r['seed']})"
            for r in lacks.head(_EXAMPLES).iter_rows(named=True)]
    fixes = []
    if lacks["extract"].any():
        fixes.append("a condition an encoder lacks was never extracted for it (the encoders were extracted with "
                     "different --perturbation-families or --severities, or shift targets), so probing again cannot "
                     "make it: run `crs extract` for that encoder and dataset with the others' settings, then "
                     "`crs probe` it again")
    if not lacks["extract"].all():
        fixes.append("a fraction an encoder lacks: probe it again with the same --fractions and --seeds as the others")
    more = f"; and {lacks.height - _EXAMPLES} more encoder-dataset pairs" if lacks.height > _EXAMPLES else ""
    return (f"{holes.height} run record(s) are missing that other runs of the same dataset have: "
            f"{'; '.join(said)}{more}. The encoders are not comparable on different conditions: "
            f"{'; '.join(fixes)}; or remove the other runs' extra rows from the run records")


def _check_grid(rows: pl.DataFrame) -> None:
    """Every run of a dataset has the same cells (or its axes are means over different
    things and the encoders are not comparable), and the cells every axis needs."""
    cell = [*KEYS, "fraction", "condition"]
    cells = rows.select("dataset", "fraction", "condition", "kind").unique()
    runs = rows.select(KEYS).unique()
    holes = runs.join(cells, on="dataset").join(rows, on=cell, how="anti").sort(cell)
    if holes.height:
        raise BadInput(_holes_message(holes))
    for (name,), group in cells.sort("dataset").group_by("dataset", maintain_order=True):
        clean = group.filter(pl.col("kind") == "clean")
        if not clean.filter(pl.col("fraction") == 1.0).height:
            raise BadInput(f"dataset {name!r} has no clean row at fraction 1.0, which every axis needs")
        if not clean.filter(pl.col("fraction") < 1.0).height:
            raise BadInput(
                f"dataset {name!r} has no clean row at a fraction below 1; label efficiency "
                "needs at least one"
            )
        if not group.filter(pl.col("kind") != "clean").height:
            raise BadInput(
                f"dataset {name!r} has no perturbed or shift condition at fraction 1.0; "
                "robustness needs at least one"
            )


def axes_by_seed(records: pl.DataFrame) -> pl.DataFrame:
    """Axis values per (encoder, dataset, seed), docs/crs-v1.md section 1, from ``REGISTRY``.

    Returns columns encoder, dataset, seed, the axes in ``AXES`` order, and the two parts
    of robustness: perturbation (P) and shift (S, null where the dataset has no shift
    target). Where a dataset has several shift targets S is the mean of their
    retentions; where it has no perturbed condition, R = S.
    """
    rows = used_rows(records)
    d = rows.filter(_CLEAN_FULL).select(*KEYS, d=pl.col("auroc"))
    rows = rows.join(d, on=KEYS).with_columns(retain=retain(pl.col("auroc"), pl.col("d")))
    return (
        rows.group_by(KEYS)
        .agg(**{a.name: a.value for a in REGISTRY.values()}, **PARTS)
        .select(*KEYS, *AXES, *PARTS)
        .sort(KEYS)
    )


def seed_means(axes: pl.DataFrame) -> pl.DataFrame:
    """Mean over seeds of each axis per (encoder, dataset), docs/crs-v1.md section 1; adds n_seeds."""
    return (
        axes.group_by("encoder", "dataset")
        .agg(*[pl.col(a).mean() for a in AXES], n_seeds=pl.len().cast(pl.Int64))
        .sort("encoder", "dataset")
    )
