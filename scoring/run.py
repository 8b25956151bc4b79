"""``score``: run records -> CRS, components, ranks, bootstrap intervals and tiers.

The thin edge of the scoring stage: it picks the comparison set (``comparison``), runs the
bootstrap (``replicates``), scores the point estimate with the numpy core (``crs``) and puts
the results together (``assemble``) as ``Scores`` (``scores``), which writes them.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from crs.foundations import provenance
from crs.foundations import records as run_records
from crs.foundations.errors import BadInput
from crs.foundations.names import VALIDATION
from crs.scoring import crs as core
from crs.scoring.assemble import (
    analysis_tables,
    axis_grid,
    diagnosed,
    encoder_table,
    per_dataset_table,
    settings_of,
    settle_plans,
)
from crs.scoring.axes import AXES, require_columns, seed_means
from crs.scoring.bootstrap import summarise
from crs.scoring.caveats import calibration_above_one_notes, shifted_axis_notes, tie_warnings
from crs.scoring.comparison import Comparison, comparison_of, comparison_records
from crs.scoring.measurable import not_measurable, with_measurable, without_tier
from crs.scoring.metadata import encoder_metadata, filled
from crs.scoring.options import ScoreOptions
from crs.scoring.predictions import MetricsPass, MissingPredictions, ProbeMetrics, prediction_attrs, probe_metrics
from crs.scoring.ranks import compare
from crs.scoring.replicates import V2_NEEDS, run_bootstrap
from crs.scoring.scores import METRIC_TABLE, Scores
from crs.scoring.sites import consortium, tier_of, with_sites
from crs.scoring.versions import get

__all__ = ["METRIC_TABLE", "Scores", "check_probe_runs", "score"]

MEDIAN = core.MEDIAN
UNITS = ("seed", "image", "both")
DEFAULT_OPTIONS = ScoreOptions()  # frozen: one instance serves every call that passes none


def score(records: pl.DataFrame, options: ScoreOptions = DEFAULT_OPTIONS, *, store=None, results=None,
          site_of: dict[str, str] | None = None, known_metadata: dict | None = None) -> Scores:
    """Score run records by docs/crs-v2.md (``options.crs_version`` "2", the default) or docs/crs-v1.md ("1"): axes,
    q, components, CRS, ranks, bootstrap and tiers. v2's calibration axis is read from the store's test
    probabilities (``calibration_axis``), so v2 needs ``store``.

    ``options`` (``ScoreOptions``): ``reference``, an encoder name or 'median'; ``weights`` (dominance, balance,
    worst_axis), non-negative, sum 1. Encoders or datasets outside the comparison set: ``settings['excluded']``.

    ``options.bootstrap_unit`` (docs/crs-v1.md section 5): 'both' (the default) resamples seeds and the test images
    of every dataset at once, 'seed' seeds alone, 'image' test images alone (the same draw for every encoder).
    'image' and 'both' need ``store``, a ``crs.store.Store`` with the probe's test probabilities. With a store, the
    metrics that need probabilities (balanced accuracy, kappa, classwise ECE, AURC, temperature scaling,
    reliability bins) are computed too, and each encoder's metadata (revision, licence, cost) is read from its
    embeddings' provenance (``encoder_metadata``). What the store lacks is said in ``settings['warnings']``, and
    the image bootstrap then falls back to seeds.

    ``site_of``: dataset -> site, for merged results: adds the per-site section (``crs.scoring.sites``);
    ``known_metadata``: what the store lacks, as ``crs merge`` recorded it (``metadata.filled``).

    ``results``: the folder the run records were read from. With a store, each (encoder, dataset)'s run records and
    stored probabilities (validation included) must come from one probe run
    (``crs.foundations.records.check_pair``); a mix is refused (exit 2).
    """
    options = _check_options(records, options, store)
    records, encoders, datasets, excluded = comparison_records(records, options.reference)
    if results is not None:
        run_records.check_same_settings(results, records.select("encoder", "dataset").unique().rows(),
                                        None if store is None else store.path)
    if store is not None and results is not None:
        check_probe_runs(store, results, records)
    cmp = comparison_of(records, encoders, datasets, excluded, options.reference)
    warnings: list[str] = tie_warnings(cmp.records)
    metrics_pass = _metrics_pass(store, cmp)
    boot = run_bootstrap(cmp, options, store, metrics_pass, warnings)
    means = seed_means(boot.by_seed)
    x = axis_grid(means, cmp.encoders, cmp.datasets)  # [encoder, dataset, axis]
    point = core.point_estimate(x, boot.reps.noise, cmp.reference, options.weights, options.crs_version)
    found = _from_store(store, cmp, warnings, metrics_pass)
    tables = analysis_tables(cmp, point, boot, options.simplex_step, found)
    settings = settings_of(options, cmp, boot, warnings, x, not_measurable(store, cmp.datasets))
    settings["notes"] = _axis_notes(boot, x, cmp, options.crs_version)
    auroc = x[:, :, AXES.index("discrimination")].mean(axis=1)
    summary = summarise(boot.reps, cmp.encoders, point.crs, reference=cmp.reference).pipe(
        without_tier, settings["not_measurable"])
    table = encoder_table(cmp.encoders, x, point, auroc, summary, tables["pareto"],
                          filled(encoder_metadata(store, cmp.encoders, cmp.datasets), known_metadata))
    plans = settle_plans(cmp, boot, options, point.crs, summary["tier"], settings["test_images"])
    table, health, decided = diagnosed(table, cmp.records, tables, settings, plans)
    across = None if site_of is None else consortium(boot, x, cmp, options, site_of, point.crs, tier_of(summary))
    return Scores(
        settings=settings,
        encoders=table,
        per_dataset=_per_dataset(cmp, x, point, options, means, boot, settings["not_measurable"]),
        rank_comparison=compare(cmp.encoders, auroc, point.crs),
        axes_by_seed=boot.by_seed,
        provenance=provenance.collect(settings),
        verdict=with_sites(decided, across), diagnostics=health, sites=across,
        **tables,
    )


def _axis_notes(boot, x, cmp: Comparison, version: str) -> list[str]:
    """The notes on axes the bootstrap shifted and on calibration values above 1 (``crs.scoring.caveats``)."""
    return [*shifted_axis_notes(boot.reps.axis, x.mean(axis=1), cmp.encoders, version=version),
            *calibration_above_one_notes(x.mean(axis=1), cmp.encoders, version)]


def _per_dataset(cmp: Comparison, x, point, options: ScoreOptions, means, boot, unmeasurable) -> pl.DataFrame:
    """The per-dataset table (``assemble.per_dataset_table``) with the values no probe could measure marked."""
    return per_dataset_table(cmp.encoders, cmp.datasets, x, point, options.weights, means, options.crs_version,
                             boot.reps.noise_by_dataset).pipe(with_measurable, unmeasurable)


def check_probe_runs(store, results, records: pl.DataFrame) -> None:
    """Refuse (exit 2) where a pair's run records and stored probabilities come from different probe runs.

    Calls ``crs.foundations.records.check_pair`` (the probe's own definition of one run) with the
    attributes of every stored prediction array of the pair that scoring may read: each
    condition of its run records and the validation split. The probe run that wrote the records
    wrote each of those arrays, so one that is not in the store was lost since: refused too
    (``crs.foundations.records.refuse_lost_predictions``), never scored around."""
    pairs = records.select("encoder", "dataset", "condition").unique().sort("encoder", "dataset", "condition")
    for (encoder, dataset), g in pairs.group_by("encoder", "dataset", maintain_order=True):
        conditions = sorted({*g["condition"].to_list(), VALIDATION})
        attrs = {c: prediction_attrs(store, dataset, encoder, c) for c in conditions}
        run_records.check_pair(results, encoder, dataset, {c: a for c, a in attrs.items() if a is not None})
        gone = [c for c, a in attrs.items() if a is None]
        if gone:  # the probe run that wrote these records wrote them: they were lost since
            run_records.refuse_lost_predictions(results, encoder, dataset, gone, store.path)


def _check_options(records: pl.DataFrame, options: ScoreOptions, store) -> ScoreOptions:
    """``options`` with the weights and the CRS version checked and in canonical form; BadInput saying what is
    wrong otherwise."""
    w = core.check_weights(options.weights)
    version = core.check_version(options.crs_version)
    if get(version).calibration.from_store and store is None:
        raise BadInput(f"CRS v{version} reads its calibration axis from the stored test probabilities and no store "
                       f"was given: {V2_NEEDS}")
    if int(options.bootstrap) < 1:
        raise BadInput(f"bootstrap must be at least 1, got {options.bootstrap!r}")
    if options.bootstrap_unit not in UNITS:
        raise BadInput(f"bootstrap unit must be one of {UNITS}, not {options.bootstrap_unit!r}")
    require_columns(records)
    return dataclasses.replace(options, weights=w, crs_version=version)


def _metrics_pass(store, cmp: Comparison):
    """A ``predictions.MetricsPass`` where a store is given (the image bootstrap fills it as it reads each
    array, so ``_from_store`` need not read them again), else None."""
    if store is None:
        return None
    return MetricsPass(store, cmp.records, cmp.encoders, cmp.datasets)


def _from_store(store, cmp: Comparison, warnings: list[str], metrics_pass=None):
    """``predictions.probe_metrics`` where a store is given and holds them, else empty tables; ``metrics_pass``'s
    result where the image bootstrap handed it every pair."""
    empty = ProbeMetrics(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), [])
    if store is None:
        warnings.append(
            "no store given: balanced accuracy, kappa, classwise ECE, AURC, temperature "
            "scaling and reliability bins need the stored probabilities (pass --store); the "
            "metric table holds the run-record metrics only"
        )
        return empty
    try:
        found = metrics_pass.result() if metrics_pass is not None and metrics_pass.complete else probe_metrics(
            store, cmp.records, cmp.encoders, cmp.datasets)
    except MissingPredictions as exc:  # a store was given: what it lacks is refused (exit 2), never left out
        raise BadInput(f"{exc}; the metrics that need stored probabilities read them from the store given "
                       "(or score without --store)") from exc
    warnings.extend(found.warnings)
    return found


