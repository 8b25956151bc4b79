"""Image-level bootstrap: metrics under resampled test images, every replicate at once.

A replicate draws n test images with replacement; the same draw is used for every
encoder, seed, fraction and condition of a dataset (paired), and a shift target gets its
own draw of its own test images. A draw is a matrix of multiplicities
``counts [image, replicate]`` (how often each image was drawn), and the metrics are the
weighted kernels of ``crs.scoring.metrics`` (``weighted_macro_auroc``, ``weighted_ece``),
which take such a matrix and return one value per replicate.

Axis values then follow docs/crs-v1.md section 1 from the resampled AUROC and ECE arrays.
"""

from __future__ import annotations

import numpy as np



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


def retain(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """clip((a - 0.5) / (D - 0.5), 0, 1), and 0 where D <= 0.5 (docs/crs-v1.md section 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip((a - 0.5) / (d - 0.5), 0.0, 1.0)
    return np.where(d > 0.5, r, 0.0)


def axes_from(
    d: np.ndarray,
    ece: np.ndarray,
    low_fraction: np.ndarray,
    perturbed: np.ndarray | None,
    shift: np.ndarray | None,
) -> np.ndarray:
    """The four axis values [..., 4] (docs/crs-v1.md section 1) from AUROC and ECE arrays.

    d, ece [...]: clean AUROC and ECE at fraction 1; low_fraction [..., f]: clean AUROC at
    each fraction below 1; perturbed [..., c] at fraction 1 (None if none); shift [..., t]
    the AUROC on each shift target at fraction 1 (None if none). R = (P + S) / 2 with
    both, else whichever exists; S is the mean retention over the shift targets.
    """
    dd = d[..., None]
    label_eff = retain(low_fraction, dd).mean(axis=-1)
    parts = []
    if perturbed is not None and perturbed.shape[-1]:
        parts.append(retain(perturbed, dd).mean(axis=-1))
    if shift is not None and shift.shape[-1]:
        parts.append(retain(shift, dd).mean(axis=-1))
    if not parts:
        raise ValueError("robustness needs at least one perturbed or shift condition")
    robustness = sum(parts) / len(parts)
    return np.stack([d, 1.0 - ece, label_eff, robustness], axis=-1)
