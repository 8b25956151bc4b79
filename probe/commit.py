"""Writing one probe run: one generation (``crs.foundations.records``) of predictions, probe selection,
label subsets, then the run records, which commit it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import NamedTuple

import polars as pl

from crs.foundations import forms
from crs.foundations import provenance as tool
from crs.foundations import records as run_records
from crs.foundations.names import VALIDATION
from crs.probe.options import ProbeOptions
from crs.store import Store
from crs.store.location import local_path

SELECTION_DIR = run_records.SELECTION_DIR


SUBSETS_DIR = "subsets"


# run-record Parquet metadata: json of crs.foundations.provenance.collect(probe settings)
PROVENANCE_KEY = run_records.PROVENANCE


def records_path(results: Path, encoder: str, dataset: str) -> Path:
    return run_records.path(results, encoder, dataset)


def subsets_path(results, dataset: str) -> Path:
    return Path(results) / SUBSETS_DIR / f"{dataset}.parquet"


def made_by(store: Store, results, options: ProbeOptions) -> dict:
    """What the stored predictions record of the run that made them, so that a repair command can name it
    whole (``crs.store.repair.probe_command``): the results folder (relative to a local store, so that
    the two moved together still match), and the settings in the schema's names (``crs.foundations.config.Probe``).
    Seeds are a count there (0..n-1); other seeds have no flag to name them."""
    o = options
    settings = {"fractions": list(o.fractions), "l2": list(o.l2), "select_by": o.select_by, "tol": o.tol,
                "head": o.head, "hidden": o.hidden}
    if tuple(o.seeds) == tuple(range(len(o.seeds))):
        settings["seeds"] = len(o.seeds)
    here = local_path(store.path)
    where = Path(results).resolve()
    return {"results": os.path.relpath(where, Path(here).resolve()) if here else str(where), "probe": settings}


def run_provenance(options: ProbeOptions, head_options: dict) -> dict:
    """``crs.foundations.provenance.collect`` of this probe run's settings (JSON-safe)."""
    o = options
    settings = {"head": o.head, "seeds": list(o.seeds), "fractions": list(o.fractions), "l2": list(o.l2),
                "select_by": o.select_by}
    for k, v in head_options.items():
        settings[k] = v if v is None or isinstance(v, (int, float, str, bool)) else repr(v)
    return tool.collect(settings)


class Outputs(NamedTuple):
    """Everything one probe run writes (``commit``), computed before anything is written."""

    predictions: dict  # {condition: log-probabilities [S, Fr, n, K]}
    attrs: tuple  # (the predictions' attributes, the head's own), stored in that order with the generation
    selection: pl.DataFrame  # ``selection_frame``
    drawn: pl.DataFrame  # the label subsets (``subsets_frame``)
    records: pl.DataFrame  # the run records
    # the run records' ``crs_provenance`` (default: ``crs.foundations.provenance.collect()``)
    provenance: dict | None = None


def commit(store: Store, results: Path, model: str, dataset: str, outputs: Outputs) -> Path:
    """Write one generation of the pair's outputs; the run records last, as its commit point."""
    predictions, attrs, selection, drawn, records, provenance = outputs
    provenance = tool.collect() if provenance is None else provenance
    generation = uuid.uuid4().hex
    common, head_attrs = attrs
    for condition, probs in predictions.items():
        extra = {"rows": "the dataset's validation rows in store order"} if condition == VALIDATION else {}
        store.write_predictions(dataset, model, condition, probs, {
            **common, **extra, **head_attrs, forms.KEY: forms.LOG_PROB, run_records.PREDICTION_GENERATION: generation})
    if predictions:  # the record of what this run wrote, once it all is
        store.commit_predictions(dataset, model, generation, list(predictions))
    run_records.write_parquet(run_records.selection_path(results, model, dataset), selection, generation)
    run_records.write_parquet(subsets_path(results, dataset), drawn, generation)
    path = records_path(results, model, dataset)
    run_records.write_parquet(path, records, generation, {"crs:features_left_out": str(records["features_left_out"][0]),
                                                          PROVENANCE_KEY: json.dumps(provenance),
                                                          run_records.STORE: _store_from(store, results)})
    return path


def _store_from(store: Store, results: Path) -> str:
    """The store as the run records name it: relative to the results folder where both are local, so that
    the two moved together still match (``crs.foundations.records.STORE``)."""
    here = local_path(store.path)
    return os.path.relpath(Path(here).resolve(), Path(results).resolve()) if here else store.path
