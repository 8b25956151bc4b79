"""What a probe run reads from the store: one pair's splits, targets and embeddings, checked.

Nothing non-finite is used: embeddings are checked as read, so damaged inputs never
overwrite good results; images extract could not decode never train or choose a probe.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.conditions import CLEAN, shift
from crs.foundations.labels import targets
from crs.foundations.names import SPLIT_CODE
from crs.probe import subsets
from crs.probe.problem import TrainingSet
from crs.probe.standardise import feature_scales, live_features
from crs.store import Store, StoreError


def float_targets(labels: np.ndarray, task: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``crs.foundations.labels.targets`` in the probe's dtype: targets T [n, K] and known-mask [n, K], float32."""
    T, known = targets(labels, task, n_classes)
    return T.astype(np.float32), known.astype(np.float32)


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


def _extract(store: Store, encoder: str, dataset: str) -> str:
    """`crs extract` of one pair into ``store``, quoted for a shell."""
    return f"`{shlex.join(['crs', 'extract', '--encoder', encoder, '--dataset', dataset, '--store', store.path])}`"


def finite_embeddings(X: np.ndarray, store: Store, encoder: str, dataset: str, condition: str) -> np.ndarray:
    """X as read, or a StoreError naming the array and the extraction that rewrites it."""
    bad = ~np.isfinite(X).all(axis=tuple(range(1, X.ndim)))
    if bad.any():
        raise StoreError(
            f"the {condition} embeddings of {encoder} on {dataset} in {store.path!r} hold non-finite values in "
            f"{int(bad.sum())} rows (first row {int(np.flatnonzero(bad)[0])}): the array is damaged; check it with "
            f"`{shlex.join(['crs', 'store', 'verify', '--repair', store.path])}` or delete it and run "
            f"{_extract(store, encoder, dataset)}")
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
                         f"{_extract(store, encoder, dataset)}")
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
    for _d, _enc, cond, _ in store.embeddings(dataset, encoder):
        if cond != CLEAN:
            X = finite_embeddings(store.read_embedding(dataset, encoder, cond), store, encoder, dataset, cond)
            out.append(EvalSet(cond, X, T, known, keep))
    table = store.dataset(dataset)
    target = table.attrs.get("shift_target")
    if target:
        if not store.has_dataset(target):
            raise StoreError(
                f"{dataset!r} names {target!r} as its shift target, which is not in the store; run "
                f"{_extract(store, encoder, target)}"
            )
        tt = store.dataset(target)
        if tt.classes != table.classes or tt.task != table.task:
            raise StoreError(f"shift target {target!r} has other classes or task than {dataset!r}")
        Xs = finite_embeddings(store.read_embedding(target, encoder, CLEAN), store, encoder, target, CLEAN)
        Ts, ks = checked_targets(tt, store)
        rows = tt.rows("test")
        out.append(EvalSet(shift(target), Xs[rows], Ts[rows], ks[rows], ~np.isin(rows, store.excluded_rows(target))))
    return out


def training_rows(store: Store, dataset: str) -> int:
    """The training rows a pair's probes fit: the training split less the failed images."""
    return len(np.setdiff1d(store.dataset(dataset).rows("train"), store.excluded_rows(dataset)))


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


def training_set(split: Split, table, seeds, fractions, grid, dataset) -> tuple[TrainingSet, pl.DataFrame]:
    """The standardised training rows and each seed's nested label subsets, with the subsets' table."""
    tr = split.train
    order = subsets.orders(table.labels[tr], table.task, list(seeds))  # [S, n_tr]
    sizes = subsets.sizes(list(fractions), len(tr))
    drawn = subsets_frame(dataset, table.ids[tr], order, sizes, fractions, seeds)
    return TrainingSet(split.z(split.X[tr]), split.T[tr], split.known[tr], order, sizes, grid, table.task,
                       tuple(seeds)), drawn
