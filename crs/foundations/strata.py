"""Strata: the classes a split or a label subset keeps in proportion (numpy only).

One definition for the stages that stratify:

* ``strata``: a row's stratum as a class index -- multi-class, its class; multi-label, the
  rarest finding it is positive for (fewest positive rows; ties: the lower index), ``K``
  (the number of findings) when it has none. The probe's label subsets
  (``crs.probe.subsets``) draw per stratum in increasing index.
* ``rarity_strata``: the same strata numbered by rarity, 0 the rarest (multi-label: ``K``
  for none), so that sorting by it puts rare strata first. The file-based datasets' splits
  (``crs.extract.splits.group_split``) deal groups in that order, a group taking its rows'
  rarest stratum.
* ``finding_set_strata``: the built-in synthetic datasets' group strata, a different rule:
  a group's class, or the exact set of findings any of its images is positive for, ranked.
  It stays a rule of its own because the synthetic datasets' splits are part of what every
  stored demo run is compared against.
"""

from __future__ import annotations

import numpy as np


def by_rarity(counts: np.ndarray) -> np.ndarray:
    """int64 [K]: class indices ordered rarest first (fewest rows; ties: the lower index)."""
    return np.argsort(np.asarray(counts), kind="stable")


def strata(labels: np.ndarray, exclusive: bool) -> np.ndarray:
    """int64 [N]: each row's stratum as a class index. labels [N] class ids (``exclusive``) or
    [N, K] in {1, 0, -1}; multi-label: the rarest positive finding, K for none."""
    labels = np.asarray(labels)
    if exclusive:
        return labels.astype(np.int64)
    pos = labels == 1
    K = labels.shape[1]
    if not K:
        return np.zeros(len(labels), dtype=np.int64)
    order = by_rarity(pos.sum(0))
    rank = _ranks(order)
    rarest = np.where(pos, rank[None, :], K).min(axis=1)  # rank of the rarest positive finding, K = none
    return np.append(order, K).astype(np.int64)[rarest]


def rarity_strata(labels: np.ndarray) -> np.ndarray:
    """int64 [N]: ``strata`` numbered by rarity, 0 the rarest. labels [N] class ids or [N, K] in
    {1, 0, -1} (the kind is read from the shape); multi-label rows without a finding: K."""
    labels = np.asarray(labels)
    exclusive = labels.ndim == 1
    if exclusive:
        counts = np.bincount(labels, minlength=int(labels.max(initial=0)) + 1)
    else:
        counts = (labels == 1).sum(0)
    rank = np.append(_ranks(by_rarity(counts)), len(counts))  # the index K (no finding) keeps rank K
    return rank[strata(labels, exclusive)]


def finding_set_strata(labels: np.ndarray, group_index: np.ndarray, n_groups: int) -> np.ndarray:
    """int64 [G]: a group's stratum, ranked: its class (multi-class labels [N]), or which findings
    it has in any image (multi-label labels [N, K]; ordered as tuples of booleans).
    ``group_index`` int [N]: each row's group."""
    if labels.ndim == 1:
        keys = [0] * n_groups
        for label, g in zip(labels.tolist(), group_index.tolist()):
            keys[g] = label
    else:
        positive = np.zeros((n_groups, labels.shape[1]), dtype=bool)
        np.logical_or.at(positive, group_index, labels == 1)
        keys = [tuple(p) for p in positive.tolist()]
    rank = {key: r for r, key in enumerate(sorted(set(keys)))}
    return np.array([rank[k] for k in keys], dtype=np.int64)


def _ranks(order: np.ndarray) -> np.ndarray:
    """int64 [K]: the inverse permutation of ``order`` (each index's position in it)."""
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank
