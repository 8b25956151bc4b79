"""``crs probe``: read embeddings from the store, fit every probe at once, write results.

For one (encoder, dataset): fit all seeds x fractions x L2 in one compiled program,
pick L2 per (seed, fraction) by validation loss, evaluate the chosen probes on the
clean test split, every perturbed condition in the store and the shift target, write
the test probabilities into the store and one run-record Parquet file.

``head="mlp"`` fits one-hidden-layer MLP probes instead (``crs.probe.mlp``; the L2 grid
is their weight-decay grid) and writes everything under the name ``ENCODER+mlp``
(``head_name``), so scoring ranks the MLP head as one more model beside the linear one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from crs.conditions import CLEAN, shift
from crs.files import atomic_write
from crs.records import COLUMNS, records_dir
from crs.store import SPLIT_CODE, Store, StoreError

DEFAULT_SEEDS = (0, 1, 2, 3, 4)
DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
DEFAULT_L2 = (1e-3, 1e-2, 1e-1, 1.0)
SELECT_BY = ("loss", "auroc")  # how L2 is chosen per (seed, fraction) on the validation split
SELECTION_DIR = "probe_selection"
SUBSETS_DIR = "subsets"
VALIDATION = "validation"  # predictions key of the validation split's probabilities (not a test condition)
HEADS = ("linear", "mlp")
DEFAULT_HIDDEN = 128


def head_name(encoder: str, head: str) -> str:
    """The name a head's results go under: the encoder's own for the linear probe, ``ENCODER+mlp``
    for the MLP. Encoder keys never hold '+' (``crs.extract.encoders.store_key`` escapes it), so
    the name cannot be taken by a real encoder."""
    if head not in HEADS:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, not {head!r}")
    return encoder if head == "linear" else f"{encoder}+{head}"


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


def targets(labels: np.ndarray, task: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Class indices or {1, 0, -1} labels -> targets T [n, K] and known-mask [n, K]."""
    if task == "multiclass":
        T = np.eye(n_classes, dtype=np.float32)[np.asarray(labels)]
        return T, np.ones_like(T)
    labels = np.asarray(labels)
    return (labels == 1).astype(np.float32), (labels >= 0).astype(np.float32)


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
    """``head`` "linear" (the default) or "mlp"; ``hidden`` is the MLP's width and
    ``mlp_settings`` its optimiser and stopping rule (``crs.probe.mlp.Settings``, default
    ``Settings()``; ``max_iter``, ``tol`` and ``gap`` are the linear solver's). Both heads read
    ``encoder``'s embeddings; the MLP's results are written under ``head_name(encoder, "mlp")``."""
    import jax.numpy as jnp

    from crs.probe import core, metrics, subsets

    compile_cache()
    t0 = time.perf_counter()
    if select_by not in SELECT_BY:
        raise ValueError(f"select_by must be one of {', '.join(SELECT_BY)}, not {select_by!r}")
    model = head_name(encoder, head)  # the name results go under; raises on an unknown head
    if head == "mlp" and not (isinstance(hidden, (int, np.integer)) and hidden >= 1):
        raise ValueError(f"hidden must be a whole number of at least 1, not {hidden!r}")
    l2_grid = tuple(sorted(set(l2_grid)))
    fractions = tuple(sorted(set(fractions)))  # nested subsets: smallest first
    table = store.dataset(dataset)
    task, classes = table.task, table.classes
    K = len(classes)
    X = store.read_embedding(dataset, encoder, CLEAN).astype(np.float32)
    tr, va, te = table.rows("train"), table.rows("val"), table.rows("test")
    if len(tr) == 0 or len(va) == 0 or len(te) == 0:
        raise StoreError(f"dataset {dataset!r} needs train, val and test rows to be probed "
                         f"(has {len(tr)}, {len(va)}, {len(te)})")
    if not np.array_equal(te, np.arange(len(te))):
        raise StoreError(f"dataset {dataset!r} rows are not in test-first order; re-extract into a new store")
    # images extract could not decode (the store's failures table) never train or choose a probe; test rows
    # keep their place so predictions stay aligned with the test split, but no metric counts them
    failed = store.excluded_rows(dataset)
    tr, va = np.setdiff1d(tr, failed), np.setdiff1d(va, failed)
    # standardise with the training split's statistics (features only, no labels)
    mu = X[tr].mean(0)
    sd = X[tr].std(0) + 1e-6
    Z = lambda A: (A.astype(np.float32) - mu) / sd  # noqa: E731

    T, known = targets(table.labels, task, K)
    order = subsets.orders(table.labels[tr], task, list(seeds))  # [S, n_tr]
    sizes = subsets.sizes(list(fractions), len(tr))
    masks = subsets.masks_from(order, sizes)  # [S, Fr, n_tr], for classes_missing in the records
    write_subsets(results, dataset, table.ids[tr], order, sizes, fractions, seeds)
    if head == "linear":
        fit = core.fit(jnp.asarray(Z(X[tr])), jnp.asarray(T[tr]), jnp.asarray(known[tr]), jnp.asarray(order), sizes,
                       jnp.asarray(l2_grid, dtype=jnp.float32), task=task, max_iter=max_iter, tol=tol,
                       gap=core.DEFAULT_GAP if gap is None else gap)
        fit_converged, fit_iterations = fit.converged, fit.iterations

        def predict(A, index=None):  # A [n, F] standardised -> [..., n, K]; index picks probes of the grid
            W, b = (fit.W, fit.b) if index is None else (fit.W[index], fit.b[index])
            return core.probabilities(jnp.asarray(A), W, b, task)
    else:
        from crs.probe import mlp

        settings = mlp_settings if mlp_settings is not None else mlp.Settings()
        fit = mlp.fit(Z(X[tr]), T[tr], known[tr], order, sizes, np.asarray(l2_grid, np.float32), list(seeds),
                      task=task, hidden=int(hidden), settings=settings)
        fit_converged, fit_iterations = fit.converged, fit.steps

        def predict(A, index=None):
            params = fit.params if index is None else mlp.take(fit.params, index)
            return mlp.probabilities(jnp.asarray(A), params, task)

    # L2 per (seed, fraction) by validation loss
    pv = predict(Z(X[va]))  # [S, Fr, L, n_va, K]
    vloss = np.asarray(core.validation_loss(pv, jnp.asarray(T[va]), jnp.asarray(known[va]), task))
    vauroc = np.asarray(metrics.all_metrics(pv, jnp.asarray(T[va]), jnp.asarray(known[va]), task))[
        ..., metrics.NAMES.index("auroc")]  # [S, Fr, L]
    if select_by == "loss":
        best = np.nanargmin(np.where(np.isfinite(vloss), vloss, np.inf), axis=-1)  # [S, Fr]
    else:  # highest validation AUROC; ties go to the stronger penalty (the later grid value)
        score = np.where(np.isfinite(vauroc), vauroc, -np.inf)[..., ::-1]
        best = score.shape[-1] - 1 - np.argmax(score, axis=-1)
    si, fi = np.meshgrid(np.arange(len(seeds)), np.arange(len(fractions)), indexing="ij")
    chosen = (si, fi, best)  # the chosen probe of each (seed, fraction): [S, Fr]
    converged = np.asarray(fit_converged)[chosen]
    iters = np.asarray(fit_iterations)[chosen]

    # evaluation sets: clean test, every perturbed array (an incomplete one raises), the shift target
    # (condition, embeddings, targets, known, rows the metrics count: not in the failures table)
    keep = ~np.isin(te, failed)
    evals: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = [
        (CLEAN, X[te], T[te], known[te], keep)]
    for d, enc, cond, _ in store.embeddings(dataset):
        if enc == encoder and cond != CLEAN:  # an incomplete array raises, naming the extract to resume
            evals.append((cond, store.read_embedding(dataset, encoder, cond), T[te], known[te], keep))
    target = table.attrs.get("shift_target")
    if target:
        if not store.has_dataset(target):
            raise StoreError(
                f"{dataset!r} names {target!r} as its shift target, which is not in the store; run "
                f"`crs extract --encoder {encoder} --dataset {target} --store {store.path}`"
            )
        tt = store.dataset(target)
        if tt.classes != classes or tt.task != task:
            raise StoreError(f"shift target {target!r} has other classes or task than {dataset!r}")
        Xs = store.read_embedding(target, encoder, CLEAN)
        Ts, ks = targets(tt.labels, task, K)
        rows = tt.rows("test")
        evals.append((shift(target), Xs[rows], Ts[rows], ks[rows], ~np.isin(rows, store.excluded_rows(target))))

    # the chosen probes' validation probabilities: scoring fits temperature scaling on them
    val_probs = pv[chosen] if len(failed) == 0 else predict(
        Z(X[table.rows("val")]), chosen)  # every validation row, aligned with the split
    head_attrs = {} if head == "linear" else {"head": head, "hidden": int(hidden), "embeddings_of": encoder}
    store.write_predictions(dataset, model, VALIDATION, np.asarray(val_probs), {
        "seeds": list(seeds), "fractions": list(fractions), "classes": classes,
        "axes": "seed, fraction, image, class", "rows": "the dataset's validation rows in store order", **head_attrs,
    })
    n_train = np.broadcast_to(np.asarray(sizes, dtype=np.int64), (len(seeds), len(sizes)))  # [S, Fr]
    missing = subsets.classes_missing(table.labels[tr], task, masks, K)  # [S, Fr]
    l2_arr = np.asarray(l2_grid)[best]
    frames = []
    for cond, Xc, Tc, kc, kept in evals:
        probs = predict(Z(Xc), chosen)  # [S, Fr, n, K]
        counted = probs if kept.all() else probs[:, :, kept]
        m = np.asarray(metrics.all_metrics(counted, jnp.asarray(Tc[kept]), jnp.asarray(kc[kept]), task))  # [S, Fr, 5]
        store.write_predictions(dataset, model, cond, np.asarray(probs), {
            "seeds": list(seeds), "fractions": list(fractions), "classes": classes,
            "axes": "seed, fraction, image, class", **head_attrs,
        })
        frame = {
            "encoder": model, "dataset": dataset, "task": task,
            "seed": np.repeat(np.asarray(seeds), len(fractions)),
            "fraction": np.tile(np.asarray(fractions, dtype=np.float64), len(seeds)),
            "condition": cond,
        }
        for i, name in enumerate(metrics.NAMES):
            frame[name] = m[..., i].reshape(-1).astype(np.float64)
        frame.update({
            "l2": l2_arr.reshape(-1), "n_train": n_train.reshape(-1), "n_eval": int(kept.sum()),
            "classes_missing": missing.reshape(-1).astype(np.int64),
            "converged": converged.reshape(-1), "iterations": iters.reshape(-1).astype(np.int64),
        })
        n_rows = len(seeds) * len(fractions)
        frames.append(pl.DataFrame({k: (v if isinstance(v, np.ndarray) else [v] * n_rows) for k, v in frame.items()}))
    records = pl.concat(frames).select(list(COLUMNS)).cast({k: getattr(pl, v[0]) for k, v in COLUMNS.items()})
    path = records_path(results, model, dataset)
    # the whole grid with its validation figures and the choice, one row per (seed, fraction, l2)
    S_, Fr_, L_ = vloss.shape
    grid_rows = pl.DataFrame({
        "encoder": [model] * (S_ * Fr_ * L_), "dataset": [dataset] * (S_ * Fr_ * L_),
        "seed": np.repeat(np.asarray(seeds, np.int64), Fr_ * L_),
        "fraction": np.tile(np.repeat(np.asarray(fractions, np.float64), L_), S_),
        "l2": np.tile(np.asarray(l2_grid, np.float64), S_ * Fr_),
        "val_loss": vloss.reshape(-1).astype(np.float64), "val_auroc": vauroc.reshape(-1).astype(np.float64),
        "chosen": (np.arange(L_)[None, None, :] == best[..., None]).reshape(-1),
        "selected_by": [select_by] * (S_ * Fr_ * L_),
        "converged": np.asarray(fit_converged).reshape(-1),
        "iterations": np.asarray(fit_iterations).reshape(-1).astype(np.int64),
    })
    atomic_write(Path(results) / SELECTION_DIR / path.name, grid_rows.write_parquet)
    atomic_write(path, records.write_parquet)
    return ProbeSummary(
        encoder=model, dataset=dataset, probes=int(np.prod(fit_converged.shape)),
        conditions=len(evals), not_converged=int((~converged).sum()),
        max_iterations=int(iters.max()), seconds=time.perf_counter() - t0, records=str(path),
    )

