"""Nested, stratified label subsets of the training split (numpy; drawn once per seed).

Per seed, the training images are put in one order, and the subset for fraction ``f``
is the first ``ceil(f * n)`` images of it. Subsets are therefore nested (the 1 %
subset lies inside the 2 % one, and so on). The order interleaves the strata in
proportion: an image's key is its random rank within its stratum divided by the
stratum's size, so any prefix holds every stratum in about its share, and the first
image of every stratum comes before any second one (a subset with at least as many
images as strata holds each of them).

Strata: the class (multiclass); for multilabel, the rarest label the image is
positive for, or "no finding".
"""

from __future__ import annotations

import math

import numpy as np

from crs.foundations.labels import check_task
from crs.foundations.strata import strata as _strata


def strata(labels: np.ndarray, task: str) -> np.ndarray:
    """labels [n] (multiclass) or [n, K] in {1, 0, -1} -> stratum id [n] (``crs.foundations.strata.strata``)."""
    return _strata(labels, check_task(task).exclusive)


def ordering(stratum: np.ndarray, seed: int) -> np.ndarray:
    """A stratified random order of the rows [n] for one seed."""
    rng = np.random.default_rng(np.random.SeedSequence([20240601, seed]))
    n = len(stratum)
    key = np.empty(n)
    for s in np.unique(stratum):
        rows = np.flatnonzero(stratum == s)
        rank = rng.permutation(len(rows))
        key[rows] = rank / len(rows)
    tiebreak = rng.random(n)
    return np.lexsort((tiebreak, key))


def subset_size(fraction: float, n: int) -> int:
    if not 0 < fraction <= 1:
        raise ValueError(f"label fractions must lie in (0, 1], not {fraction!r}")
    return max(1, min(n, math.ceil(fraction * n - 1e-9)))


def orders(labels: np.ndarray, task: str, seeds: list[int]) -> np.ndarray:
    """Each seed's stratified order of the training rows [seed, n]."""
    st = strata(labels, task)
    return np.stack([ordering(st, seed) for seed in seeds])


def sizes(fractions: list[float], n: int) -> tuple[int, ...]:
    return tuple(subset_size(f, n) for f in fractions)


def masks_from(order: np.ndarray, sizes_: tuple[int, ...]) -> np.ndarray:
    """0/1 masks [seed, fraction, n]: the first ``sizes_[j]`` rows of each seed's order."""
    S, n = order.shape
    out = np.zeros((S, len(sizes_), n), dtype=np.float32)
    for j, m in enumerate(sizes_):
        np.put_along_axis(out[:, j], order[:, :m], 1.0, axis=1)
    return out


def subset_masks(labels: np.ndarray, task: str, seeds: list[int], fractions: list[float]) -> np.ndarray:
    """0/1 masks [seed, fraction, n] over the training rows; nested across fractions."""
    return masks_from(orders(labels, task, seeds), sizes(fractions, len(labels)))


def classes_missing(labels: np.ndarray, task: str, mask: np.ndarray, n_classes: int) -> np.ndarray:
    """Number of classes (labels) with no positive example inside each subset; mask [..., n]."""
    if check_task(task).exclusive:
        onehot = np.eye(n_classes, dtype=np.float32)[labels]  # [n, K]
    else:
        onehot = (np.asarray(labels) == 1).astype(np.float32)
    present = np.einsum("...n,nk->...k", mask, onehot) > 0
    return (~present).sum(-1)
