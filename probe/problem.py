"""What every probe fit reads: the training rows, their targets and each seed's label subsets."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TrainingSet(NamedTuple):
    """One fit problem: every seed, label fraction and penalty of one (encoder, dataset).

    As it reaches ``crs.probe.core.fit`` and ``crs.probe.mlp.fit``; the heads pass numpy
    float32 arrays (each ``jnp.asarray`` of a new shape compiles a small program).
    """

    X: np.ndarray  # [n, F] standardised training features
    T: np.ndarray  # [n, K] targets in {0, 1}
    known: np.ndarray  # [n, K] 1 where the label is known
    order: np.ndarray  # [S, n] each seed's subset order of the rows
    sizes: tuple[int, ...]  # subset size of each fraction, increasing
    grid: object  # the penalty grid [L] (L2, or the MLP's weight decay): a tuple or an array
    task: str  # crs.foundations.labels.Task (a str enum) or its value
    seeds: tuple[int, ...] = ()  # [S] the integer seeds (they key the MLP's initialisation)
