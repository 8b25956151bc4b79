"""The penalty chosen per (seed, fraction), and the chosen probes' predictions and run records.

Computed before anything is written: a non-finite log-probability or metric refuses the run
(``check_finite``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.names import VALIDATION
from crs.foundations.records import COLUMNS
from crs.probe import padded, subsets
from crs.probe.heads import Fitted
from crs.probe.inputs import EvalSet, Split
from crs.probe.problem import TrainingSet
from crs.store import StoreError


class Selection(NamedTuple):
    """The penalty chosen per (seed, fraction) on the validation split, with the figures it saw."""

    best: np.ndarray  # [S, Fr] index into the grid
    val_loss: np.ndarray  # [S, Fr, L]
    val_auroc: np.ndarray  # [S, Fr, L]
    val_probs: object  # [S, Fr, L, n_val, K] every probe's validation probabilities


def select(fitted: Fitted, split: Split, task: str, select_by: str) -> Selection:
    """Lowest validation loss, or highest validation AUROC with ties to the stronger penalty
    (the later grid value); a non-finite figure is never chosen over a finite one."""
    from crs.probe import core, metrics  # jax: crs plan imports crs.probe.run without it

    va = split.val
    pv = predictions(fitted, split, [split.X[va]])[0]  # [S, Fr, L, n_va, K]
    vloss = core.validation_losses(pv, split.T[va], split.known[va], task)
    auroc = metrics.NAMES.index("auroc")
    vauroc = metrics.all_metrics(pv, split.T[va], split.known[va], task)[..., auroc]  # [S, Fr, L]
    if select_by == "loss":
        best = np.nanargmin(np.where(np.isfinite(vloss), vloss, np.inf), axis=-1)  # [S, Fr]
    else:
        score = np.where(np.isfinite(vauroc), vauroc, -np.inf)[..., ::-1]
        best = score.shape[-1] - 1 - np.argmax(score, axis=-1)
    return Selection(best, vloss, vauroc, pv)


def predictions(fitted: Fitted, split: Split, arrays: list[np.ndarray], index=None,
                peaks: list | None = None) -> list[np.ndarray]:
    """The probes' log-probabilities [..., m_i, K] on the rows of each embedding array [m_i, F] (as stored),
    standardised chunk by chunk and predicted ``crs.probe.padded.PREDICT_ROWS`` rows at a time.
    ``peaks``: a list that receives each array's [m_i] largest |z| per row, from the same standardising."""
    if peaks is None:
        return padded.chunked_rows(fitted.predict, arrays, index, prepare=split.z)
    row_peaks = []

    def prepare(A):
        Z = split.z(A)
        row_peaks.append(np.abs(Z).max(axis=1) if Z.shape[1] else np.zeros(len(Z), np.float32))
        return Z

    out = padded.chunked_rows(fitted.predict, arrays, index, prepare=prepare)
    edges = np.cumsum([0] + [len(a) for a in arrays])
    flat = np.concatenate(row_peaks)
    peaks.extend(flat[s:e] for s, e in zip(edges[:-1], edges[1:]))
    return out


def _chosen(best: np.ndarray) -> tuple:
    """The index of the chosen probe of each (seed, fraction): ([S, Fr], [S, Fr], [S, Fr])."""
    S, Fr = best.shape
    si, fi = np.meshgrid(np.arange(S), np.arange(Fr), indexing="ij")
    return si, fi, best


def condition_records(ev: EvalSet, probs, m: np.ndarray, meta: dict) -> pl.DataFrame:
    """One run record per (seed, fraction) of the chosen probes on one evaluation set, with its
    metrics m [S, Fr, 5] (``metrics.NAMES``, over the counted rows).

    ``meta`` holds the columns every condition shares (encoder, dataset, task, seed, fraction,
    l2, n_train, classes_missing, converged, iterations), each [S * Fr] or one value."""
    from crs.probe import metrics  # jax: crs plan imports crs.probe.run without it

    kept = ev.counted
    counted = probs if kept.all() else probs[:, :, kept]
    frame = {k: meta[k] for k in ("encoder", "dataset", "task", "seed", "fraction")}
    frame["condition"] = ev.condition
    for i, name in enumerate(metrics.NAMES):
        frame[name] = m[..., i].reshape(-1).astype(np.float64)
    frame.update({k: meta[k] for k in ("l2", "n_train")})
    frame["n_eval"] = int(kept.sum())
    frame.update({k: meta[k] for k in ("classes_missing", "converged", "iterations")})
    frame["tie_share"] = tie_share(counted, ev.known[kept]).reshape(-1)
    frame["features_left_out"] = meta["features_left_out"]
    frame["max_scaled"] = meta["max_scaled"][ev.condition]
    n_rows = len(frame["seed"])
    return pl.DataFrame({k: (v if isinstance(v, np.ndarray) else [v] * n_rows) for k, v in frame.items()})


