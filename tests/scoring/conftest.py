"""Tiny synthetic run-record tables for the scoring tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
import pytest

from crs.foundations import forms
from crs.foundations import records as run_records
from crs.foundations.records import COLUMNS

GENERATION = "g-test"  # the probe generation the tiny store's predictions and the saved run records name

FRACTIONS = (0.1, 0.5, 1.0)
CONDITIONS = ("clean", "gaussian_noise@1", "gaussian_noise@2", "shift:other")
# how much AUROC each condition / fraction costs in the synthetic records
DROP = {"clean": 0.0, "gaussian_noise@1": 0.05, "gaussian_noise@2": 0.12, "shift:other": 0.08}
FRACTION_DROP = {0.1: 0.15, 0.5: 0.05, 1.0: 0.0}


def table(rows: list[dict]) -> pl.DataFrame:
    """Run records with every column of crs.foundations.records.COLUMNS; missing ones filled with defaults."""
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


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def build_store(
    path,
    quality: dict[str, float],
    seeds: Sequence[int] = (0, 1, 2),
    fractions: Sequence[float] = (0.5, 1.0),
    n_test: int = 40,
    n_val: int = 30,
    k: int = 3,
    validation: bool = True,
    rng_seed: int = 0,
    task: str = "multiclass",
):
    """A tiny store with test (and validation) probabilities, and run records computed from them.

    One dataset 'd1' (multi-class, ordinal) whose shift target 'd1_site2' has its own test
    images; conditions clean, gaussian_noise@1 and shift:d1_site2. A higher ``quality``
    gives more accurate probabilities; smaller fractions and the perturbed and shift
    conditions add noise. Probabilities are over-confident (the fitted temperature is
    about 2.5). ``task='multilabel'``: k labels, some unknown (-1), per-label sigmoids.
    """
    from crs.scoring import metrics
    from crs.store import SPLIT_CODE, DatasetTable, Store

    rng = np.random.default_rng(rng_seed)
    store = Store(str(path), "a")
    n_train = 20
    labels_by = {}
    for name, shift_target in (("d1", "d1_site2"), ("d1_site2", None)):
        n = n_test + n_val + n_train
        if task == "multiclass":
            labels = rng.integers(0, k, n)
            labels[:k] = np.arange(k)
        else:
            labels = rng.integers(0, 2, (n, k)).astype(np.int8)
            labels[rng.random((n, k)) < 0.1] = -1
            labels[:2] = [[1] * k, [0] * k]
            labels[n_test : n_test + 2] = [[1] * k, [0] * k]
        split = np.array([SPLIT_CODE["test"]] * n_test + [SPLIT_CODE["val"]] * n_val
                         + [SPLIT_CODE["train"]] * n_train, dtype=np.int8)  # fmt: skip
        attrs = {"task": task, "classes": [f"c{i}" for i in range(k)], "ordinal": task == "multiclass"}
        if shift_target:
            attrs["shift_target"] = shift_target
        store.write_dataset(DatasetTable(np.array([f"{name}-{i}" for i in range(n)]), labels,
                                         split, np.array(["g"] * n), name=name, attrs=attrs))  # fmt: skip
        labels_by[name] = labels
    conditions = {"clean": ("d1", 0.0), "gaussian_noise@1": ("d1", 0.7), "shift:d1_site2": ("d1_site2", 0.5)}
    rows = []
    for enc, q in quality.items():
        sets = dict(conditions)
        if validation:
            sets["validation"] = ("d1", 0.0)
        for cond, (source, extra) in sets.items():
            lab = labels_by[source]
            idx = np.arange(n_test, n_test + n_val) if cond == "validation" else np.arange(n_test)
            y = lab[idx]
            noise = rng.normal(size=(len(seeds), len(fractions), len(idx), k))
            frac_noise = np.array([1.0 - f for f in fractions])[None, :, None, None]
            mu, sigma = 2.0 * q, 1.0 + extra + frac_noise
            if task == "multiclass":
                z = mu * np.eye(k)[y] + sigma * noise
                # (mu / sigma^2) z are the Bayes posterior logits; 2.5 times them is over-confident
                probs = _softmax(z * 2.5 * mu / sigma**2)
            else:
                z = mu * (2.0 * (y == 1) - 1.0) + sigma * noise
                probs = 1.0 / (1.0 + np.exp(-z * 2.5 * 2.0 * mu / sigma**2))
            store.write_predictions("d1", enc, cond, np.log(probs), {  # stored as crs probe stores them
                "seeds": list(seeds), "fractions": list(fractions), "classes": [f"c{i}" for i in range(k)],
                run_records.PREDICTION_GENERATION: GENERATION, forms.KEY: forms.LOG_PROB,
            })  # fmt: skip
            if cond == "validation":
                continue
            long = metrics.long_table(probs, y, task, {"seed": list(seeds), "fraction": list(fractions)})
            m = metrics.all_metrics(long, ["seed", "fraction"], task)
            for r in m.iter_rows(named=True):
                rows.append({"encoder": enc, "dataset": "d1", "task": task, "seed": r["seed"],
                             "fraction": r["fraction"],
                             "condition": cond, "auroc": r["auroc"], "ece": r["ece"], "brier": r["brier"],
                             "nll": r["nll"], "accuracy": r["accuracy"], "n_eval": len(idx)})  # fmt: skip
    return store, table(rows)


@pytest.fixture
def make_store():
    return build_store


@pytest.fixture(scope="session")
def build_store_fn():
    """``build_store`` for session- and module-scoped fixtures (``make_store`` is per test)."""
    return build_store


def _save_records(results, records: pl.DataFrame, settings: dict | None = None):
    """``records`` as ``crs probe`` leaves them under RESULTS/run_records: a file per (encoder, dataset) with its
    digest, generation (``GENERATION``) and probe settings. Returns the folder."""
    import json

    meta = {run_records.PROVENANCE: json.dumps({"created": "2026-12-01T00:00:00+00:00",
                                                "settings": settings or {"head": "linear"}})}
    for (encoder, dataset), rows in records.group_by("encoder", "dataset"):
        run_records.write_parquet(run_records.path(results, encoder, dataset), rows, GENERATION, meta)
    return run_records.records_dir(results)


@pytest.fixture
def save_records():
    return _save_records


@pytest.fixture(scope="session")
def save_records_fn():
    """``save_records`` for session- and module-scoped fixtures."""
    return _save_records
