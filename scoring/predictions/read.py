"""Stored probabilities and the targets of their split, read from the store (the package docstring says
what is stored and which images are dropped)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.foundations import forms
from crs.foundations.conditions import parse
from crs.foundations.errors import UserError
from crs.foundations.labels import targets
from crs.foundations.names import SPLITS, VALIDATION
from crs.scoring.axes import FRACTION_TOL
from crs.scoring.calibration import point_loss
from crs.store import Store, StoreError, probe_command

_, VAL, TEST = SPLITS  # the split names, in crs.foundations.names' order


class MissingPredictions(UserError):
    """Stored probabilities the image-level analysis needs are not in the store."""


def find_index(values: Sequence, wanted: Sequence, what: str, where: str) -> list[int]:
    values = list(values)
    out = []
    for w in wanted:
        hits = [i for i, v in enumerate(values) if abs(float(v) - float(w)) <= FRACTION_TOL]
        if not hits:
            raise MissingPredictions(
                f"the stored probabilities for {where} have {what} {values}, not {w!r}; "
                "re-run `crs probe` for them"
            )
        out.append(hits[0])
    return out


class Predictions:
    """Probabilities of one (dataset, encoder, condition), indexed by seed and fraction."""

    def __init__(self, store: Store, dataset: str, encoder: str, condition: str, kept: dict | None = None):
        """``kept``: a dict the caller keeps for one pass over the store, where the rows each split counts
        (``counted_rows``) are remembered, so they are read once per split, not once per array."""
        where = f"{encoder}/{dataset}/{condition}"
        try:
            stored, attrs = store.read_predictions(dataset, encoder, condition)
        except (StoreError, KeyError) as exc:
            if prediction_attrs(store, dataset, encoder, condition) is not None:
                raise  # stored but unreadable: a damaged store is refused, not skipped
            raise MissingPredictions(str(exc)) from exc
        # AUROC ranks ``scores`` (the stored values: log-probabilities do not saturate); everything else
        # reads ``probs`` (crs.foundations.forms)
        self.form = forms.form_of(attrs, f"the stored predictions {where} in {store.path!r}",
                                  lambda: f"write them again with {probe_command(store.path, dataset, encoder)}")
        self.scores, self.probs = stored, forms.probabilities(stored)
        self.seeds = list(attrs.get("seeds", []))
        self.fractions = list(attrs.get("fractions", []))
        self.where, self.dataset, self.encoder = where, dataset, encoder
        self.store_path = store.path
        # the rows are a split of this dataset, of the shift target, or the validation split
        if condition == VALIDATION:
            rows_of, split = dataset, VAL
        elif parse(condition).kind == "shift":
            rows_of, split = parse(condition).dataset, TEST
        else:
            rows_of, split = dataset, TEST
        if kept is None:
            counted = counted_rows(store, rows_of, split)
        else:  # the caller's cache of counted_rows (None is a value too: no rows left out)
            if (rows_of, split) not in kept:
                kept[(rows_of, split)] = counted_rows(store, rows_of, split)
            counted = kept[(rows_of, split)]
        if counted is not None and self.probs.ndim == 4 and self.probs.shape[2] == counted.size:
            self.probs = self.probs[:, :, counted]
            self.scores = self.scores[:, :, counted]

    @property
    def repair(self) -> str:
        """The `crs probe` that writes these predictions again (store, results and settings as recorded)."""
        return probe_command(self.store_path, self.dataset, self.encoder)

    def select(self, seeds: Sequence[int], fractions: Sequence[float], scores: bool = False) -> np.ndarray:
        """[seed, fraction, image, class] in the given order: probabilities, or with ``scores`` what
        AUROC ranks (the stored values)."""
        s = find_index(self.seeds, seeds, "seeds", self.where)
        f = find_index(self.fractions, fractions, "fractions", self.where)
        return (self.scores if scores else self.probs)[np.ix_(s, f)]


def prediction_attrs(store: Store, dataset: str, encoder: str, condition: str) -> dict | None:
    """The attributes of a stored prediction array without reading it, or None where it is not stored."""
    try:  # damaged metadata is a StoreError naming the file and the repair: it is not "not stored"
        return store.prediction_attrs(dataset, encoder, condition)
    except KeyError:
        return None


def counted_rows(store: Store, dataset: str, split: str, rows: np.ndarray | None = None) -> np.ndarray | None:
    """bool [split rows, store order]: False for images in the dataset's failures table; None when
    the table is empty (every row counts), without reading the dataset. ``rows``: the split's rows,
    where the caller has them."""
    failed = store.excluded_rows(dataset)
    if failed.size == 0:
        return None
    rows = store.dataset(dataset).rows(split) if rows is None else rows
    return ~np.isin(rows, failed)


def split_targets(
    store: Store, dataset: str, split: str = TEST
) -> tuple[np.ndarray, np.ndarray, str, dict]:
    """(target [image, class], known [image, class], task, attrs) of a dataset's split rows, store
    order, leaving out the images in its failures table. MissingPredictions when the store lacks the dataset."""
    if not store.has_dataset(dataset):
        raise MissingPredictions(f"dataset {dataset!r} is not in the store {store.path!r}; run `crs extract` for it")
    table = store.dataset(dataset)
    rows = table.rows(split)
    kept = counted_rows(store, dataset, split, rows)
    labels = table.labels[rows if kept is None else rows[kept]]
    try:
        t, known = targets(labels, table.task, len(table.classes))
    except ValueError as exc:  # the stored labels do not fit the stored task and classes
        raise UserError(
            f"the stored labels of dataset {dataset!r} ({split} split) in {store.path!r} are damaged: {exc}; "
            f"check the store with `{shlex.join(['crs', 'store', 'verify', store.path, '--repair'])}`, or extract the "
            "dataset again"
        ) from exc
    return t, known, table.task, table.attrs


def conditions_of(rows: pl.DataFrame, dataset: str) -> tuple[list[float], list[str], list[str]]:
    """(fractions below 1, perturbed conditions, shift conditions) a dataset's runs use."""
    d = rows.filter(pl.col("dataset") == dataset)
    low = sorted(
        d.filter((pl.col("kind") == "clean") & ~pl.col("full"))["fraction"].unique().to_list()
    )
    pert = sorted(d.filter(pl.col("kind") == "perturbed")["condition"].unique().to_list())
    shift = sorted(d.filter(pl.col("kind") == "shift")["condition"].unique().to_list())
    return low, pert, shift


