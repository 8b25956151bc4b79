"""The comparison set: the encoders and datasets a score compares, and the runs it reads."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from crs.foundations.errors import BadInput
from crs.foundations.names import VALIDATION
from crs.scoring.axes import axes_by_seed, used_rows
from crs.scoring.bootstrap import seed_tensor
from crs.scoring.crs import MEDIAN


@dataclass(frozen=True)
class Runs:
    """The runs a score reads: the used run-record rows (``axes.used_rows``) of the comparison set's encoders,
    datasets and seeds, in this order."""

    used: pl.DataFrame
    encoders: list[str]
    datasets: list[str]
    seeds: list[int]


@dataclass(frozen=True)
class Comparison(Runs):
    """The comparison set and its run records (``comparison``)."""

    records: pl.DataFrame  # the run records of the comparison set, validation rows left out
    by_seed: pl.DataFrame  # axes_by_seed(records): C from the run records' ECE
    excluded: dict  # {'encoders': [...], 'datasets': [...]} outside the set
    reference: int | str  # the reference encoder's index in ``encoders``, or 'median'


def comparison_set(
    records: pl.DataFrame, reference: str = MEDIAN
) -> tuple[list[str], list[str], dict]:
    """The encoders and datasets where every encoder has every dataset (docs/crs-v1.md section 2).

    When the records are not a full grid, the largest such block wins: most
    (encoder, dataset) cells, then most encoders, then the alphabetically first dataset
    list. It must hold at least 2 encoders, and the reference when one is named. A best
    block's datasets are the intersection of its encoders' dataset sets, so the
    candidates are the closure of those sets under intersection. Returns (encoders,
    datasets, excluded) with excluded = {'encoders': [...], 'datasets': [...]}.
    """
    pairs = records.select("encoder", "dataset").unique()
    have: dict[str, frozenset[str]] = {
        r["encoder"]: frozenset(r["dataset"])
        for r in pairs.group_by("encoder").agg("dataset").iter_rows(named=True)
    }
    sets = set(have.values())
    frontier = set(sets)
    while frontier:
        frontier = {a & b for a in frontier for b in have.values()} - sets - {frozenset()}
        sets |= frontier
    best: tuple[tuple[int, int], list[str], list[str]] | None = None
    for datasets in sorted(sorted(s) for s in sets):
        encoders = sorted(e for e, s in have.items() if s.issuperset(datasets))
        if len(encoders) < 2 or (reference != MEDIAN and reference not in encoders):
            continue
        key = (len(encoders) * len(datasets), len(encoders))
        if best is None or key > best[0]:
            best = (key, encoders, datasets)
    if best is None:
        need = "" if reference == MEDIAN else f", one of them the reference {reference!r},"
        raise BadInput(
            f"no dataset is shared by at least 2 encoders{need} (encoders and their datasets: "
            f"{ {e: sorted(s) for e, s in sorted(have.items())} }); CRS compares encoders on "
            "common datasets: probe at least two encoders on the same dataset"
        )
    _, encoders, datasets = best
    excluded = {
        "encoders": sorted(set(have) - set(encoders)),
        "datasets": sorted(set().union(*have.values()) - set(datasets)),
    }
    return encoders, datasets, excluded


def comparison_records(records: pl.DataFrame, reference: str):
    """(records of the comparison set, its encoders, its datasets, what was excluded)."""
    # rows a probe may keep for its validation split serve temperature scaling, never the axes
    records = records.filter(pl.col("condition") != VALIDATION)
    _check_encoders(records, reference)
    encoders, datasets, excluded = comparison_set(records, reference)
    records = records.filter(pl.col("encoder").is_in(encoders) & pl.col("dataset").is_in(datasets))
    return records, encoders, datasets, excluded


def comparison_of(records: pl.DataFrame, encoders: list[str], datasets: list[str], excluded: dict,
                  reference: str) -> Comparison:
    """The ``Comparison`` of the comparison set's records: its seeds (the same for every pair,
    ``bootstrap.seed_tensor``), used rows and the reference's index."""
    by_seed = axes_by_seed(records)
    _, seeds = seed_tensor(by_seed, encoders, datasets)
    ref: int | str = MEDIAN if reference == MEDIAN else encoders.index(reference)
    return Comparison(used=used_rows(records), encoders=encoders, datasets=datasets, seeds=seeds, records=records,
                      by_seed=by_seed, excluded=excluded, reference=ref)


def _check_encoders(records: pl.DataFrame, reference: str) -> None:
    present = sorted(records.get_column("encoder").unique().to_list())
    if len(present) < 2:
        raise BadInput(f"CRS compares encoders and needs at least 2, the records hold {present}")
    if reference != MEDIAN and reference not in present:
        raise BadInput(
            f"reference {reference!r} is not among the encoders in the records: {present}; "
            f"name one of them or use {MEDIAN!r}"
        )