def set_metrics(evals: list[EvalSet], probs: list[np.ndarray], task: str) -> list[np.ndarray]:
    """``metrics.all_metrics`` of each evaluation set's probabilities [S, Fr, n, K] -> [S, Fr, 5];
    sets that share their labels and counted rows (the clean test split and its perturbed
    copies) in one batch."""
    from crs.probe import metrics  # jax: crs plan imports crs.probe.run without it

    out: list = [None] * len(evals)
    groups: dict = {}
    for i, ev in enumerate(evals):
        groups.setdefault((id(ev.T), id(ev.known), id(ev.counted)), []).append(i)
    for members in groups.values():
        ev = evals[members[0]]
        for part in _batches(members, probs, STACK_BYTES):  # a bounded copy, however many the sets
            m = metrics.all_metrics(np.stack([probs[i] for i in part]), ev.T, ev.known, task, ev.counted)
            for j, i in enumerate(part):
                out[i] = m[j]
    return out


STACK_BYTES = 64 << 20  # the most ``set_metrics`` copies into one batch of sets


def _batches(members: list[int], arrays: list[np.ndarray], limit: int) -> list[list[int]]:
    """``members`` in order, cut into runs whose arrays add up to at most ``limit`` bytes (one at least)."""
    runs, run, size = [], [], 0
    for i in members:
        if run and size + arrays[i].nbytes > limit:
            runs.append(run)
            run, size = [], 0
        run.append(i)
        size += arrays[i].nbytes
    return runs + [run] if run else runs


def tie_share(probs, known) -> np.ndarray:
    """Share of tied scores: probs [S, Fr, n, K] (as stored: log-probabilities), known [n, K] -> [S, Fr] float64.

    Of the known (image, class) entries, the share whose stored score equals (exactly, in
    float32) that of another image with a known label for the same class. An AUROC counts a
    tied positive-negative pair as half right, so with a share near 1 it measures the ties,
    not a ranking (probabilities saturated at 0 or 1 tie; their logs rarely do).
    """
    p = np.where(np.asarray(known, bool), np.asarray(probs, np.float64), np.nan)  # unknown entries never tie
    p = np.sort(p, axis=-2)  # NaN last
    eq = p[..., 1:, :] == p[..., :-1, :]  # [S, Fr, n - 1, K]
    tied = np.zeros(p.shape, bool)
    tied[..., 1:, :] |= eq
    tied[..., :-1, :] |= eq
    n_known = max(int(np.asarray(known, bool).sum()), 1)
    return tied.sum(axis=(-2, -1)) / n_known


def selection_frame(model: str, dataset: str, seeds, fractions, grid, sel: Selection, fitted: Fitted,
                    select_by: str) -> pl.DataFrame:
    """The whole grid with its validation figures and the choice, one row per (seed, fraction, l2)."""
    S, Fr, L = sel.val_loss.shape
    return pl.DataFrame({
        "encoder": [model] * (S * Fr * L), "dataset": [dataset] * (S * Fr * L),
        "seed": np.repeat(np.asarray(seeds, np.int64), Fr * L),
        "fraction": np.tile(np.repeat(np.asarray(fractions, np.float64), L), S),
        "l2": np.tile(np.asarray(grid, np.float64), S * Fr),
        "val_loss": sel.val_loss.reshape(-1).astype(np.float64),
        "val_auroc": sel.val_auroc.reshape(-1).astype(np.float64),
        "chosen": (np.arange(L)[None, None, :] == sel.best[..., None]).reshape(-1),
        "selected_by": [select_by] * (S * Fr * L),
        "converged": np.asarray(fitted.converged).reshape(-1),
        "iterations": np.asarray(fitted.iterations).reshape(-1).astype(np.int64),
    })


