"""``crs probe``: read embeddings from the store, fit every probe at once, write results.

For one (encoder, dataset): fit all seeds x fractions x L2 in one compiled program,
pick L2 per (seed, fraction) by validation loss, evaluate the chosen probes on the
clean test split, every perturbed condition in the store and the shift target, write
the test probabilities into the store and one run-record Parquet file.

The heads are records of ``crs.probe.heads``: ``head="mlp"`` fits one-hidden-layer MLP
probes instead (``crs.probe.mlp``; the L2 grid is their weight-decay grid) and writes
everything under the name ``ENCODER+mlp`` (``head_name``), so scoring ranks the MLP head
as one more model beside the linear one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.conditions import CLEAN, shift
from crs.errors import BadInput
from crs.files import atomic_write
from crs.labels import targets
from crs.names import SPLIT_CODE, VALIDATION
from crs.config import DEFAULT_FRACTIONS, DEFAULT_L2, DEFAULT_N_SEEDS  # the one schema's defaults
from crs.probe.heads import DEFAULT_HIDDEN, REGISTRY, Fitted, TrainingSet, get
from crs.records import COLUMNS, records_dir
from crs.store import Store, StoreError

DEFAULT_SEEDS = tuple(range(DEFAULT_N_SEEDS))
SELECT_BY = ("loss", "auroc")  # how L2 is chosen per (seed, fraction) on the validation split
SELECTION_DIR = "probe_selection"
SUBSETS_DIR = "subsets"
HEADS = tuple(REGISTRY)  # the registered heads' names


def head_name(encoder: str, head: str) -> str:
    """The name a head's results go under: the encoder's own for the linear probe, ``ENCODER+mlp``
    for the MLP. Encoder keys never hold '+' (``crs.extract.encoders.store_key`` escapes it), so
    the name cannot be taken by a real encoder."""
    return get(head).result_name(encoder)


CACHE_ENV = "CRS_JAX_CACHE"  # folder for compiled probe programs; "off" disables the cache


def compile_cache() -> str | None:
    """Keep compiled probe programs on disk (JAX's persistent compilation cache), so a second
    ``crs probe`` on data of the same shapes (another encoder of the same width, a re-run) does
    not compile again. The folder: $CRS_JAX_CACHE, else $XDG_CACHE_HOME/crs-bench/jax (default
    ~/.cache/crs-bench/jax); left alone when JAX's own cache folder is already set."""
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
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    return where


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
    return records_dir(results) / f"{encoder}__{dataset}.parquet"


def float_targets(labels: np.ndarray, task: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``crs.labels.targets`` in the probe's dtype: targets T [n, K] and known-mask [n, K], float32."""
    T, known = targets(labels, task, n_classes)
    return T.astype(np.float32), known.astype(np.float32)


def write_subsets(results, dataset, ids, order, sizes, fractions, seeds) -> Path:
    """The label subsets as drawn: ``RESULTS/subsets/DATASET.parquet``.

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
    path = Path(results) / SUBSETS_DIR / f"{dataset}.parquet"
    atomic_write(path, frame.write_parquet)
    return path


def pairs_in_store(store: Store) -> list[tuple[str, str]]:
    """(encoder, dataset) pairs with complete clean embeddings of a dataset that has a training split."""
    trainable = {d for d in store.datasets() if (store.dataset(d).split == SPLIT_CODE["train"]).any()}
    return sorted({(enc, d) for d, enc, cond, complete in store.embeddings()
                   if cond == CLEAN and complete and d in trainable})



class Split(NamedTuple):
    """The rows of one dataset that a probe run uses, and the features' standardisation."""

    X: np.ndarray  # [image, feature] the clean embeddings as stored
    T: np.ndarray  # [image, class] float32 targets
    known: np.ndarray  # [image, class] float32 known-label mask
    train: np.ndarray  # training rows, the failed images left out
    val: np.ndarray  # validation rows, the failed images left out
    test: np.ndarray  # every test row (failed ones keep their place but are not counted)
    failed: np.ndarray  # rows extract could not decode (the store's failures table)
    mu: np.ndarray  # [feature] training mean
    sd: np.ndarray  # [feature] training standard deviation (+ 1e-6)

    def z(self, A: np.ndarray) -> np.ndarray:
        """Standardised with the training split's statistics (features only, no labels)."""
        return (A.astype(np.float32) - self.mu) / self.sd


class EvalSet(NamedTuple):
    condition: str
    X: np.ndarray  # [n, F] embeddings as stored
    T: np.ndarray  # [n, K]
    known: np.ndarray  # [n, K]
    counted: np.ndarray  # [n] bool: rows the metrics count (not in the failures table)


def load_split(store: Store, encoder: str, dataset: str) -> Split:
    table = store.dataset(dataset)
    X = store.read_embedding(dataset, encoder, CLEAN).astype(np.float32)
    tr, va, te = table.rows("train"), table.rows("val"), table.rows("test")
    if len(tr) == 0 or len(va) == 0 or len(te) == 0:
        raise StoreError(f"dataset {dataset!r} needs train, val and test rows to be probed "
                         f"(has {len(tr)}, {len(va)}, {len(te)})")
    if not np.array_equal(te, np.arange(len(te))):
        raise StoreError(f"dataset {dataset!r} rows are not in test-first order; re-extract into a new store")
    # images extract could not decode never train or choose a probe; test rows keep their place so
    # predictions stay aligned with the test split, but no metric counts them
    failed = store.excluded_rows(dataset)
    tr, va = np.setdiff1d(tr, failed), np.setdiff1d(va, failed)
    T, known = float_targets(table.labels, table.task, len(table.classes))
    return Split(X, T, known, tr, va, te, failed, X[tr].mean(0), X[tr].std(0) + 1e-6)


def eval_sets(store: Store, encoder: str, dataset: str, split: Split) -> list[EvalSet]:
    """Clean test, every perturbed array of the encoder (an incomplete one raises, naming the extract
    to resume), and the shift target's test split."""
    te = split.test
    keep = ~np.isin(te, split.failed)
    out = [EvalSet(CLEAN, split.X[te], split.T[te], split.known[te], keep)]
    for d, enc, cond, _ in store.embeddings(dataset):
        if enc == encoder and cond != CLEAN:
            out.append(EvalSet(cond, store.read_embedding(dataset, encoder, cond), split.T[te], split.known[te],
                               keep))
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
        Xs = store.read_embedding(target, encoder, CLEAN)
        Ts, ks = float_targets(tt.labels, table.task, len(table.classes))
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
    import jax.numpy as jnp

    from crs.probe import core, metrics

    va = split.val
    pv = fitted.predict(split.z(split.X[va]))  # [S, Fr, L, n_va, K]
    vloss = np.asarray(core.validation_loss(pv, jnp.asarray(split.T[va]), jnp.asarray(split.known[va]), task))
    vauroc = np.asarray(metrics.all_metrics(pv, jnp.asarray(split.T[va]), jnp.asarray(split.known[va]), task))[
        ..., metrics.NAMES.index("auroc")]  # [S, Fr, L]
    if select_by == "loss":
        best = np.nanargmin(np.where(np.isfinite(vloss), vloss, np.inf), axis=-1)  # [S, Fr]
    else:
        score = np.where(np.isfinite(vauroc), vauroc, -np.inf)[..., ::-1]
        best = score.shape[-1] - 1 - np.argmax(score, axis=-1)
    return Selection(best, vloss, vauroc, pv)


def _chosen(best: np.ndarray) -> tuple:
    """The index of the chosen probe of each (seed, fraction): ([S, Fr], [S, Fr], [S, Fr])."""
    S, Fr = best.shape
    si, fi = np.meshgrid(np.arange(S), np.arange(Fr), indexing="ij")
    return si, fi, best


def condition_records(ev: EvalSet, probs, meta: dict, task: str) -> pl.DataFrame:
    """One run record per (seed, fraction) of the chosen probes on one evaluation set.

    ``meta`` holds the columns every condition shares (encoder, dataset, task, seed, fraction,
    l2, n_train, classes_missing, converged, iterations), each [S * Fr] or one value."""
    import jax.numpy as jnp

    from crs.probe import metrics

    kept = ev.counted
    counted = probs if kept.all() else probs[:, :, kept]
    m = np.asarray(metrics.all_metrics(counted, jnp.asarray(ev.T[kept]), jnp.asarray(ev.known[kept]), task))
    frame = {k: meta[k] for k in ("encoder", "dataset", "task", "seed", "fraction")}
    frame["condition"] = ev.condition
    for i, name in enumerate(metrics.NAMES):
        frame[name] = m[..., i].reshape(-1).astype(np.float64)
    frame.update({k: meta[k] for k in ("l2", "n_train")})
    frame["n_eval"] = int(kept.sum())
    frame.update({k: meta[k] for k in ("classes_missing", "converged", "iterations")})
    n_rows = len(frame["seed"])
    return pl.DataFrame({k: (v if isinstance(v, np.ndarray) else [v] * n_rows) for k, v in frame.items()})


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


def probe(
    store: Store,
    encoder: str,
    dataset: str,
    *,
    results: Path,
    seeds: tuple[int, ...] = DEFAULT_SEEDS,
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS,
    l2_grid: tuple[float, ...] = DEFAULT_L2,
    max_iter: int = 1000,
    tol: float = 1e-4,
    select_by: str = "loss",
    gap: float | None = None,
    head: str = "linear",
    hidden: int = DEFAULT_HIDDEN,
    mlp_settings=None,
) -> ProbeSummary:
    """Fit, select, evaluate and record every probe of one (encoder, dataset).

    ``head`` names a record of ``crs.probe.heads`` ("linear", the default, or "mlp");
    ``hidden`` is the MLP's width and ``mlp_settings`` its optimiser and stopping rule
    (``crs.probe.mlp.Settings``, default ``Settings()``; ``max_iter``, ``tol`` and ``gap``
    are the linear solver's). Every head reads ``encoder``'s embeddings; its results are
    written under ``head_name(encoder, head)``."""
    compile_cache()
    t0 = time.perf_counter()
    if select_by not in SELECT_BY:
        raise BadInput(f"select_by must be one of {', '.join(SELECT_BY)}, not {select_by!r}")
    spec = get(head)
    options = spec.checked({"max_iter": max_iter, "tol": tol, "gap": gap, "hidden": hidden,
                            "mlp_settings": mlp_settings})
    model = spec.result_name(encoder)
    grid, fractions = tuple(sorted(set(l2_grid))), tuple(sorted(set(fractions)))  # nested subsets: smallest first
    table = store.dataset(dataset)
    split = load_split(store, encoder, dataset)
    data = training_set(split, table, seeds, fractions, grid, results, dataset)
    fitted = spec.fit(data, **options)
    sel = select(fitted, split, table.task, select_by)
    evals = eval_sets(store, encoder, dataset, split)
    attrs = {"seeds": list(seeds), "fractions": list(fractions), "classes": table.classes,
             "axes": "seed, fraction, image, class"}
    meta = record_columns(model, dataset, table, fractions, data, split, fitted, sel)
    records = evaluate(store, dataset, model, split, fitted, sel, evals, meta, (attrs, spec.attrs(encoder, options)))
    path = records_path(results, model, dataset)
    atomic_write(Path(results) / SELECTION_DIR / path.name,
                 selection_frame(model, dataset, seeds, fractions, grid, sel, fitted, select_by).write_parquet)
    atomic_write(path, records.write_parquet)
    return ProbeSummary(
        encoder=model, dataset=dataset, probes=int(np.prod(fitted.converged.shape)), conditions=len(evals),
        not_converged=int((~meta["converged"]).sum()), max_iterations=int(meta["iterations"].max()),
        seconds=time.perf_counter() - t0, records=str(path),
    )


def evaluate(store: Store, dataset: str, model: str, split: Split, fitted: Fitted, sel: Selection,
             evals: list[EvalSet], meta: dict, attrs: tuple[dict, dict]) -> pl.DataFrame:
    """Write the chosen probes' predictions (validation, then every evaluation set) and return their run records.

    attrs: (the predictions' attributes, the head's own), stored in that order."""
    (common, head_attrs), chosen = attrs, _chosen(sel.best)
    table = store.dataset(dataset)
    # every validation row, aligned with the split: scoring fits temperature scaling on them
    val_probs = sel.val_probs[chosen] if len(split.failed) == 0 else fitted.predict(
        split.z(split.X[table.rows("val")]), chosen)
    store.write_predictions(dataset, model, VALIDATION, np.asarray(val_probs), {
        **common, "rows": "the dataset's validation rows in store order", **head_attrs})
    frames = []
    for ev in evals:
        probs = fitted.predict(split.z(ev.X), chosen)  # [S, Fr, n, K]
        frames.append(condition_records(ev, probs, meta, table.task))
        store.write_predictions(dataset, model, ev.condition, np.asarray(probs), {**common, **head_attrs})
    return pl.concat(frames).select(list(COLUMNS)).cast({k: getattr(pl, v[0]) for k, v in COLUMNS.items()})


def training_set(split: Split, table, seeds, fractions, grid, results, dataset) -> TrainingSet:
    """The standardised training rows and each seed's nested label subsets (written to ``RESULTS/subsets``)."""
    from crs.probe import subsets

    tr = split.train
    order = subsets.orders(table.labels[tr], table.task, list(seeds))  # [S, n_tr]
    sizes = subsets.sizes(list(fractions), len(tr))
    write_subsets(results, dataset, table.ids[tr], order, sizes, fractions, seeds)
    return TrainingSet(split.z(split.X[tr]), split.T[tr], split.known[tr], order, sizes, grid, tuple(seeds),
                       table.task)


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
    }
