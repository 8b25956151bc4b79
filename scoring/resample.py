"""Image-level bootstrap: metrics under resampled test images, every replicate at once.

A replicate draws n test images with replacement; the same draw is used for every
encoder, seed, fraction and condition of a dataset (paired), and a shift target gets its
own draw of its own test images. A draw is a matrix of multiplicities
``counts [image, replicate]`` (how often each image was drawn), and the metrics are the
weighted kernels of ``crs.scoring.metrics`` (``weighted_macro_auroc``, ``weighted_ece``),
which take such a matrix and return one value per replicate.

``run_axes`` turns one run's resampled AUROC and ECE arrays into its axis values
(``crs.scoring.axes.REGISTRY``, docs/crs-v1.md section 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.scoring.axes import AxisArrays, axes_from
from crs.scoring.metrics import weighted_ece, weighted_macro_auroc



def image_counts(n_images: int, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities int32 [image, replicate]: n_images draws with replacement per replicate.

    Images are the leading axis so that reordering images (one sort per probe) moves
    whole contiguous rows and cumulative sums run down the rows, vectorised over replicates.
    """
    if n_images < 1 or n_bootstrap < 1:
        raise ValueError(f"need at least one image and one replicate, got {n_images} and {n_bootstrap}")
    draw = rng.integers(0, n_images, size=(n_bootstrap, n_images))
    offsets = draw + n_images * np.arange(n_bootstrap)[:, None]
    counts = np.bincount(offsets.ravel(), minlength=n_bootstrap * n_images)
    return np.ascontiguousarray(counts.reshape(n_bootstrap, n_images).T.astype(np.int32))


class Draw(NamedTuple):
    """One split's images under the bootstrap: targets and the draw's multiplicities."""

    target: np.ndarray  # int8 [image, class]
    known: np.ndarray  # bool [image, class]
    counts: np.ndarray  # [image, replicate]


def run_axes(
    clean: np.ndarray,
    perturbed: Sequence[np.ndarray],
    shift: Sequence[np.ndarray],
    test: Draw,
    targets: Sequence[Draw],
    task: str,
) -> np.ndarray:
    """Axis values [replicate, axis] of one (encoder, dataset, seed) under the image draws.

    clean [fraction, image, class]: probabilities at each fraction below 1, then at 1;
    perturbed: [image, class] per perturbed condition at fraction 1, on the test draw;
    shift: [image, class] per shift target at fraction 1, each on its own draw in ``targets``.
    """

    def auc(p: np.ndarray, draw: Draw = test) -> np.ndarray:
        return weighted_macro_auroc(p, draw.target, draw.known, draw.counts)

    def stacked(values: list[np.ndarray]) -> np.ndarray | None:
        return np.stack(values, axis=-1) if values else None

    x = AxisArrays(
        d=auc(clean[-1]),
        ece=weighted_ece(clean[-1], test.target, test.known, test.counts, task),
        low_fraction=np.stack([auc(p) for p in clean[:-1]], axis=-1),
        perturbed=stacked([auc(p) for p in perturbed]),
        shift=stacked([auc(p, t) for p, t in zip(shift, targets, strict=True)]),
    )
    return axes_from(x)
