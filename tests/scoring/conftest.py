"""Tiny synthetic run-record tables for the scoring tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
import pytest

from crs.records import COLUMNS

FRACTIONS = (0.1, 0.5, 1.0)
CONDITIONS = ("clean", "gaussian_noise@1", "gaussian_noise@2", "shift:other")
# how much AUROC each condition / fraction costs in the synthetic records
DROP = {"clean": 0.0, "gaussian_noise@1": 0.05, "gaussian_noise@2": 0.12, "shift:other": 0.08}
FRACTION_DROP = {0.1: 0.15, 0.5: 0.05, 1.0: 0.0}


def table(rows: list[dict]) -> pl.DataFrame:
    """Run records with every column of crs.records.COLUMNS; missing ones filled with defaults."""
    defaults = {
        "task": "multiclass",
        "ece": 0.05,
        "brier": 0.2,
        "nll": 0.5,
        "accuracy": 0.8,
        "l2": 1e-3,
        "n_train": 100,
        "n_eval": 50,
        "classes_missing": 0,
        "converged": True,
        "iterations": 10,
    }
    full = [{c: r.get(c, defaults.get(c)) for c in COLUMNS} for r in rows]
    return pl.DataFrame(full, schema={c: getattr(pl, t) for c, (t, _) in COLUMNS.items()})


def synthetic(
    quality: dict[str, float],
    datasets: Sequence[str] = ("d1", "d2"),
    seeds: Sequence[int] = (0, 1, 2),
    fractions: Sequence[float] = FRACTIONS,
    conditions: Sequence[str] = CONDITIONS,
    noise: float = 0.01,
    rng_seed: int = 0,
) -> pl.DataFrame:
    """Records for encoders of the given clean AUROC: clean at every fraction, others at 1.0."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for e, base in quality.items():
        for d in datasets:
            for s in seeds:
                for f in fractions:
                    for c in conditions:
                        if c != "clean" and f != 1.0:
                            continue
                        auroc = base - FRACTION_DROP[f] - DROP[c] + noise * rng.standard_normal()
                        rows.append(
                            {
                                "encoder": e,
                                "dataset": d,
                                "seed": s,
                                "fraction": f,
                                "condition": c,
                                "auroc": float(np.clip(auroc, 0.0, 1.0)),
                                "ece": float(
                                    np.clip(0.2 - 0.15 * base + noise * rng.standard_normal(), 0, 1)
                                ),
                            }
                        )
    return table(rows)


@pytest.fixture
def make_table() -> Callable[[list[dict]], pl.DataFrame]:
    return table


@pytest.fixture
def make_records() -> Callable[..., pl.DataFrame]:
    return synthetic