def clean_probs(pred: Predictions, dataset: str, encoder: str, seeds: Sequence[int], low: Sequence[float],
                n_images: int, scores: bool = False) -> np.ndarray:
    """Clean test probabilities (or ``scores``) [seed, fraction, image, class] at ``low`` then 1, checked
    against the split."""
    clean = pred.select(seeds, [*low, 1.0], scores=scores)
    if clean.shape[2] != n_images:
        raise MissingPredictions(
            f"{encoder}/{dataset}/clean has {clean.shape[2]} test images, the dataset "
            f"{n_images}; re-run {pred.repair}"
        )
    return clean


def pair_calibration_losses(pred: Predictions, split: tuple, seeds: Sequence[int], dataset: str,
                            encoder: str) -> dict:
    """{(encoder, dataset, seed): CRS v2's calibration loss kappa S} of one pair's clean probabilities at fraction 1;
    ``split``: (target, known, task) of the dataset's test split."""
    target, known, task = split
    probs = clean_probs(pred, dataset, encoder, seeds, [], target.shape[0])  # [seed, 1, image, class]
    done: dict[bytes, float] = {}  # a linear probe's seeds share their full-label probabilities
    out = {}
    for s, seed in enumerate(seeds):
        key = probs[s, 0].tobytes()
        if key not in done:
            done[key] = point_loss(probs[s, 0], target, known, task)
        out[(encoder, dataset, int(seed))] = done[key]
    return out


def calibration_losses(store: Store, encoders: Sequence[str], datasets: Sequence[str],
                       seeds: Sequence[int]) -> pl.DataFrame:
    """CRS v2's calibration loss (``crs.scoring.calibration.point_loss``) of every (encoder, dataset, seed)'s
    clean test probabilities at fraction 1: columns encoder, dataset, seed, calibration_loss. Raises
    MissingPredictions naming the first array the store lacks."""
    found: dict = {}
    for dataset in datasets:
        target, known, task, _ = split_targets(store, dataset)
        for encoder in encoders:
            pred = Predictions(store, dataset, encoder, "clean")
            found.update(pair_calibration_losses(pred, (target, known, task), seeds, dataset, encoder))
    return pl.DataFrame([(*k, v) for k, v in found.items()], orient="row",
                        schema={"encoder": pl.String, "dataset": pl.String, "seed": pl.Int64,
                                "calibration_loss": pl.Float64})


