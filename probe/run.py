"""``crs probe``: read embeddings from the store, fit every probe at once, write results.

For one (encoder, dataset): fit all seeds x fractions x L2 in one compiled program,
pick L2 per (seed, fraction) by validation loss, evaluate the chosen probes on the
clean test split, every perturbed condition in the store and the shift target, write
the test probabilities into the store and one run-record Parquet file.

Everything is computed before anything is written, and what is written is one generation
(``crs.records``): the predictions, the probe selection, the label subsets, then the run
records, which commit it. Nothing non-finite is written: embeddings, probabilities and
metrics are checked first, so damaged inputs never overwrite good results. One run per
(encoder, dataset) at a time (``crs.store.locks.probe_lock``).

Features constant on the training split are left out of the probe (``live_features``), and
no kept feature is divided by less than a tenth of the typical feature's spread
(``feature_scales``), so no test, perturbed or shifted image can be scaled by more than ten
times what a typical feature's deviation is.

The heads are records of ``crs.probe.heads``: ``head="mlp"`` fits one-hidden-layer MLP
probes instead (``crs.probe.mlp``; the L2 grid is their weight-decay grid) and writes
everything under the name ``ENCODER+mlp`` (``head_name``), so scoring ranks the MLP head
as one more model beside the linear one.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.conditions import CLEAN, shift
from crs import forms
from crs.errors import BadInput
from crs.labels import targets
from crs.names import SPLIT_CODE, VALIDATION
from crs.config import DEFAULT_FRACTIONS, DEFAULT_L2, DEFAULT_N_SEEDS  # the one schema's defaults
from crs.probe.heads import DEFAULT_HIDDEN, REGISTRY, Fitted, TrainingSet, get
from crs import records as run_records
from crs.records import COLUMNS
from crs.store import Store, StoreError
from crs.store.locks import probe_lock

DEFAULT_SEEDS = tuple(range(DEFAULT_N_SEEDS))
SELECT_BY = ("loss", "auroc")  # how L2 is chosen per (seed, fraction) on the validation split
SELECTION_DIR = run_records.SELECTION_DIR
SUBSETS_DIR = "subsets"
HEADS = tuple(REGISTRY)  # the registered heads' names
PROVENANCE_KEY = run_records.PROVENANCE  # run-record Parquet metadata: json of crs.provenance.collect(probe settings)


def head_name(encoder: str, head: str) -> str:
    """The name a head's results go under: the encoder's own for the linear probe, ``ENCODER+mlp``
    for the MLP. Encoder keys never hold '+' (``crs.extract.encoders.store_key`` escapes it), so
    the name cannot be taken by a real encoder."""
    return get(head).result_name(encoder)


CACHE_ENV = "CRS_JAX_CACHE"  # folder for compiled probe programs; "off" disables the cache


def compile_cache() -> str | None:
    """Keep compiled probe programs on disk (JAX's persistent compilation cache), every one however
    quickly it compiles, so a second ``crs probe`` on data of the same shapes (another encoder of
    the same width, a re-run) does not compile again: on small data the many small programs
    (staging, prediction, metrics) cost as much to compile as the solver loops. The folder:
    $CRS_JAX_CACHE, else $XDG_CACHE_HOME/crs-bench/jax (default ~/.cache/crs-bench/jax); left
    alone when JAX's own cache folder is already set."""
    import os

    import jax

    where = os.environ.get(CACHE_ENV)
    if where == "off" or jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir or None
    where = where or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                  "crs-bench", "jax")
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:  # a read-only home: compile every time, as without the cache
        return None
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    return where


@dataclass(frozen=True)
class ProbeOptions:
    """The settings of one ``probe`` run: which probes are fitted and how the penalty is chosen.

    ``head`` names a record of ``crs.probe.heads`` ("linear" or "mlp"); ``hidden`` is the MLP's
    width and ``mlp_settings`` its optimiser and stopping rule (``crs.probe.mlp.Settings``, default
    ``Settings()``); ``max_iter``, ``tol`` and ``gap`` are the linear solver's."""

    seeds: tuple[int, ...] = DEFAULT_SEEDS
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    l2_grid: tuple[float, ...] = DEFAULT_L2
    max_iter: int = 1000
    tol: float = 1e-4
    select_by: str = "loss"
    gap: float | None = None
    head: str = "linear"
    hidden: int = DEFAULT_HIDDEN
    mlp_settings: object = None

    @classmethod
    def from_settings(cls, settings) -> ProbeOptions:
        """The options of a ``crs.config.Probe`` settings record (the one schema): seeds 0..seeds-1."""
        return cls(seeds=tuple(range(settings.seeds)), fractions=tuple(settings.fractions),
                   l2_grid=tuple(settings.l2), select_by=settings.select_by, tol=settings.tol, head=settings.head,
                   hidden=settings.hidden)


