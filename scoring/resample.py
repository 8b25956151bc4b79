"""Image-level bootstrap: metrics under resampled test images, every replicate at once.

A replicate draws n test images with replacement; the same draw is used for every
encoder, seed, fraction and condition of a dataset (paired), and a shift target gets its
own draw of its own test images. A draw is a matrix of multiplicities
``counts [image, replicate]`` (how often each image was drawn), and the metrics are the
weighted kernels of ``crs.scoring.metrics`` (``weighted_macro_auroc``, ``weighted_ece``),
which take such a matrix and return one value per replicate.

``run_axes`` turns one run's resampled AUROC and ECE arrays into its axis values
(``crs.scoring.axes.REGISTRY``, docs/crs-v1.md section 1).

At the published benchmark's scale a dataset has thousands of probability arrays (every
encoder, seed, fraction and condition) under the same draw, and the exact kernel costs
one pass over the [image, replicate] multiplicities per class and array. ``AurocDraws``
computes them as a batch (docs/crs-v1.md section 5): identical arrays (detected by a hash
of their bytes) are computed once, and every other one exactly, each class in one compiled
pass down its sorted images (``exact_batch``, ``kernels.auroc_rows``: the kernel's values
to the bit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.scoring import kernels
from crs.scoring.axes import AxisArrays, axes_from
from crs.scoring.calibration import replicate_losses
from crs.scoring.metrics import ece_draws, nanmean_last, weighted_ece, weighted_macro_auroc
from crs.scoring.versions import LATEST, get
from crs.scoring.versions.definition import BINNED_ECE, SQUARED_ERROR

# From this many test images a draw's ECE is one matrix product (``metrics.ece_draws``), below it the
# per-bin kernel (``metrics.weighted_ece``): the same sums in another order.
ECE_PRODUCT_FROM = 1000
_SORT_BLOCK = 64  # arrays sorted at a time by ``AurocDraws.compute`` (their sorts held together)


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


class RunArrays(NamedTuple):
    """The arrays of one (encoder, dataset, seed) that its axes read (``run_axes``)."""

    clean: np.ndarray  # [fraction, image, class]: at each fraction below 1, then at 1
    perturbed: Sequence[np.ndarray]  # [image, class] per perturbed condition at fraction 1, on the test draw
    shift: Sequence[np.ndarray]  # [image, class] per shift target at fraction 1, each on its own draw
    calibration: np.ndarray | None = None  # [image, class]: the probabilities the ECE reads (default clean[-1])


def run_axes(
    run: RunArrays,
    test: Draw,
    targets: Sequence[Draw],
    task: str,
    aurocs: Sequence[AurocDraws] | None = None,
    version: str = LATEST,
) -> np.ndarray:
    """Axis values [replicate, axis] of one (encoder, dataset, seed) under the image draws.

    ``run``'s shift arrays are each on its own draw in ``targets``.
    ``aurocs``: an ``AurocDraws`` of the test draw then one per target, holding these
    arrays (``add`` then ``compute`` for many runs at once); without them every AUROC
    is the exact kernel's. The ECE is ``AurocDraws.ece`` with them (``ece_draws``' on a test split of
    at least ``ECE_PRODUCT_FROM`` images, else ``weighted_ece``'s: the same sums in another order;
    once per distinct array), else ``weighted_ece``'s. The AUROCs only rank, so the arrays may be
    any scores that order like the probabilities (log-probabilities, ``crs.foundations.forms``); the ECE reads
    ``run.calibration``, the probabilities at fraction 1 (default ``run.clean[-1]``). CRS
    ``version`` "2" puts the calibration loss kappa S (``crs.scoring.calibration``, recentred on
    the test set) where v1 has the binned ECE: C is 1 minus it (``calibration_draws``).
    """
    clean = run.clean
    calib = clean[-1] if run.calibration is None else run.calibration
    draws = [test, *targets]

    def auc(p: np.ndarray, i: int = 0) -> np.ndarray:
        if aurocs is None:
            d = draws[i]
            return weighted_macro_auroc(p, d.target, d.known, d.counts)
        return aurocs[i].value(p)

    def stacked(values: list[np.ndarray]) -> np.ndarray | None:
        return np.stack(values, axis=-1) if values else None

    x = AxisArrays(
        d=auc(clean[-1]),
        ece=calibration_draws(get(version).calibration, calib, test, task, aurocs),
        low_fraction=np.stack([auc(p) for p in clean[:-1]], axis=-1),
        perturbed=stacked([auc(p) for p in run.perturbed]),
        shift=stacked([auc(p, 1 + t) for t, p in enumerate(run.shift)]),
    )
    return axes_from(x)


def calibration_draws(calibration, calib: np.ndarray, test: Draw, task: str,
                      aurocs: Sequence[AurocDraws] | None) -> np.ndarray:
    """What C is 1 minus [replicate], by a version's calibration estimator (``versions.Calibration``), of the
    probabilities calib [image, class] under the test draw: the binned ECE (``AurocDraws.ece`` with ``aurocs``,
    else ``weighted_ece``), or the calibration loss kappa S (``AurocDraws.calibration_loss``, else
    ``replicate_losses``)."""
    if calibration == SQUARED_ERROR:
        if aurocs is not None:
            return aurocs[0].calibration_loss(calib, task)
        return replicate_losses(calib, test.target, test.known, np.ascontiguousarray(test.counts.T, dtype=np.float64),
                                task)
    if calibration == BINNED_ECE:
        if aurocs is not None:
            return aurocs[0].ece(calib, task)
        return weighted_ece(calib, test.target, test.known, test.counts, task)
    raise ValueError(f"no replicate estimator for the calibration {calibration.name!r}: add one here")


class Sorted(NamedTuple):
    """One probability array sorted per class (``exact_batch``)."""

    scores: np.ndarray  # [class, image]
    order: np.ndarray  # int [class, sorted position] -> image (ascending score)


def sort_classes(probs: np.ndarray) -> Sorted:
    """``Sorted`` of probs [image, class]: one sort per class, vectorised over classes (the order within a
    run of tied scores does not matter: the kernel reads each run whole, so the sort need not be stable)."""
    s = np.ascontiguousarray(np.asarray(probs).T)  # [class, image]
    return Sorted(s, np.argsort(s, axis=1))


def class_masks(target: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(known positive, known negative) bool [class, image] of a split's targets [image, class]."""
    return np.ascontiguousarray((known & (target == 1)).T), np.ascontiguousarray((known & (target != 1)).T)


