"""Deterministic, group-aware, stratified train/val/test splits (numpy only).

Both rules deal whole groups (lesions, patients) to the splits, so a group never
straddles two of them, and both deal them in the same order (``stratified_order``):
shuffled with the seed, then stably sorted by stratum, so every stratum is a contiguous
run of the deal and is itself split close to 70/10/20. They differ in how a group's turn
in that order becomes a split:

* ``group_split`` (the real and ``csv:`` datasets, up to ~400,000 rows): groups are first
  sorted by id (the result does not depend on the CSV's row order); each group's midpoint
  in the running count of images falls at a phase ``(position / 10 + offset) mod 1`` and
  the phase picks the split: [0, 0.7) train, [0.7, 0.8) val, [0.8, 1) test for the
  default 70/10/20. Each run of ten consecutive images holds the split shares exactly.
  Strata: the group's rarest row stratum (``crs.foundations.strata.rarity_strata``: multiclass, its
  class; multilabel, the rarest finding the row is positive for, or none). Vectorised: no
  Python loop over rows or groups.
* ``deal_split`` (the built-in synthetic datasets, at most a few thousand groups): each
  group goes to the split furthest below its target share of the images dealt so far.
  Strata are given by the caller (crs.extract.synthetic: ``crs.foundations.strata.finding_set_strata``,
  the group's class, or the exact set of findings it is positive for). It stays a second
  rule because the synthetic datasets' splits are part of what every stored demo run is
  compared against; the phase rule, its strata or its random stream would move them.
"""

from __future__ import annotations

import numpy as np

from crs.foundations.strata import rarity_strata

FRACTIONS = (0.7, 0.1, 0.2)  # train, val, test (crs.foundations.names.SPLITS)


def group_split(groups: np.ndarray, labels: np.ndarray, seed: int,
                fractions: tuple[float, float, float] = FRACTIONS) -> np.ndarray:
    """int8 [N]: 0 train, 1 val, 2 test for each row; see the module docstring."""
    groups = np.asarray(groups).astype(str)
    n = len(groups)
    if n == 0:
        return np.zeros(0, dtype=np.int8)
    fr = _fractions(fractions)
    uniq, inverse = np.unique(groups, return_inverse=True)  # sorted ids: independent of row order
    G = len(uniq)
    sizes = np.bincount(inverse, minlength=G)
    stratum = np.full(G, np.iinfo(np.int64).max)
    np.minimum.at(stratum, inverse, rarity_strata(labels))  # the group's rarest stratum

    rng = np.random.default_rng(np.random.SeedSequence([0x5EED, int(seed)]))
    order = stratified_order(stratum, rng)
    mid = np.cumsum(sizes[order]) - sizes[order] / 2.0  # each group's midpoint in images dealt
    period = 1.0 / fr[fr > 0].min()
    phase = (mid / period + rng.random()) % 1.0
    bounds = np.cumsum(fr)[:2]
    split_of_group = np.empty(G, dtype=np.int8)
    split_of_group[order] = np.searchsorted(bounds, phase, side="right").astype(np.int8)
    return split_of_group[inverse]


def deal_split(stratum: np.ndarray, sizes: np.ndarray, rng: np.random.Generator,
               fractions: tuple[float, float, float] = FRACTIONS) -> np.ndarray:
    """int8 [G]: each group's split, dealing groups in ``stratified_order`` to the split
    furthest below its share of the images dealt so far. stratum int [G], sizes int [G]
    (images a group); the running deficit keeps the totals close where strata are small."""
    fr = _fractions(fractions)
    split = np.empty(len(sizes), dtype=np.int8)
    dealt, total = np.zeros(3), 0
    for g in stratified_order(stratum, rng).tolist():
        total += sizes[g]
        s = int(np.argmax(fr * total - dealt))
        split[g] = s
        dealt[s] += sizes[g]
    return split


def stratified_order(stratum: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 [G]: the order groups are dealt in: a seeded shuffle, then stably by stratum."""
    perm = rng.permutation(len(stratum))
    return perm[np.argsort(np.asarray(stratum)[perm], kind="stable")]


def _fractions(fractions) -> np.ndarray:
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.shape != (3,) or (fr < 0).any() or not np.isclose(fr.sum(), 1.0):
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, not {fractions!r}")
    return fr