def evaluate(table, model: str, split: Split, fitted: Fitted, sel: Selection, evals: list[EvalSet],
             meta: dict) -> tuple[dict[str, np.ndarray], pl.DataFrame]:
    """The chosen probes' predictions (validation, then every evaluation set) and their run records; writes nothing.

    Returns ({condition: probabilities [S, Fr, n, K]}, the run records)."""
    chosen = _chosen(sel.best)
    # every validation row, aligned with the split: scoring fits temperature scaling on them
    val_probs = sel.val_probs[chosen] if len(split.failed) == 0 else predictions(
        fitted, split, [split.X[table.rows("val")]], chosen)[0]
    stored = {VALIDATION: np.asarray(val_probs)}
    peaks: list = []  # [n] each: every row's largest standardised value, from the prediction's own standardising
    probs = predictions(fitted, split, [ev.X for ev in evals], chosen, peaks)  # [S, Fr, n, K] each, in one pass
    m = set_metrics(evals, probs, table.task)
    meta = {**meta, "max_scaled": {ev.condition: float(p[ev.counted].max(initial=0.0))
                                   for ev, p in zip(evals, peaks, strict=True)}}
    frames = []
    for ev, p, mi in zip(evals, probs, m):
        frames.append(condition_records(ev, p, mi, meta))
        stored[ev.condition] = p
    records = pl.concat(frames).select(list(COLUMNS)).cast({k: getattr(pl, v[0]) for k, v in COLUMNS.items()})
    return stored, records


METRICS_CHECKED = ("auroc", "ece", "brier", "nll", "accuracy")


def check_finite(predictions: dict[str, np.ndarray], records: pl.DataFrame, model: str, dataset: str) -> None:
    """Refuse (exit 2) before anything is written when a log-probability or a metric is not finite.

    Finite embeddings give finite log-probabilities (``crs.probe.core.log_link``), so a non-finite one
    is a bug of ours; a NaN metric means an evaluation set whose labels leave no class with both
    positive and negative images (or no image at all), which is what a damaged label or split array
    reads as."""
    for condition, probs in predictions.items():
        if not np.isfinite(probs).all():
            raise FloatingPointError(f"the probe of {model} × {dataset} gave non-finite log-probabilities on "
                                     f"{condition}: a bug in CRS-Bench, please report it")
    bad = records.filter(pl.any_horizontal(~pl.col(m).is_finite() for m in METRICS_CHECKED))
    if bad.height:
        row = bad.row(0, named=True)
        which = [m for m in METRICS_CHECKED if not np.isfinite(row[m])]
        raise StoreError(
            f"the probe of {model} × {dataset} gives non-finite {', '.join(which)} on condition "
            f"{row['condition']!r} ({row['n_eval']} images counted): its labels have no class with both positive "
            f"and negative images, as damaged label or split arrays read; nothing was written. Check the store "
            f"with `crs store verify --repair` (or `crs datasets check`) and run `crs probe` again")


def record_columns(model, dataset, table, fractions, data: TrainingSet, split: Split, fitted: Fitted,
                   sel: Selection) -> dict:
    """The run-record columns every condition shares, one value per (seed, fraction) in seed-major order."""
    S, Fr = sel.best.shape
    chosen = _chosen(sel.best)
    masks = subsets.masks_from(data.order, data.sizes)  # [S, Fr, n_tr]
    missing = subsets.classes_missing(table.labels[split.train], table.task, masks, len(table.classes))  # [S, Fr]
    n_train = np.broadcast_to(np.asarray(data.sizes, dtype=np.int64), (S, Fr))
    return {
        "encoder": model, "dataset": dataset, "task": table.task,
        "seed": np.repeat(np.asarray(data.seeds), Fr),
        "fraction": np.tile(np.asarray(fractions, dtype=np.float64), S),
        "l2": np.asarray(data.grid)[sel.best].reshape(-1), "n_train": n_train.reshape(-1),
        "classes_missing": missing.reshape(-1).astype(np.int64),
        "converged": np.asarray(fitted.converged)[chosen].reshape(-1),
        "iterations": np.asarray(fitted.iterations)[chosen].reshape(-1).astype(np.int64),
        "features_left_out": split.left_out,
    }