def small_counts(counts: np.ndarray) -> np.ndarray:
    """The multiplicities [image, replicate] as int16 where every multiplicity fits (below 2^15 images),
    else int32: half the memory traffic of int32 (``exact_batch``'s compiled pass sums in int64)."""
    return counts.astype(np.int16 if counts.shape[0] < 2**15 else np.int32)


def exact_batch(sorts: Sequence[Sorted], masks: tuple[np.ndarray, np.ndarray], counts: np.ndarray) -> np.ndarray:
    """Exact macro AUROC [array, replicate] of several arrays' ``Sorted`` under counts [image, replicate].

    ``metrics.weighted_macro_auroc``'s formula for every class of every array: each class's running
    total of negative multiplicities down its sorted images, read at each positive's run of tied
    scores, in one compiled pass per array (``kernels.auroc_rows``); ``masks``: ``class_masks`` of
    the split. Every sum is of integers (and one halving), so the values are the kernel's to the bit. Small
    work goes to that numpy kernel itself (``kernels.numpy_takes``): the same values, without numba.
    """
    pos, neg = masks  # [replicate, class] contiguous, as the kernel's stack: the same sum over classes
    # small work: numpy's kernel, the same bits; arrays with NaN scores always take the compiled pass, whose order
    # of NaN runs (sort_classes') numpy's kernel does not share, so that a value never depends on the route
    finite = len(pos) and not any(np.isnan(srt.scores).any() for srt in sorts)
    if finite and kernels.numpy_takes(len(sorts) * pos.size * counts.shape[1]):
        known = (pos | neg).T
        return np.stack([weighted_macro_auroc(srt.scores.T, pos.T, known, counts) for srt in sorts])
    return np.stack([nanmean_last(np.ascontiguousarray(kernels.auroc_rows(srt.scores, srt.order, pos, neg, counts).T))
                     for srt in sorts])


def array_key(probs: np.ndarray) -> tuple:
    """(shape, dtype, a 160-bit hash of the bytes): equal for arrays with the same values and type.

    SHA-1 for speed (about twice blake2b's on CPUs with SHA instructions): it tells apart arrays
    that differ by accident, which is all this needs; nobody crafts probabilities to collide."""
    a = np.ascontiguousarray(probs)
    return a.shape, a.dtype.str, hashlib.sha1(a.view(np.uint8).ravel()).digest()


class AurocDraws:
    """Macro AUROC [replicate] of many probability arrays [image, class] under one ``Draw``.

    ``add`` every array, ``compute`` once, then ``value``; arrays with the same bytes are
    computed once, every other one exactly (``exact_batch``). ``exact``/``shared`` count the
    arrays each way.
    """

    def __init__(self, draw: Draw):
        self.draw = draw
        self._pending: dict[tuple, np.ndarray] = {}
        self._values: dict[tuple, np.ndarray] = {}
        self.exact = self.shared = 0
        self._counts_t = None
        self._counts_small = None
        self._class_masks = None
        self._eces: dict[tuple, np.ndarray] = {}  # (array key, task) -> ECE [replicate]
        self._held: dict[tuple, tuple] = {}  # (address, shape, strides, dtype) -> (key, the array), see ``release``

    def _masks(self) -> tuple[np.ndarray, np.ndarray]:
        if self._class_masks is None:
            self._class_masks = class_masks(self.draw.target, self.draw.known)
        return self._class_masks

    def _small_counts(self) -> np.ndarray:
        if self._counts_small is None:
            self._counts_small = small_counts(self.draw.counts)
        return self._counts_small

    def _key(self, probs: np.ndarray) -> tuple:
        """``array_key``, hashed once per array until ``release``: an array added is looked up again by
        its memory (held here, so the memory cannot be reused for other values in between)."""
        a = np.asarray(probs)
        where = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
        if where not in self._held:
            self._held[where] = (array_key(a), a)
        return self._held[where][0]

    def release(self) -> None:
        """Forget the arrays held since the last release (their values stay, by content)."""
        self._held.clear()

    def add(self, probs: np.ndarray) -> None:
        key = self._key(probs)
        if key in self._values or key in self._pending:
            self.shared += 1
        else:
            self._pending[key] = probs

    def value(self, probs: np.ndarray) -> np.ndarray:
        key = self._key(probs)
        if key not in self._values:
            self._pending.setdefault(key, probs)
            self.compute()
        return self._values[key]

    def compute(self) -> None:
        pending, self._pending = list(self._pending.items()), {}
        for i in range(0, len(pending), _SORT_BLOCK):
            block = pending[i:i + _SORT_BLOCK]
            values = exact_batch([sort_classes(p) for _, p in block], self._masks(), self._small_counts())
            for (key, _), v in zip(block, values, strict=True):
                self._values[key] = v
        self.exact += len(pending)

    def ece(self, probs: np.ndarray, task: str) -> np.ndarray:
        """Top-label ECE [replicate] of probs [image, class] under the draw, once per distinct array: below
        ``ECE_PRODUCT_FROM`` images ``metrics.weighted_ece`` (the per-bin kernel's bits), else
        ``metrics.ece_draws`` (one matrix product)."""
        key = (self._key(probs), task)
        if key not in self._eces:
            d = self.draw
            if d.counts.shape[0] < ECE_PRODUCT_FROM:
                self._eces[key] = weighted_ece(probs, d.target, d.known, d.counts, task)
            else:
                self._eces[key] = ece_draws(probs, d.target, d.known, self.counts_t(), task)
        return self._eces[key]

    def calibration_loss(self, probs: np.ndarray, task: str) -> np.ndarray:
        """CRS v2's calibration loss [replicate] of probs [image, class] under the draw
        (``calibration.replicate_losses``), once per distinct array."""
        key = (self._key(probs), task, "v2")
        if key not in self._eces:
            d = self.draw
            self._eces[key] = replicate_losses(probs, d.target, d.known, self.counts_t(), task)
        return self._eces[key]

    def counts_t(self) -> np.ndarray:
        """The draw's multiplicities float64 [replicate, image] (for ``metrics.ece_draws``), made once."""
        if self._counts_t is None:
            self._counts_t = np.ascontiguousarray(self.draw.counts.T, dtype=np.float64)
        return self._counts_t

    def summary(self) -> dict:
        """What was computed how: counts of arrays computed exactly and shared with an identical one."""
        return {"exact": self.exact, "shared": self.shared}