@dataclass
class ProbeSummary:
    encoder: str
    dataset: str
    probes: int
    conditions: int
    not_converged: int
    max_iterations: int
    seconds: float
    records: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def records_path(results: Path, encoder: str, dataset: str) -> Path:
    return run_records.path(results, encoder, dataset)


def float_targets(labels: np.ndarray, task: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``crs.labels.targets`` in the probe's dtype: targets T [n, K] and known-mask [n, K], float32."""
    T, known = targets(labels, task, n_classes)
    return T.astype(np.float32), known.astype(np.float32)


def subsets_path(results, dataset: str) -> Path:
    return Path(results) / SUBSETS_DIR / f"{dataset}.parquet"


def subsets_frame(dataset, ids, order, sizes, fractions, seeds) -> pl.DataFrame:
    """The label subsets as drawn, for ``RESULTS/subsets/DATASET.parquet``.

    One row per (seed, training image): its position in the seed's order and the
    smallest fraction whose subset holds it (subsets are nested, so the image is in every
    larger one). They depend only on the labels and the seed, so every encoder gets the
    same subsets; the file lets anyone check that, or refit them elsewhere.
    """
    S, n = order.shape
    position = np.empty_like(order)
    position[np.arange(S)[:, None], order] = np.arange(n)[None, :]
    first = np.searchsorted(np.asarray(sizes), position, side="right")  # index of the first fraction holding it
    frame = pl.DataFrame({
        "dataset": [dataset] * (S * n), "seed": np.repeat(np.asarray(seeds, np.int64), n),
        "image_id": np.tile(np.asarray(ids).astype(str), S), "position": position.reshape(-1).astype(np.int64),
        "first_fraction": np.asarray(fractions, np.float64)[first.reshape(-1)],
    })
    return frame


def pairs_in_store(store: Store) -> list[tuple[str, str]]:
    """(encoder, dataset) pairs with complete clean embeddings of a dataset that has a training split."""
    trainable = {d for d in store.datasets() if (store.dataset(d).split == SPLIT_CODE["train"]).any()}
    return sorted({(enc, d) for d, enc, cond, complete in store.embeddings()
                   if cond == CLEAN and complete and d in trainable})



DEAD_REL = 1e-4  # a feature whose training std is below this share of the typical (median) std is left out
DEAD_FLOOR = 1e-30  # the typical std's floor: with every feature constant, every one is left out
SCALE_FLOOR = 0.1  # no kept feature is divided by less than this share of the typical std (docs/standardisation.md)


def _typical_sd(sd: np.ndarray) -> float:
    """The median of the training stds above ``DEAD_REL`` times the largest (so that dead features,
    however many, do not drag it down), floored at ``DEAD_FLOOR``."""
    top = float(sd.max()) if sd.size else 0.0
    spread = sd[sd > DEAD_REL * top]
    return max(float(np.median(spread)) if spread.size and top > 0 else 0.0, DEAD_FLOOR)


def live_features(X: np.ndarray) -> np.ndarray:
    """Which features of the training rows X [n, F] the probe uses: [F] bool.

    With sd the training standard deviations (in float64, so an exactly constant feature gives 0,
    or round-off of its size) and ``_typical_sd`` their typical value, a feature is left out when
    its sd is at most ``DEAD_REL`` times the typical one: ReLU units dead on every training image
    and round-off of a constant carry nothing a probe can learn from. The threshold is relative,
    so it does not depend on the encoder's units. Near-dead features that stay are bounded by
    ``feature_scales``, not by this rule.
    """
    sd = np.asarray(X, np.float64).std(0)
    return sd > DEAD_REL * _typical_sd(sd)


def feature_scales(X: np.ndarray, floor: float = SCALE_FLOOR) -> np.ndarray:
    """The divisor of each feature of the training rows X [n, F] (kept features only): [F] float32.

    s_f = max(sd_f, SCALE_FLOOR * typical), typical = ``_typical_sd``. Standardising is then
    z_f = (x_f - mean_f) / s_f, so no image's scaled value exceeds
    |x_f - mean_f| / (SCALE_FLOOR * typical): amplification is at most 1 / SCALE_FLOOR = 10 times
    that of a typical feature. Without the floor a ReLU feature that fires on 1-3 of ~1,000
    training images (sd 1e-4 to 1e-3 of the typical) scales a shifted image on which it fires by
    up to 10,000, and the saturated softmax ties every row (docs/standardisation.md measures the
    floor's choice: the largest scaled value, the tie share and the shift retention at 0.01-1).
    Features at or above the floor keep their own sd.
    """
    sd = np.asarray(X, np.float64).std(0)
    return np.maximum(sd, floor * _typical_sd(sd)).astype(np.float32)


class Split(NamedTuple):
    """The rows of one dataset that a probe run uses, and the features' standardisation."""

    X: np.ndarray  # [image, feature] the clean embeddings as stored
    T: np.ndarray  # [image, class] float32 targets
    known: np.ndarray  # [image, class] float32 known-label mask
    train: np.ndarray  # training rows, the failed images left out
    val: np.ndarray  # validation rows, the failed images left out
    test: np.ndarray  # every test row (failed ones keep their place but are not counted)
    failed: np.ndarray  # rows extract could not decode (the store's failures table)
    keep: np.ndarray  # [feature] bool: the features the probe uses (``live_features``)
    mu: np.ndarray  # [kept feature] training mean
    sd: np.ndarray  # [kept feature] the divisor: training std, floored (``feature_scales``)

    def z(self, A: np.ndarray) -> np.ndarray:
        """The kept features standardised with the training split's statistics (features only, no labels)."""
        A = A.astype(np.float32)
        return ((A if self.keep.all() else A[:, self.keep]) - self.mu) / self.sd

    @property
    def left_out(self) -> int:
        return int((~self.keep).sum())


class EvalSet(NamedTuple):
    condition: str
    X: np.ndarray  # [n, F] embeddings as stored
    T: np.ndarray  # [n, K]
    known: np.ndarray  # [n, K]
    counted: np.ndarray  # [n] bool: rows the metrics count (not in the failures table)


def finite_embeddings(X: np.ndarray, store: Store, encoder: str, dataset: str, condition: str) -> np.ndarray:
    """X as read, or a StoreError naming the array and the extraction that rewrites it."""
    bad = ~np.isfinite(X).all(axis=tuple(range(1, X.ndim)))
    if bad.any():
        raise StoreError(
            f"the {condition} embeddings of {encoder} on {dataset} in {store.path!r} hold non-finite values in "
            f"{int(bad.sum())} rows (first row {int(np.flatnonzero(bad)[0])}): the array is damaged; check it with "
            f"`crs store verify --repair` or delete it and run `crs extract --encoder {encoder} --dataset {dataset} "
            f"--store {store.path}`")
    return X


def load_split(store: Store, encoder: str, dataset: str) -> Split:
    table = store.dataset(dataset)
    X = finite_embeddings(store.read_embedding(dataset, encoder, CLEAN).astype(np.float32), store, encoder, dataset,
                          CLEAN)
    tr, va, te = table.rows("train"), table.rows("val"), table.rows("test")
    if table.attrs.get("role") == "shift_target":
        raise StoreError(f"dataset {dataset!r} is the shift target of {table.attrs.get('target_of')!r}: its "
                         "images are evaluated as that dataset's shift condition, never probed on their own; "
                         "to probe it as a dataset, name it with --dataset when extracting into a new store")
    if len(tr) == 0 or len(va) == 0 or len(te) == 0:
        raise StoreError(f"dataset {dataset!r} needs train, val and test rows to be probed "
                         f"(has {len(tr)}, {len(va)}, {len(te)})")
    if not np.array_equal(te, np.arange(len(te))):
        raise StoreError(f"dataset {dataset!r} rows are not in test-first order; re-extract into a new store")
    # images extract could not decode never train or choose a probe; test rows keep their place so
    # predictions stay aligned with the test split, but no metric counts them
    failed = store.excluded_rows(dataset)
    tr, va = np.setdiff1d(tr, failed), np.setdiff1d(va, failed)
    for split_name, rows in (("train", tr), ("val", va)):
        if len(rows) == 0:  # nothing to fit, or nothing to choose the L2 and the temperature on
            raise StoreError(f"every {split_name} image of dataset {dataset!r} is one extract could not decode "
                             f"({len(failed)} such images, listed in the dataset's failures table in "
                             f"{store.path!r}): repair or replace those files, then re-extract into a new store")
    T, known = checked_targets(table, store)
    keep = live_features(X[tr])
    if not keep.any():
        raise StoreError(f"every feature of {encoder} is constant on the training split of {dataset}: nothing to "
                         f"probe; the embeddings are damaged or the encoder's weights are; re-extract them with "
                         f"`crs extract --encoder {encoder} --dataset {dataset} --store {store.path}`")
    Xk = X[tr][:, keep] if not keep.all() else X[tr]
    return Split(X, T, known, tr, va, te, failed, keep, Xk.mean(0), feature_scales(Xk))


def checked_targets(table, store: Store) -> tuple[np.ndarray, np.ndarray]:
    """``float_targets`` of a stored dataset, or a StoreError naming its label array when they are not labels."""
    try:
        return float_targets(table.labels, table.task, len(table.classes))
    except ValueError as exc:
        raise StoreError(f"the labels of dataset {table.name!r} in {store.path!r} are damaged ({exc}); check the "
                         f"store with `crs store verify --repair`, or extract the dataset into a new store") from exc


def eval_sets(store: Store, encoder: str, dataset: str, split: Split) -> list[EvalSet]:
    """Clean test, every perturbed array of the encoder (an incomplete one raises, naming the extract
    to resume), and the shift target's test split."""
    te = split.test
    keep = ~np.isin(te, split.failed)
    T, known = split.T[te], split.known[te]  # one copy, shared by every condition of the test split
    out = [EvalSet(CLEAN, split.X[te], T, known, keep)]
    for d, enc, cond, _ in store.embeddings(dataset, encoder):
        if cond != CLEAN:
            X = finite_embeddings(store.read_embedding(dataset, encoder, cond), store, encoder, dataset, cond)
            out.append(EvalSet(cond, X, T, known, keep))
    table = store.dataset(dataset)
    target = table.attrs.get("shift_target")
    if target:
        if not store.has_dataset(target):
            raise StoreError(
                f"{dataset!r} names {target!r} as its shift target, which is not in the store; run "
                f"`crs extract --encoder {encoder} --dataset {target} --store {store.path}`"
            )
        tt = store.dataset(target)
        if tt.classes != table.classes or tt.task != table.task:
            raise StoreError(f"shift target {target!r} has other classes or task than {dataset!r}")
        Xs = finite_embeddings(store.read_embedding(target, encoder, CLEAN), store, encoder, target, CLEAN)
        Ts, ks = checked_targets(tt, store)
        rows = tt.rows("test")
        out.append(EvalSet(shift(target), Xs[rows], Ts[rows], ks[rows], ~np.isin(rows, store.excluded_rows(target))))
    return out


class Selection(NamedTuple):
    """The penalty chosen per (seed, fraction) on the validation split, with the figures it saw."""

    best: np.ndarray  # [S, Fr] index into the grid
    val_loss: np.ndarray  # [S, Fr, L]
    val_auroc: np.ndarray  # [S, Fr, L]
    val_probs: object  # [S, Fr, L, n_val, K] every probe's validation probabilities


def select(fitted: Fitted, split: Split, task: str, select_by: str) -> Selection:
    """Lowest validation loss, or highest validation AUROC with ties to the stronger penalty
    (the later grid value); a non-finite figure is never chosen over a finite one."""
    from crs.probe import core, metrics

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
    from crs.probe import padded

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
    from crs.probe import metrics

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
    from crs.probe import metrics

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


def probe(store: Store, encoder: str, dataset: str, options: ProbeOptions = ProbeOptions(), *, results: Path,
          progress=None, task=None) -> ProbeSummary:
    """Fit, select, evaluate and record every probe of one (encoder, dataset).

    Every head reads ``encoder``'s embeddings; its results are written under
    ``head_name(encoder, options.head)``.

    ``progress`` (a ``crs.progress.Progress``, where given) advances ``task`` by one as each
    solver loop finishes (``planned_loops`` of them for this pair: set the task's total from
    it, and the progress shows the time left); without ``task``, the pair gets a task of
    its own."""
    compile_cache()
    t0 = time.perf_counter()
    if options.select_by not in SELECT_BY:
        raise BadInput(f"select_by must be one of {', '.join(SELECT_BY)}, not {options.select_by!r}")
    spec = get(options.head)
    head_options = spec.checked({"max_iter": options.max_iter, "tol": options.tol, "gap": options.gap,
                                 "hidden": options.hidden, "mlp_settings": options.mlp_settings})
    model = spec.result_name(encoder)
    seeds, select_by = options.seeds, options.select_by
    # nested subsets: smallest first
    grid, fractions = tuple(sorted(set(options.l2_grid))), tuple(sorted(set(options.fractions)))
    options = replace(options, l2_grid=grid, fractions=fractions)
    with probe_lock(store, results, model, dataset):
        table = store.dataset(dataset)
        split = load_split(store, encoder, dataset)
        data, drawn = training_set(split, table, seeds, fractions, grid, dataset)
        fitted = spec.fit(data, **head_options, on_loop=_loop_reporter(progress, task, model, dataset, spec, data))
        sel = select(fitted, split, table.task, select_by)
        evals = eval_sets(store, encoder, dataset, split)
        attrs = {"seeds": list(seeds), "fractions": list(fractions), "classes": table.classes,
                 "axes": "seed, fraction, image, class", "features_left_out": split.left_out,
                 "provenance": _made_by(store, results, options)}
        meta = record_columns(model, dataset, table, fractions, data, split, fitted, sel)
        predictions, records = evaluate(table, model, split, fitted, sel, evals, meta)
        check_finite(predictions, records, model, dataset)
        outputs = Outputs(predictions, (attrs, spec.attrs(encoder, head_options)),
                          selection_frame(model, dataset, seeds, fractions, grid, sel, fitted, select_by), drawn,
                          records, _provenance(options, head_options))
        path = commit(store, Path(results), model, dataset, outputs)
    return ProbeSummary(
        encoder=model, dataset=dataset, probes=int(np.prod(fitted.converged.shape)), conditions=len(evals),
        not_converged=int((~meta["converged"]).sum()), max_iterations=int(meta["iterations"].max()),
        seconds=time.perf_counter() - t0, records=str(path),
    )


def _made_by(store: Store, results, options: ProbeOptions) -> dict:
    """What the stored predictions record of the run that made them, so that a repair command can name it
    whole (``crs.store.zarr_store.probe_command``): the results folder (relative to a local store, so that
    the two moved together still match), and the settings in the schema's names (``crs.config.Probe``).
    Seeds are a count there (0..n-1); other seeds have no flag to name them."""
    import os

    from crs.store.zarr_store import local_path

    o = options
    settings = {"fractions": list(o.fractions), "l2": list(o.l2_grid), "select_by": o.select_by, "tol": o.tol,
                "head": o.head, "hidden": o.hidden}
    if tuple(o.seeds) == tuple(range(len(o.seeds))):
        settings["seeds"] = len(o.seeds)
    here = local_path(store.path)
    where = Path(results).resolve()
    return {"results": os.path.relpath(where, Path(here).resolve()) if here else str(where), "probe": settings}


def _provenance(options: ProbeOptions, head_options: dict) -> dict:
    """``crs.provenance.collect`` of this probe run's settings (JSON-safe)."""
    from crs import provenance as tool

    o = options
    settings = {"head": o.head, "seeds": list(o.seeds), "fractions": list(o.fractions), "l2": list(o.l2_grid),
                "select_by": o.select_by}
    for k, v in head_options.items():
        settings[k] = v if v is None or isinstance(v, (int, float, str, bool)) else repr(v)
    return tool.collect(settings)


def planned_loops(store: Store, encoder: str, dataset: str, fractions=DEFAULT_FRACTIONS, head: str = "linear") -> int:
    """How many solver loops ``probe`` runs on one pair (what its progress counts), from the shape of
    its training set without reading the embeddings: the training rows less the failed images, and
    the embedding width (``embedding_width``). ``probe`` fits the live features only
    (``live_features``), so where dead features take the data across a schedule threshold of
    ``crs.probe.core.solver_loops`` the count is off by the loops that crossing adds or removes."""
    from crs.probe import subsets

    n = training_rows(store, dataset)
    fractions = tuple(sorted(set(fractions)))
    if n == 0:
        return 0
    sizes = tuple(subsets.sizes(list(fractions), n))
    return get(head).loops(n, embedding_width(store, encoder, dataset), sizes)


def training_rows(store: Store, dataset: str) -> int:
    """The training rows a pair's probes fit: the training split less the failed images."""
    return len(np.setdiff1d(store.dataset(dataset).rows("train"), store.excluded_rows(dataset)))


def small_pair(store: Store, encoder: str, dataset: str) -> bool:
    """Whether a pair's training set is small data: under ``crs.probe.core.ONE_BLOCK_BELOW`` values
    (rows x embedding width), where compiling and the work around the fit cost more than the solver
    loops, so pairs can be probed side by side (``crs.stages.steps.probe``) in little memory."""
    from crs.probe.core import ONE_BLOCK_BELOW

    return training_rows(store, dataset) * embedding_width(store, encoder, dataset) < ONE_BLOCK_BELOW


def embedding_width(store: Store, encoder: str, dataset: str) -> int:
    """The width of the pair's clean embeddings, read from metadata where the store has it (the
    array's shape, or the encoder record extract writes into the array's attributes), else from
    the array itself."""
    shape = getattr(store, "embedding_shape", None)
    if shape is not None:
        return int(shape(dataset, encoder, CLEAN)[1])
    spec = store.embedding_attrs(dataset, encoder, CLEAN).get("encoder_spec")
    width = spec.get("width") if isinstance(spec, dict) else None
    if isinstance(width, int) and width > 0:
        return width
    return int(store.read_embedding(dataset, encoder, CLEAN).shape[1])


def _loop_reporter(progress, task, model: str, dataset: str, spec, data: TrainingSet):
    """The ``on_loop`` callback of a head's fit: advance ``task`` (or a task of the pair's own) by one."""
    if progress is None:
        return None
    if task is None:
        task = progress.add_task(f"solver loops {model} × {dataset}",
                                 total=spec.loops(data.X.shape[0], data.X.shape[1], data.sizes), unit="loops")
    return lambda: progress.advance(task)


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


class Outputs(NamedTuple):
    """Everything one probe run writes (``commit``), computed before anything is written."""

    predictions: dict  # {condition: log-probabilities [S, Fr, n, K]}
    attrs: tuple  # (the predictions' attributes, the head's own), stored in that order with the generation
    selection: pl.DataFrame  # ``selection_frame``
    drawn: pl.DataFrame  # the label subsets (``subsets_frame``)
    records: pl.DataFrame  # the run records
    provenance: dict | None = None  # the run records' ``crs_provenance`` (default: ``crs.provenance.collect()``)


def commit(store: Store, results: Path, model: str, dataset: str, outputs: Outputs) -> Path:
    """Write one generation of the pair's outputs; the run records last, as its commit point."""
    from crs import provenance as tool

    predictions, attrs, selection, drawn, records, provenance = outputs
    provenance = tool.collect() if provenance is None else provenance
    generation = uuid.uuid4().hex
    common, head_attrs = attrs
    for condition, probs in predictions.items():
        extra = {"rows": "the dataset's validation rows in store order"} if condition == VALIDATION else {}
        store.write_predictions(dataset, model, condition, probs, {
            **common, **extra, **head_attrs, forms.KEY: forms.LOG_PROB, run_records.PREDICTION_GENERATION: generation})
    run_records.write_parquet(run_records.selection_path(results, model, dataset), selection, generation)
    run_records.write_parquet(subsets_path(results, dataset), drawn, generation)
    path = records_path(results, model, dataset)
    run_records.write_parquet(path, records, generation, {"crs:features_left_out": str(records["features_left_out"][0]),
                                                          PROVENANCE_KEY: json.dumps(provenance),
                                                          run_records.STORE: _store_from(store, results)})
    return path


def _store_from(store: Store, results: Path) -> str:
    """The store as the run records name it: relative to the results folder where both are local, so that
    the two moved together still match (``crs.records.STORE``)."""
    import os

    from crs.store.zarr_store import local_path

    here = local_path(store.path)
    return os.path.relpath(Path(here).resolve(), Path(results).resolve()) if here else store.path


def training_set(split: Split, table, seeds, fractions, grid, dataset) -> tuple[TrainingSet, pl.DataFrame]:
    """The standardised training rows and each seed's nested label subsets, with the subsets' table."""
    from crs.probe import subsets

    tr = split.train
    order = subsets.orders(table.labels[tr], table.task, list(seeds))  # [S, n_tr]
    sizes = subsets.sizes(list(fractions), len(tr))
    drawn = subsets_frame(dataset, table.ids[tr], order, sizes, fractions, seeds)
    return TrainingSet(split.z(split.X[tr]), split.T[tr], split.known[tr], order, sizes, grid, table.task,
                       tuple(seeds)), drawn


def record_columns(model, dataset, table, fractions, data: TrainingSet, split: Split, fitted: Fitted,
                   sel: Selection) -> dict:
    """The run-record columns every condition shares, one value per (seed, fraction) in seed-major order."""
    from crs.probe import subsets

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
