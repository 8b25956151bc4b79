"""Axis values with the test images resampled: every dataset's image draws, read pair by pair from the store."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from crs.foundations.conditions import parse
from crs.scoring import resample
from crs.scoring.axes import AXES
from crs.scoring.comparison import Runs
from crs.scoring.predictions.read import (
    MissingPredictions,
    Predictions,
    clean_probs,
    conditions_of,
    pair_calibration_losses,
    split_targets,
)
from crs.scoring.predictions.stored_metrics import MetricsPass
from crs.scoring.versions import LATEST
from crs.store import Store


def image_bootstrap_axes(
    store: Store,
    runs: Runs,
    n_bootstrap: int,
    rng: np.random.Generator,
    *,
    methods: dict | None = None,
    metrics_pass: MetricsPass | None = None,
    version: str = LATEST,
    point_losses: dict | None = None,
) -> np.ndarray:
    """Axis values x [replicate, encoder, dataset, seed, axis] with test images resampled (C by CRS ``version``).

    ``runs``: the encoders, datasets and seeds, and the used run-record rows (``axes.used_rows``), which say
    which fractions and conditions each dataset's axes read. Each dataset draws its image
    multiplicities once (the same for every encoder, seed and condition), then each
    of its shift targets, in the order given; raises MissingPredictions naming the
    first array that is not in the store. The AUROCs of each encoder's arrays are
    computed as one batch per draw (``resample.AurocDraws``); ``methods``, where given,
    receives per dataset how many arrays were computed exactly or shared with an identical
    array. ``metrics_pass``: a ``MetricsPass`` handed each (dataset, encoder)'s arrays as they are read,
    so its metrics need no second read.
    ``point_losses``: a dict that receives CRS v2's calibration loss of the full test set per (encoder,
    dataset, seed), from the arrays read here (``calibration_losses`` without the second read).
    """
    kept = None if metrics_pass is None else metrics_pass.kept
    rows, encoders, datasets, seeds = runs.used, runs.encoders, runs.datasets, runs.seeds
    out = np.empty((n_bootstrap, len(encoders), len(datasets), len(seeds), len(AXES)))
    # two helper threads, each working in order: one reads the next pair's arrays, one computes the
    # metrics of pairs already bootstrapped (numpy and the store's reads release the GIL); these three
    # threads keep the cores busy, so BLAS gets one thread (its own pool would spin against them)
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(1) as reader, ThreadPoolExecutor(1) as worker:
        in_flight: deque = deque()  # the metrics pass's pairs not done yet, at most 2 (their arrays stay in memory)
        for j, dataset in enumerate(datasets):
            d = _dataset_draws(store, rows, dataset, n_bootstrap, rng)

            def read_pair(encoder: str, dataset: str = dataset, d: _DatasetDraws = d) -> dict:
                return {c: Predictions(store, dataset, encoder, c, kept) for c in ["clean", *d.pert, *d.shift]}

            ahead = reader.submit(read_pair, encoders[0])
            for e, encoder in enumerate(encoders):
                read = ahead.result()
                if e + 1 < len(encoders):
                    ahead = reader.submit(read_pair, encoders[e + 1])
                out[:, e, j] = _pair_axes(read, d, seeds, dataset, encoder, version)
                if point_losses is not None:
                    split = (d.test.target, d.test.known, d.task)
                    point_losses.update(pair_calibration_losses(read["clean"], split, seeds, dataset, encoder))
                if metrics_pass is not None:
                    while len(in_flight) >= 2:
                        in_flight.popleft().result()
                    in_flight.append(worker.submit(metrics_pass.add_pair, dataset, encoder, read))
            if methods is not None:
                methods[dataset] = {k: sum(a.summary()[k] for a in d.aurocs) for k in ("exact", "shared")}
        while in_flight:
            in_flight.popleft().result()
    return out


class _DatasetDraws(NamedTuple):
    """One dataset's image draws and what its runs read (``image_bootstrap_axes``)."""

    test: resample.Draw
    targets: list  # a resample.Draw per shift target
    task: str
    low: list[float]  # fractions below 1
    pert: list[str]  # perturbed conditions
    shift: list[str]  # shift conditions
    aurocs: list  # a resample.AurocDraws of the test draw, then of each target's


def _dataset_draws(store: Store, rows: pl.DataFrame, dataset: str, n_bootstrap: int,
                   rng: np.random.Generator) -> _DatasetDraws:
    """The dataset's test draw, then each shift target's, from ``rng`` in that order."""
    target, known, task, _ = split_targets(store, dataset)
    low, pert, shift = conditions_of(rows, dataset)
    test = resample.Draw(target, known, _image_counts(target.shape[0], n_bootstrap, rng, dataset))
    targets = []
    for cond in shift:
        t_target, t_known, _, _ = split_targets(store, parse(cond).dataset)
        counts = _image_counts(t_target.shape[0], n_bootstrap, rng, parse(cond).dataset)
        targets.append(resample.Draw(t_target, t_known, counts))
    aurocs = [resample.AurocDraws(x) for x in (test, *targets)]
    return _DatasetDraws(test, targets, task, low, pert, shift, aurocs)


def _pair_axes(read: dict, d: _DatasetDraws, seeds: Sequence[int], dataset: str, encoder: str,
               version: str = LATEST) -> np.ndarray:
    """Axis values [replicate, seed, axis] of one (dataset, encoder) from its arrays ``read``."""
    clean = clean_probs(read["clean"], dataset, encoder, seeds, d.low, d.test.target.shape[0], scores=True)
    calibration = read["clean"].select(seeds, [1.0])  # the ECE's probabilities; the AUROCs rank the scores
    pert_p = [_fitting(read[c], seeds, d.test.target) for c in d.pert]
    shift_p = [_fitting(read[c], seeds, t.target) for c, t in zip(d.shift, d.targets, strict=True)]
    for s in range(len(seeds)):  # every array first, so each draw's batch is computed at once
        for p in [*clean[s], *(q[s, 0] for q in pert_p)]:
            d.aurocs[0].add(p)
        for t, q in enumerate(shift_p):
            d.aurocs[1 + t].add(q[s, 0])
    for a in d.aurocs:
        a.compute()
    runs = [resample.RunArrays(clean[s], [p[s, 0] for p in pert_p], [p[s, 0] for p in shift_p], calibration[s, 0])
            for s in range(len(seeds))]
    out = np.stack([resample.run_axes(run, d.test, d.targets, d.task, d.aurocs, version=version) for run in runs],
                   axis=1)
    for a in d.aurocs:
        a.release()
    return out


def _image_counts(n_images: int, n_bootstrap: int, rng: np.random.Generator, dataset: str) -> np.ndarray:
    if not n_images:
        raise MissingPredictions(f"dataset {dataset!r} has no test image to resample (every one is in its "
                                 "failures table, or its test split is empty)")
    return resample.image_counts(n_images, n_bootstrap, rng)


def _fitting(pred: Predictions, seeds: Sequence[int], target: np.ndarray) -> np.ndarray:
    """Scores [seed, 1, image, class] at fraction 1 (what AUROC ranks), checked to have the split's images and
    classes."""
    probs = pred.select(seeds, [1.0], scores=True)
    if probs.shape[2:] != target.shape:
        raise MissingPredictions(
            f"{pred.where} holds probabilities for {probs.shape[2]} images x {probs.shape[3]} classes, the split "
            f"{target.shape[0]} x {target.shape[1]}; re-run `crs probe` for it"
        )
    return probs
