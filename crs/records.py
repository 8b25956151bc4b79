"""The run-record table: the contract between ``crs probe`` and ``crs score``.

One row per (encoder, dataset, seed, fraction, condition). ``probe`` writes it as
Parquet (one file per encoder and dataset under ``RESULTS/run_records/``);
``scoring`` reads every file there. Column names and meaning are stable; add
columns, never rename them.
"""

from __future__ import annotations

from crs.errors import UserError

# name -> (polars dtype name, meaning)
COLUMNS: dict[str, tuple[str, str]] = {
    "encoder": ("String", "encoder key, e.g. 'demo-resnet'"),
    "dataset": ("String", "dataset the probe was trained on"),
    "task": ("String", "'multiclass' or 'multilabel'"),
    "seed": ("Int64", "probe seed: draws the label subsets (at fraction 1 every seed sees every label)"),
    "fraction": ("Float64", "share of the training split whose labels the probe saw, in (0, 1]"),
    "condition": ("String", "'clean', 'FAMILY@SEVERITY' or 'shift:DATASET'"),
    "auroc": ("Float64", "macro one-vs-rest AUROC (multiclass) or mean per-label AUROC (multilabel)"),
    "ece": ("Float64", "expected calibration error, 15 equal-width bins, top-label"),
    "brier": ("Float64", "Brier score (sum over classes; mean over labels for multilabel)"),
    "nll": ("Float64", "negative log-likelihood per image (mean over labels for multilabel)"),
    "accuracy": ("Float64", "top-1 accuracy (multiclass) or mean per-label accuracy at 0.5"),
    "l2": ("Float64", "L2 strength chosen on the validation split"),
    "n_train": ("Int64", "number of labelled training images the probe saw"),
    "n_eval": ("Int64", "number of images the row's metrics were computed on"),
    "classes_missing": ("Int64", "classes (or labels) with no positive example in the label subset"),
    "converged": ("Boolean", "whether the solver met its gradient tolerance"),
    "iterations": ("Int64", "solver iterations used"),
}

RUN_RECORDS_DIR = "run_records"


class MissingRunRecords(UserError, FileNotFoundError):
    """RESULTS holds no run records: the probe has not been run there."""


def records_dir(results) -> "Path":
    from pathlib import Path

    return Path(results) / RUN_RECORDS_DIR


def read(results):
    """Every run-record file under ``RESULTS/run_records`` as one polars DataFrame; MissingRunRecords if none."""
    import polars as pl

    files = sorted(records_dir(results).glob("*.parquet"))
    if not files:
        raise MissingRunRecords(f"no run records under {records_dir(results)}; run `crs probe --all` first")
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
