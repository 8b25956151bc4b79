"""The bootstrap of a score: seed means of every replicate under the unit asked for (seed, image or both),
falling back to seeds where no store was given, and CRS v2's calibration axis."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.errors import BadInput
from crs.scoring.bootstrap import (
    Replicates,
    draw_seeds,
    resample_seeds,
    score_replicates,
    seed_means_of,
    seed_tensor,
    seed_weights,
    unclipped_axis,
    variance_scale,
)
from crs.scoring.caveats import say_if_few_seeds, say_if_no_interval
from crs.scoring.comparison import Comparison
from crs.scoring.memory import check_fits
from crs.scoring.options import ScoreOptions
from crs.scoring.predictions import MissingPredictions, calibration_losses, image_bootstrap_axes
from crs.scoring.versions import get


class Bootstrap(NamedTuple):
    """The bootstrap of one score (``run_bootstrap``)."""

    reps: Replicates  # CRS, ranks and axes of every replicate
    draw: np.ndarray  # the seed draw [replicate, draw]
    unit: str  # the unit resampled: the one asked for, or 'seed' where it fell back
    by_seed: pl.DataFrame  # axes_by_seed with C by the CRS version
    image_method: dict  # per dataset: arrays computed exactly / shared (image bootstrap), else {}
    x: np.ndarray | None = None  # the replicates' seed means [replicate, encoder, dataset, axis]
    spread: np.ndarray | None = None  # the same with the seeds resampled by ``variance_scale`` (None: x's)


def run_bootstrap(cmp: Comparison, options: ScoreOptions, store, metrics_pass, warnings: list[str]) -> Bootstrap:
    """The bootstrap of the comparison set (``Bootstrap``); says in ``warnings`` where the unit fell back or a
    replicate had no CRS. Refuses (BadInput) a count of replicates that does not fit in memory
    (``memory.check_fits``)."""
    check_fits(cmp, int(options.bootstrap), options.bootstrap_unit != "seed" and store is not None)
    draw = draw_seeds(len(cmp.seeds), int(options.bootstrap), options.seed)  # [replicate, draw]
    image_method: dict = {}  # per dataset: arrays exact / shared (predictions.image_bootstrap_axes)
    x_boot, unit, by_seed, spread = bootstrap_means(cmp, draw, options, store, metrics_pass, warnings, image_method)
    reps = score_replicates(x_boot, cmp.reference, options.weights, options.crs_version, spread)
    say_if_no_interval(reps, x_boot, cmp.datasets, unit, warnings)
    say_if_few_seeds(len(cmp.seeds), unit, warnings)
    return Bootstrap(reps, draw, unit, by_seed, image_method, x_boot, spread)


V2_NEEDS = ("pass --store with the store the probe read, or score by CRS v1 (--crs-version 1), whose C is the "
            "run records' 15-bin ECE")


def calibration_axis(by_seed: pl.DataFrame, store, encoders, datasets, losses: dict | None = None) -> pl.DataFrame:
    """``axes_by_seed`` with CRS v2's C: 1 - kappa S, S the debiased squared calibration error of each run's stored
    clean test probabilities at fraction 1 (docs/crs-v2.md section 1). ``losses``: {(encoder, dataset, seed):
    kappa S} the image bootstrap computed as it read them; None reads them here. A store without them is refused
    (BadInput) saying what to do."""
    seeds = sorted(by_seed.get_column("seed").unique().to_list())
    if losses is None:
        try:
            ce = calibration_losses(store, encoders, datasets, seeds)
        except MissingPredictions as exc:
            raise BadInput(f"CRS v2 reads its calibration axis from the stored test probabilities: {exc}; or "
                           f"{V2_NEEDS}") from exc
    else:
        ce = pl.DataFrame([(*k, v) for k, v in losses.items()], orient="row",
                          schema={"encoder": pl.String, "dataset": pl.String, "seed": pl.Int64,
                                  "calibration_loss": pl.Float64})
    cols = by_seed.columns
    joined = by_seed.join(ce.cast({"seed": by_seed.schema["seed"]}), on=["encoder", "dataset", "seed"], how="left")
    return joined.with_columns(calibration=1.0 - pl.col("calibration_loss")).select(cols)


def bootstrap_means(cmp: Comparison, draw: np.ndarray, options: ScoreOptions, store, metrics_pass,
                    warnings: list[str], image_method: dict):
    """(seed means x [replicate, encoder, dataset, axis] of the bootstrap, the unit used, ``by_seed`` with C by the
    CRS version: v2's from the image bootstrap's reads, else read for it, ``calibration_axis``; the same replicates
    with the seeds resampled by ``variance_scale``, whose spread v2's point estimate takes out, or None where no
    seeds were resampled).

    Falls back to the seed bootstrap, saying why in ``warnings``, where no store was given; a store that lacks
    what the image bootstrap reads is refused (BadInput, exit 2), never resampled around. ``metrics_pass``: a
    ``predictions.MetricsPass`` the image bootstrap hands the arrays it reads (``_metrics_pass``);
    ``image_method`` receives per dataset how its arrays were computed."""
    unit, version, by_seed = options.bootstrap_unit, options.crs_version, cmp.by_seed
    definition = get(version)
    x_rep = None
    # C from the store (v2): the clean calibration losses the bootstrap reads
    losses: dict | None = {} if definition.calibration.from_store else None
    if unit != "seed":
        if store is None:
            warnings.append(
                f"bootstrap unit {unit!r} needs the stored test probabilities and no store was "
                "given (pass --store): fell back to the seed bootstrap"
            )
        else:
            try:
                x_rep = image_bootstrap_axes(
                    store, cmp, draw.shape[0], np.random.default_rng([options.seed, 1]), methods=image_method,
                    metrics_pass=metrics_pass, version=version, point_losses=losses,
                )
            except MissingPredictions as exc:  # a store was given: what it lacks is refused, never resampled around
                raise BadInput(f"bootstrap unit {unit!r} resamples the stored test probabilities: {exc}; or pass "
                               "--bootstrap-unit seed") from exc
    free = unclipped_axis(version)
    if definition.calibration.from_store:
        by_seed = calibration_axis(by_seed, store, cmp.encoders, cmp.datasets, losses if x_rep is not None else None)
    if x_rep is None:
        x_seed, _ = seed_tensor(by_seed, cmp.encoders, cmp.datasets)  # [encoder, dataset, seed, axis]
        w, x_seed = seed_weights(draw, len(cmp.seeds)), np.moveaxis(x_seed, 2, -1)
        spread = (resample_seeds(w, x_seed, unclipped=free, factor=variance_scale(len(cmp.seeds)))
                  if definition.takes_out_noise else None)
        return resample_seeds(w, x_seed, unclipped=free), "seed", by_seed, spread
    seeds = draw if unit == "both" else None
    spread = None if not definition.takes_out_noise or seeds is None else seed_means_of(
        x_rep, seeds, free, variance_scale(len(cmp.seeds)))
    return seed_means_of(x_rep, seeds, unclipped=free), unit, by_seed, spread
