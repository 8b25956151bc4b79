"""What the report reads: the score's tables and scores.json (``load``), reliability bins from the store
and test-set sizes and retention intervals from the run records; and the tables it shows (``tables``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from crs.foundations import records
from crs.foundations.conditions import parse
from crs.foundations.names import VALIDATION
from crs.scoring import crs as core
from crs.scoring import figures, leaderboard
from crs.scoring.axes import AXES, retain
from crs.scoring.bootstrap import draw_seeds, interval, resample_seeds, seed_weights
from crs.scoring.predictions import MissingPredictions, probe_metrics
from crs.scoring.ranks import rank_desc
from crs.scoring.scoreset import SCORES_JSON, MissingScores, MixedScores, read_scores_json, read_tables, scores_folder
from crs.store import Store, StoreError

SCORE_TABLES = (
    "encoders", "per_dataset", "pareto", "weight_sensitivity", "weight_leaders", "reliability", "robustness",
    "label_efficiency", "calibration_under_shift", "rank_distribution", "probe_metrics", "diagnostics",
)  # fmt: skip


@dataclass
class Inputs:
    settings: dict
    rank_comparison: dict
    tables: dict[str, pl.DataFrame]
    notes: list[str] = field(default_factory=list)  # what the report itself found missing or did
    generation: str | None = None  # the scores set the report is made from (scores.json's generation)
    verdict: dict | None = None  # scores.json's "verdict" (crs.scoring.verdict.build), which ``load`` requires
    provenance: dict | None = None  # scores.json's "provenance" (crs.foundations.provenance.collect)
    sites: dict | None = None  # scores.json's "sites", merged results only (crs.scoring.sites)

    def table(self, name: str) -> pl.DataFrame:
        return self.tables.get(name, pl.DataFrame())

    @property
    def order(self) -> list[str]:
        """Encoders in leaderboard order (best CRS first)."""
        return self.table("encoders")["encoder"].to_list()

    @property
    def reference(self) -> str | None:
        """The reference encoder (the zero point of every q), or None for the per-axis median."""
        return leaderboard.reference(self.table("encoders"), self.settings.get("reference"))


def load(results: Path) -> Inputs:
    """The score's outputs under RESULTS/scores, checked to be one set (``crs.scoring.scoreset``).

    MissingScores (exit 2) naming the command when absent; MixedScores (exit 2) naming
    the files when they come from different ``crs score`` runs. The set's generation is
    kept in ``Inputs.generation``; the page's meta tag and the report's own tables
    (OUT/tables/*.parquet metadata) carry it."""
    for attempt in (1, 2):
        folder = scores_folder(Path(results))
        doc = read_scores_json(folder, results)
        try:
            tables = read_tables(folder, doc, list(SCORE_TABLES), results)
            break
        except MixedScores:
            # a score that swapped its new set in while this read: read the new set once more
            now = read_scores_json(scores_folder(Path(results)), results).get("generation")
            if attempt == 2 or now == doc.get("generation"):
                raise
    _check_recorded(doc, folder, results)
    if "encoders" not in tables or not tables["encoders"].height:
        raise MissingScores(f"{folder / 'encoders.parquet'} is missing or empty; re-run "
                            f"`crs score --results {results}`")
    return Inputs(settings=doc["settings"], rank_comparison=doc["rank_comparison"], tables=tables,
                  generation=doc["generation"], verdict=doc["verdict"], provenance=doc["provenance"] or None,
                  sites=doc.get("sites"))


def _check_recorded(doc: dict, folder: Path, results: Path) -> None:
    """Refuse (``MissingScores``, exit 2) a scores.json that lacks what every ``crs score`` of this crs records:
    its settings with the CRS version (and v2's constants), the rank comparison, the verdict and the provenance.
    Such a file was written by an older development version; its page would describe it with guesses."""
    settings = doc.get("settings") if isinstance(doc.get("settings"), dict) else {}
    lacks = [k for k in ("settings", "rank_comparison", "verdict", "provenance") if not isinstance(doc.get(k), dict)]
    if settings and "crs_version" not in settings:
        lacks.append("settings.crs_version")
    elif settings:  # a version's constants (v1 has none)
        have = settings.get("crs_constants") if isinstance(settings.get("crs_constants"), dict) else {}
        lacks += [f"settings.crs_constants.{k}" for k in core.constants(settings["crs_version"]) if k not in have]
    if lacks:
        raise MissingScores(f"{folder / SCORES_JSON} lacks {', '.join(lacks)}, which every scores.json of this crs "
                            f"records (it was written by an older development version); re-run "
                            f"`crs score --results {results}` to write it again")


def add_reliability_from_store(inputs: Inputs, results: Path, store: str) -> None:
    """Reliability bins from the stored probabilities, when the score was run without the store."""
    if inputs.table("reliability").height:
        return
    try:
        opened = Store(str(store), mode="r")
        recs = records.read(results)
        enc = inputs.order
        datasets = inputs.settings.get("datasets") or sorted(inputs.table("per_dataset")["dataset"].unique())
        recs = recs.filter(pl.col("encoder").is_in(enc) & pl.col("dataset").is_in(datasets)
                           & (pl.col("condition") != VALIDATION))
        found = probe_metrics(opened, recs, enc, datasets)
    except (MissingPredictions, StoreError, records.MissingRunRecords) as exc:
        inputs.notes.append(f"reliability bins could not be read from the store {store!r}: {exc}")
        return
    if found.metrics.height and not inputs.table("probe_metrics").height:
        inputs.tables["probe_metrics"] = found.metrics
    if found.reliability.height:
        inputs.tables["reliability"] = found.reliability
        inputs.notes.append(f"reliability bins computed by the report from the store {store!r} (the score had none)")


def add_from_records(inputs: Inputs, results: Path) -> None:
    """Test-set sizes and retention intervals from RESULTS' run records; a note when there are none."""
    try:
        recs = records.read(results)
    except records.MissingRunRecords as exc:
        inputs.notes.append(f"no test-set sizes or robustness intervals: {exc}")
        return
    recs = recs.filter(pl.col("encoder").is_in(inputs.order))
    inputs.tables["test_sets"] = test_sets(recs)
    b = inputs.settings.get("bootstrap", {})
    seeds = inputs.settings.get("seeds") or sorted(recs["seed"].unique().to_list())
    # the score's own intervals win when it has them
    if b.get("n") and seeds and "retention_low" not in inputs.table("robustness").columns:
        by_condition, by_severity = retention_intervals(recs, seeds, int(b["n"]), int(b.get("seed", 0)),
                                                        float(b.get("confidence", 0.95)))
        rob = inputs.table("robustness")
        if rob.height and by_condition.height:
            inputs.tables["robustness"] = rob.join(by_condition, on=["encoder", "dataset", "condition"], how="left")
        inputs.tables["retention_by_severity"] = by_severity


def per_dataset_board(per_dataset: pl.DataFrame) -> pl.DataFrame:
    """Per-dataset rows with AUROC (= D) and the CRS and AUROC ranks within each dataset, best CRS first."""
    if not per_dataset.height:
        return per_dataset
    frames = []
    for (_dataset,), g in per_dataset.group_by("dataset", maintain_order=True):
        g = g.with_columns(
            crs_rank=pl.Series(rank_desc(g["crs"].to_numpy())),
            auroc=pl.col("discrimination"),
            auroc_rank=pl.Series(rank_desc(g["discrimination"].to_numpy())),
        )
        frames.append(g.sort(["crs", "encoder"], descending=[True, False]))
    cols = ["dataset", "encoder", "crs_rank", "crs", "auroc", "auroc_rank", *AXES, *[f"q_{a}" for a in AXES],
            "dominance", "balance", "worst_axis", "n_seeds"]
    out = pl.concat(frames)
    return out.select([c for c in cols if c in out.columns]).sort("dataset", maintain_order=True)


def _full(recs: pl.DataFrame) -> pl.DataFrame:
    return recs.filter(((pl.col("fraction") - 1.0).abs() < 1e-9) & (pl.col("condition") != VALIDATION))


def test_sets(recs: pl.DataFrame) -> pl.DataFrame:
    """Images per dataset as the run records give them: test (clean), train at 100% labels, shift target test.

    One row per (dataset, split) with ``images`` the largest count over encoders and seeds and
    ``varies`` true when they disagree (a sign of a partial or mixed run)."""
    full = _full(recs)
    if not full.height or "n_eval" not in full.columns:
        return pl.DataFrame(schema={"dataset": pl.String, "split": pl.String, "images": pl.Int64,
                                    "varies": pl.Boolean})
    kind = (pl.when(pl.col("condition") == "clean").then(pl.lit("test"))
            .when(pl.col("condition").str.starts_with("shift:"))
            .then(pl.lit("shift target ") + pl.col("condition").str.strip_prefix("shift:") + pl.lit(" (test)"))
            .otherwise(None))
    evals = full.with_columns(split=kind, images=pl.col("n_eval")).filter(pl.col("split").is_not_null())
    parts = [evals.select("dataset", "split", "images")]
    if "n_train" in full.columns:
        parts.append(full.filter(pl.col("condition") == "clean")
                     .select("dataset", split=pl.lit("train (100% labels)"), images=pl.col("n_train")))
    both = pl.concat([p.with_columns(pl.col("images").cast(pl.Int64)) for p in parts])
    order = {"test": 0, "train (100% labels)": 1}
    return (both.group_by("dataset", "split")
            .agg(pl.col("images").max(), varies=pl.col("images").n_unique() > 1)
            .with_columns(_o=pl.col("split").replace_strict(order, default=2, return_dtype=pl.Int64))
            .sort("dataset", "_o", "split").drop("_o"))


def retention_intervals(recs: pl.DataFrame, seeds: list[int], n_bootstrap: int, seed: int,
                        confidence: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seed-bootstrap percentile intervals of retention at 100% labels (docs/crs-v1.md retain, each seed's own D).

    Returns (per condition: encoder, dataset, condition, retention_low, retention_high;
    per severity, the mean over perturbation families: encoder, dataset, severity, retention,
    retention_low, retention_high). The draw is ``bootstrap.draw_seeds(len(seeds), n, seed)``,
    the score's own, so these intervals pair with the CRS intervals; a cell missing a seed
    gets null ends."""
    full = _full(recs).filter(pl.col("seed").is_in(seeds))
    d = full.filter(pl.col("condition") == "clean").select("encoder", "dataset", "seed", d=pl.col("auroc"))
    rows = full.filter(pl.col("condition") != "clean").join(d, on=["encoder", "dataset", "seed"])
    empty = (pl.DataFrame(schema={"encoder": pl.String, "dataset": pl.String, "condition": pl.String,
                                  "retention_low": pl.Float64, "retention_high": pl.Float64}),
             pl.DataFrame(schema={"encoder": pl.String, "dataset": pl.String, "severity": pl.Int64,
                                  "retention": pl.Float64, "retention_low": pl.Float64,
                                  "retention_high": pl.Float64}))
    if not rows.height:
        return empty
    conds = rows["condition"].unique().to_list()
    sev = {c: parse(c).severity for c in conds}
    rows = rows.with_columns(retention=retain(pl.col("auroc"), pl.col("d")),
                             severity=pl.col("condition").replace_strict(sev, return_dtype=pl.Int64))
    w = seed_weights(draw_seeds(len(seeds), n_bootstrap, seed), len(seeds))  # [replicate, seed]

    def cells(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
        keyed = frame.select(*keys).unique().sort(keys)
        grid = keyed.join(pl.DataFrame({"seed": seeds}, schema={"seed": frame.schema["seed"]}), how="cross")
        a = grid.join(frame, on=[*keys, "seed"], how="left", maintain_order="left")["retention"]
        a = a.to_numpy().astype(float).reshape(keyed.height, len(seeds))  # [cell, seed]
        low, high = interval(resample_seeds(w, np.nan_to_num(a)), confidence)  # [cell]
        bad = np.isnan(a).any(axis=1)
        return keyed.with_columns(retention=pl.Series(np.nanmean(np.where(bad[:, None], np.nan, a), axis=1)
                                                      if a.size else []),
                                  retention_low=pl.Series(np.where(bad, np.nan, low)),
                                  retention_high=pl.Series(np.where(bad, np.nan, high))).fill_nan(None)

    by_condition = cells(rows.select("encoder", "dataset", "condition", "seed", "retention"),
                         ["encoder", "dataset", "condition"]).drop("retention")
    perturbed = rows.filter(pl.col("severity").is_not_null())
    by_severity = (cells(perturbed.group_by("encoder", "dataset", "severity", "seed").agg(pl.col("retention").mean()),
                         ["encoder", "dataset", "severity"]) if perturbed.height else empty[1])
    return by_condition, by_severity


def tables(inputs: Inputs) -> dict[str, pl.DataFrame]:
    """Every table the page shows or a figure draws, by file name."""
    out = {
        "leaderboard": leaderboard.board(inputs.table("encoders")),
        "leaderboard_per_dataset": per_dataset_board(inputs.table("per_dataset")),
        "reversed_pairs": pl.DataFrame(
            {"auroc_above": [p[0] for p in inputs.rank_comparison.get("reversed_pairs", [])],
             "crs_above": [p[1] for p in inputs.rank_comparison.get("reversed_pairs", [])]},
            schema={"auroc_above": pl.String, "crs_above": pl.String},
        ),
    }
    for name in ("diagnostics", "test_sets", "rank_distribution", "weight_leaders", "label_efficiency", "robustness",
                 "retention_by_severity", "calibration_under_shift"):
        if inputs.table(name).height:
            out[name] = inputs.table(name)
    if inputs.table("reliability").height:
        out["reliability_pooled"] = figures.reliability_bins(inputs.table("reliability"))
    return out
