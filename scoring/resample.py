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
computes them as a batch (docs/crs-v1.md section 5):

* identical arrays (detected by a hash of their bytes) are computed once;
* the linearised bootstrap (Hoeffding/DeLong placements). With placement values
  ``V10_i`` (share of negatives below positive i, ties one half) and ``V01_j`` (share of
  positives above negative j), the weighted AUROC of multiplicities c is exactly
  ``sum_pos c_i V10_i / P_c + sum_neg c_j V01_j / N_c - AUC + r_c``, where r_c =
  ``delta_pos' R delta_neg / (P_c N_c)`` is the second-order term of the doubly centred
  residual R of the pair kernel (delta = c - 1). Dropping r_c leaves sums linear in c: one
  matrix product for every array, class and replicate of a dataset. r_c is O(1/n) against
  a bootstrap spread of O(1/sqrt(n)), so it is small on large test sets, not on small or
  heavily tied ones. Where no image is a known positive of two classes (multi-class), the
  positive sums of class c run over class c's images only (``_positive_groups``): about
  half the product at k classes, the same sums up to float32 rounding; hence
* a check per array: the exact kernel on the first ``CHECK_DRAWS`` replicates; the
  linear values are kept only where their largest difference from exact there is at
  most ``LINEAR_TOL`` times their bootstrap standard deviation, else (and below
  ``LINEAR_MIN_IMAGES`` test images) every replicate is computed exactly; below
  ``LINEAR_MIN_IMAGES`` every class of an array in one integer pass (``exact_batch``,
  the kernel's values to the bit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from crs.scoring.axes import AxisArrays, axes_from
from crs.scoring.metrics import ece_draws, nanmean_last, tie_runs, weighted_ece, weighted_macro_auroc

# Below this many test images every replicate is exact: there the exact kernel costs little (score_bench
# part 5: 5-7 ms an array at 500-730 images) and the linearisation fails its check on a fifth to
# two fifths of the arrays, so trying it costs more than it saves.
LINEAR_MIN_IMAGES = 1000
CHECK_DRAWS = 16  # replicates each linearised array is checked on against the exact kernel
# Largest |linear - exact| allowed on the check draws, as a share of the array's bootstrap
# sd. The 2.5 % / 97.5 % percentiles of B = 1000 replicates have a Monte Carlo error of
# about 0.085 sd of their own (sqrt(0.025 * 0.975 / B) / phi(1.96)); 0.1 sd on the worst of
# the check draws (a typical replicate is off by about a third of that) keeps the
# approximation under that noise.
LINEAR_TOL = 0.1
METHODS = ("auto", "exact")
_BATCH_COLUMNS = 4096  # matrix-product columns per batch (2 per array and class) ...
_BATCH_VALUES = 2**26  # ... and at most this many [image, column] values (large test sets)


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
    aurocs: Sequence[AurocDraws] | None = None,
) -> np.ndarray:
    """Axis values [replicate, axis] of one (encoder, dataset, seed) under the image draws.

    clean [fraction, image, class]: probabilities at each fraction below 1, then at 1;
    perturbed: [image, class] per perturbed condition at fraction 1, on the test draw;
    shift: [image, class] per shift target at fraction 1, each on its own draw in ``targets``.
    ``aurocs``: an ``AurocDraws`` of the test draw then one per target, holding these
    arrays (``add`` then ``compute`` for many runs at once); without them every AUROC
    is the exact kernel's. The ECE is ``AurocDraws.ece`` with them (``ece_draws``' on a test split of
    at least ``LINEAR_MIN_IMAGES`` images, else ``weighted_ece``'s: the same sums in another order;
    once per distinct array), else ``weighted_ece``'s.
    """
    draws = [test, *targets]

    def auc(p: np.ndarray, i: int = 0) -> np.ndarray:
        if aurocs is None:
            d = draws[i]
            return weighted_macro_auroc(p, d.target, d.known, d.counts)
        return aurocs[i].value(p)

    def stacked(values: list[np.ndarray]) -> np.ndarray | None:
        return np.stack(values, axis=-1) if values else None

    if aurocs is None:
        ece = weighted_ece(clean[-1], test.target, test.known, test.counts, task)
    else:
        ece = aurocs[0].ece(clean[-1], task)
    x = AxisArrays(
        d=auc(clean[-1]),
        ece=ece,
        low_fraction=np.stack([auc(p) for p in clean[:-1]], axis=-1),
        perturbed=stacked([auc(p) for p in perturbed]),
        shift=stacked([auc(p, 1 + t) for t, p in enumerate(shift)]),
    )
    return axes_from(x)


class Sorted(NamedTuple):
    """One probability array sorted per class, what ``placements`` and ``exact_draws`` share."""

    order: np.ndarray  # int [class, sorted position] -> image
    start: np.ndarray  # int [class, sorted position]: first position of its run of tied scores
    end: np.ndarray  # int [class, sorted position]: last position of its run
    pos: np.ndarray  # bool [class, sorted position]: a known positive
    neg: np.ndarray  # bool [class, sorted position]: a known negative
    untied: bool  # no two scores of a class are equal


def sort_classes(probs: np.ndarray, target: np.ndarray, known: np.ndarray) -> Sorted:
    """``Sorted`` of probs [image, class]: one sort per class, vectorised over classes (ties in runs,
    so the order within a run does not matter and the sort need not be stable)."""
    s = np.ascontiguousarray(np.asarray(probs).T)  # [class, image]
    order = np.argsort(s, axis=1)
    ss = np.take_along_axis(s, order, axis=1)
    pos = np.take_along_axis((known & (target == 1)).T, order, axis=1)
    neg = np.take_along_axis((known & (target != 1)).T, order, axis=1)
    start, end, new = tie_runs(ss)
    return Sorted(order, start, end, pos, neg, bool(new.all()))


def _below_plus_half_tied(x: np.ndarray, srt: Sorted) -> np.ndarray:
    """(sum of x before the position's tie run + through its run) / 2 at each sorted position,
    x [..., class, sorted position]. Without ties that is ``cumsum(x) - x / 2``."""
    c = np.cumsum(x, axis=-1)
    if srt.untied:
        return c - x / 2.0
    k, n = srt.start.shape
    flat = c.reshape(*c.shape[:-2], k * n)
    rows = (np.arange(k) * n)[:, None]
    before = np.where(srt.start > 0, flat[..., (np.maximum(srt.start - 1, 0) + rows).ravel()].reshape(c.shape), 0.0)
    return (before + flat[..., (srt.end + rows).ravel()].reshape(c.shape)) / 2.0


def placements(probs: np.ndarray, target: np.ndarray, known: np.ndarray, srt: Sorted | None = None):
    """(AUROC [class], pos [image, class], neg [image, class]) of probs [image, class].

    pos = ``V10 - AUC`` on each known positive (V10: share of known negatives scoring below
    it, ties one half), neg = ``V01 - AUC`` on each known negative (V01: share of known
    positives scoring above it), 0 elsewhere; AUROC = mean V10 (= ``weighted_auroc`` with
    unit weights), NaN for a class without both positives and negatives (its columns 0).
    """
    srt = sort_classes(probs, target, known) if srt is None else srt
    is_pos, is_neg = srt.pos.astype(np.float64), srt.neg.astype(np.float64)
    n_pos, n_neg = is_pos.sum(axis=1), is_neg.sum(axis=1)
    ok = (n_pos > 0) & (n_neg > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        v10 = _below_plus_half_tied(is_neg, srt) / n_neg[:, None]
        v01 = (n_pos[:, None] - _below_plus_half_tied(is_pos, srt)) / n_pos[:, None]
        auc = np.where(ok, (is_pos * v10).sum(axis=1) / n_pos, np.nan)
    centre = np.where(ok, auc, 0.0)[:, None]
    pos_s = np.where(ok[:, None], is_pos * (v10 - centre), 0.0)
    neg_s = np.where(ok[:, None], is_neg * (v01 - centre), 0.0)
    pos, neg = np.empty_like(pos_s), np.empty_like(neg_s)
    np.put_along_axis(pos, srt.order, pos_s, axis=1)
    np.put_along_axis(neg, srt.order, neg_s, axis=1)
    return auc, pos.T, neg.T


def exact_draws(srt: Sorted, counts_t: np.ndarray) -> np.ndarray:
    """Exact AUROC [replicate, class] for integer multiplicities counts_t [replicate, image].

    The formula of ``metrics.weighted_auroc`` on the shared sort: per replicate, the sum
    over positives of its weight times (negative weight before its tie run + through its
    run), halved, over P x N. Only the positives' positions are gathered. Every sum is of
    integers: in counts_t's integer type widened to int32 (int64 from 2^15 images: a
    positive's product is at most 2n^2), or in float64 for float multiplicities, which holds
    integers below 2^53 exactly; the same integers either way, so the same values.
    """
    k, n = srt.order.shape
    counts_t = np.asarray(counts_t)
    c = counts_t[:, srt.order]  # [replicate, class, sorted position]
    if np.issubdtype(c.dtype, np.integer):
        wide = np.int32 if 2 * n * n < 2**31 else np.int64
        cum = np.multiply(c, srt.neg, dtype=wide)  # negatives' multiplicities, the others 0, already wide:
        np.cumsum(cum, axis=-1, out=cum)  # in place (a cumsum that casts as it adds was the slow part)
    else:
        c, wide = c.astype(np.float64, copy=False), np.float64
        cum = np.cumsum(np.where(srt.neg, c, 0), axis=-1, dtype=wide)
    cum = cum.reshape(c.shape[0], k * n)
    at = np.flatnonzero(srt.pos.ravel())  # flat [class, position] index of every known positive
    start, end = srt.start.ravel()[at], srt.end.ravel()[at]
    base = at - at % n
    before = np.where(start > 0, cum[:, base + np.maximum(start - 1, 0)], 0)
    cp = c.reshape(c.shape[0], k * n)[:, at].astype(wide)
    per = cp * (before + cum[:, base + end])  # [replicate, positive]
    onehot = np.zeros((at.size, k))
    onehot[np.arange(at.size), at // n] = 1.0
    num = (per @ onehot) / 2.0
    den = (cp @ onehot) * cum.reshape(c.shape[0], k, n)[:, :, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


_EXACT_BATCH_BYTES = 2**23  # the [class row, image, replicate] block of ``exact_batch``: at most 8 MB


def small_counts(counts: np.ndarray) -> np.ndarray:
    """The multiplicities [image, replicate] as int16 where ``exact_batch``'s sums fit (a replicate's
    multiplicities sum to its image count n, a positive reads two running totals, 2n: below 2^14
    images), else int32. Half the memory traffic of int32."""
    return counts.astype(np.int16 if counts.shape[0] < 2**14 else np.int32)


def exact_batch(sorts: Sequence[Sorted], counts: np.ndarray) -> np.ndarray:
    """Exact macro AUROC [array, replicate] of several arrays' ``Sorted`` under counts [image, replicate].

    ``metrics.weighted_macro_auroc``'s formula, for every class of every array at once: each class's
    multiplicities in its sorted order, ``g [sorted position, class row, replicate]``, negatives kept,
    summed down the positions two contiguous [row, replicate] slabs at a time (as
    ``metrics._cumsum_rows``), then read at each positive's tie run. Every sum is of integers (and one
    halving), exact in float64 below 2^53 and in ``counts``' integer type below its limit
    (``small_counts``), so the values are the kernel's to the bit. Arrays go in blocks of at most
    ``_EXACT_BATCH_BYTES``.
    """
    k, n = sorts[0].order.shape
    b = counts.shape[1]
    per_block = max(1, _EXACT_BATCH_BYTES // (k * n * b * counts.itemsize))
    out = []
    for i in range(0, len(sorts), per_block):
        block = sorts[i:i + per_block]
        per_class = _exact_rows(*(np.concatenate([getattr(srt, f) for srt in block]) for f in
                                  ("order", "start", "end", "pos", "neg")), counts)  # [row, replicate]
        out.append(nanmean_last(per_class.reshape(len(block), k, b).transpose(0, 2, 1)))
    return np.concatenate(out)


def _exact_rows(order, start, end, pos, neg, counts: np.ndarray) -> np.ndarray:
    """AUROC [row, replicate] of class rows given by their sort (``Sorted``'s fields stacked) under counts.

    The multiplicities go position-major, ``g [sorted position, row, replicate]``, so each step of the
    running total of negatives adds two contiguous [row, replicate] slabs. Integer arithmetic until the
    last division: a running total is at most the image count n and a positive's (before + through) at
    most 2n, in ``counts``' type (``small_counts``); a positive's product with its multiplicity, and a
    row's sum of them, at most 2n^2 (the multiplicities sum to n), in int32 below 2^15 images, else int64."""
    r, n = order.shape
    g = counts[order.T]  # [sorted position, row, replicate]
    rows, at = np.nonzero(pos)  # every known positive, row by row
    cp = g[at, rows]  # [positive, replicate]
    g[~neg.T] = 0
    for i in range(1, n):  # running total of negatives down the positions
        np.add(g[i], g[i - 1], out=g[i])
    s, e = start[rows, at], end[rows, at]
    twice = g[e, rows]  # negatives through the positive's tie run, plus those before it:
    twice += np.where((s > 0)[:, None], g[np.maximum(s - 1, 0), rows], 0).astype(g.dtype)
    wide = np.int32 if 2 * n * n < 2**31 else np.int64
    per = np.multiply(cp, twice, dtype=wide)  # [positive, replicate]
    num, p_tot = np.zeros((r, g.shape[2])), np.zeros((r, g.shape[2]))
    bounds = np.searchsorted(rows, np.arange(r + 1))  # each row's positives: one contiguous run of ``rows``
    for j in np.flatnonzero(bounds[1:] > bounds[:-1]):
        num[j] = np.add.reduce(per[bounds[j]:bounds[j + 1]], axis=0)
        p_tot[j] = np.add.reduce(cp[bounds[j]:bounds[j + 1]], axis=0, dtype=wide)
    den = p_tot * g[-1].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (num / 2.0) / np.where(den > 0, den, 1.0), np.nan)


def array_key(probs: np.ndarray) -> tuple:
    """(shape, dtype, a 160-bit hash of the bytes): equal for arrays with the same values and type.

    SHA-1 for speed (about twice blake2b's on CPUs with SHA instructions): it tells apart arrays
    that differ by accident, which is all this needs; nobody crafts probabilities to collide."""
    a = np.ascontiguousarray(probs)
    return a.shape, a.dtype.str, hashlib.sha1(a.view(np.uint8).ravel()).digest()


class AurocDraws:
    """Macro AUROC [replicate] of many probability arrays [image, class] under one ``Draw``.

    ``add`` every array, ``compute`` once, then ``value``; arrays with the same bytes are
    computed once. ``method`` 'auto' linearises where it passes its check (module doc),
    'exact' never does. ``linear``/``exact``/``shared`` count the arrays each way.
    """

    def __init__(self, draw: Draw, method: str = "auto"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {method!r}")
        self.draw, self.method = draw, method
        self._pending: dict[tuple, np.ndarray] = {}
        self._values: dict[tuple, np.ndarray] = {}
        self.linear = self.exact = self.shared = 0
        self._weights = None
        self._counts_t = None
        self._counts_small = None
        self._check = None
        self._groups = None
        self._mt_sorted = None
        self._eces: dict[tuple, np.ndarray] = {}  # (array key, task) -> ECE [replicate]
        self._held: dict[tuple, tuple] = {}  # (address, shape, strides, dtype) -> (key, the array), see ``release``

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
        n = self.draw.counts.shape[0]
        if n < LINEAR_MIN_IMAGES and pending:  # every class of an array in one pass (a block of a few MB)
            values = exact_batch([sort_classes(p, self.draw.target, self.draw.known) for _, p in pending],
                                 self._small_counts())
            for (key, _), v in zip(pending, values, strict=True):
                self._values[key] = v
            self.exact += len(pending)
            return
        if self.method == "exact":  # larger test sets: class by class (one [image, replicate] copy at a time)
            for key, p in pending:
                self._values[key] = self._exact(p)
            return
        columns = min(_BATCH_COLUMNS, _BATCH_VALUES // n)  # a [image, column] float32 block of at most 256 MB
        per_batch = max(1, columns // (2 * self.draw.target.shape[1]))
        for i in range(0, len(pending), per_batch):
            batch = pending[i:i + per_batch]
            sorts = [sort_classes(p, self.draw.target, self.draw.known) for _, p in batch]
            linear = self._linear([p for _, p in batch], sorts)  # [replicate, array]
            for j, (key, p) in enumerate(batch):
                self._values[key] = self._checked(p, sorts[j], linear[:, j])

    def _check_counts(self, m: int) -> np.ndarray:
        """The first m replicates' multiplicities [replicate, image] in ``small_counts``' type, made once."""
        if self._check is None or self._check.shape[0] != m:
            self._check = np.ascontiguousarray(self._small_counts()[:, :m].T)
        return self._check

    def ece(self, probs: np.ndarray, task: str) -> np.ndarray:
        """Top-label ECE [replicate] of probs [image, class] under the draw, once per distinct array: below
        ``LINEAR_MIN_IMAGES`` images ``metrics.weighted_ece`` (the per-bin kernel's bits), else
        ``metrics.ece_draws`` (one matrix product)."""
        key = (self._key(probs), task)
        if key not in self._eces:
            d = self.draw
            if d.counts.shape[0] < LINEAR_MIN_IMAGES:
                self._eces[key] = weighted_ece(probs, d.target, d.known, d.counts, task)
            else:
                self._eces[key] = ece_draws(probs, d.target, d.known, self.counts_t(), task)
        return self._eces[key]

    def counts_t(self) -> np.ndarray:
        """The draw's multiplicities float64 [replicate, image] (for ``metrics.ece_draws``), made once."""
        if self._counts_t is None:
            self._counts_t = np.ascontiguousarray(self.draw.counts.T, dtype=np.float64)
        return self._counts_t

    def _exact(self, probs: np.ndarray) -> np.ndarray:
        d = self.draw
        self.exact += 1
        return weighted_macro_auroc(probs, d.target, d.known, d.counts)

    def _class_weights(self):
        """(multiplicities float32 [replicate, image], positive and negative weight [replicate, class])."""
        if self._weights is None:
            d = self.draw
            mt = np.ascontiguousarray(d.counts.T, dtype=np.float32)
            pos = (d.known & (d.target == 1)).astype(np.float64)
            neg = (d.known & (d.target != 1)).astype(np.float64)
            self._weights = (mt, self.counts_t() @ pos, self.counts_t() @ neg)
        return self._weights

    def _positive_groups(self):
        """(images ordered by their known positive class, class bounds in that order) where no image is a
        known positive of two classes (multi-class), else None. ``placements``' positive part of class c
        is 0 outside class c's positives, so its sums need only their columns of the multiplicities."""
        if self._groups is None:
            d = self.draw
            pos = d.known & (d.target == 1)
            if (pos.sum(axis=1) > 1).any():
                self._groups = (None,)
            else:
                cls = np.where(pos.any(axis=1), pos.argmax(axis=1), pos.shape[1])  # no positive: after the last
                order = np.argsort(cls, kind="stable")
                self._groups = (order, np.searchsorted(cls[order], np.arange(pos.shape[1] + 1)))
        return None if self._groups[0] is None else self._groups

    def _mt_by_class(self) -> np.ndarray:
        """The float32 multiplicities [replicate, image] in ``_positive_groups``' image order, made once."""
        if self._mt_sorted is None:
            self._mt_sorted = np.ascontiguousarray(self._class_weights()[0][:, self._positive_groups()[0]])
        return self._mt_sorted

    def _linear(self, arrays: list[np.ndarray], sorts: list[Sorted]) -> np.ndarray:
        mt, w_pos, w_neg = self._class_weights()
        d = self.draw
        k = d.target.shape[1]
        parts = [placements(p, d.target, d.known, srt) for p, srt in zip(arrays, sorts, strict=True)]
        groups = self._positive_groups()
        if groups is None:  # an image positive in several classes (multi-label): one dense product
            a = np.empty((mt.shape[1], len(arrays), 2, k), dtype=np.float32)
            for j, (_, pos, neg) in enumerate(parts):
                a[:, j, 0], a[:, j, 1] = pos, neg
            s = (mt @ a.reshape(mt.shape[1], -1)).reshape(mt.shape[0], len(arrays), 2, k).astype(np.float64)
        else:  # the positives' sums per class over its own images only: half the matrix product at k classes
            order, bounds = groups
            a = np.empty((mt.shape[1], len(arrays), k), dtype=np.float32)
            for j, (_, _, neg) in enumerate(parts):
                a[:, j] = neg
            s = np.empty((mt.shape[0], len(arrays), 2, k))
            s[:, :, 1] = (mt @ a.reshape(mt.shape[1], -1)).reshape(mt.shape[0], len(arrays), k)
            for c in range(k):
                rows = order[bounds[c]:bounds[c + 1]]
                if rows.size == 0:
                    s[:, :, 0, c] = 0.0
                    continue
                pc = np.empty((rows.size, len(arrays)), dtype=np.float32)
                for j, (_, pos, _) in enumerate(parts):
                    pc[:, j] = pos[rows, c]
                s[:, :, 0, c] = self._mt_by_class()[:, bounds[c]:bounds[c + 1]] @ pc
        auc = np.stack([p[0] for p in parts])  # [array, class]
        with np.errstate(invalid="ignore", divide="ignore"):
            per_class = auc[None] + s[:, :, 0] / w_pos[:, None] + s[:, :, 1] / w_neg[:, None]
        both = (w_pos > 0) & (w_neg > 0)  # [replicate, class]: the class is scored in the replicate
        per_class = np.where(both[:, None] & ~np.isnan(auc)[None], per_class, np.nan)
        return nanmean_last(per_class)  # [replicate, array]

    def _checked(self, probs: np.ndarray, srt: Sorted, linear: np.ndarray) -> np.ndarray:
        m = min(CHECK_DRAWS, linear.size)
        exact = nanmean_last(exact_draws(srt, self._check_counts(m)))
        same_nan = np.array_equal(np.isnan(exact), np.isnan(linear[:m]))
        with np.errstate(invalid="ignore"):
            sd = float(np.nanstd(linear)) if np.isfinite(linear).any() else 0.0
            worst = float(np.nanmax(np.abs(exact - linear[:m]))) if np.isfinite(exact).any() else 0.0
        if same_nan and worst <= LINEAR_TOL * sd:
            self.linear += 1
            return linear
        return self._exact(probs)  # the per-class kernel (row-wise sums over replicates) is faster here

    def summary(self) -> dict:
        """What was computed how: counts of arrays linearised, exact, and shared with an identical one."""
        return {"linear": self.linear, "exact": self.exact, "shared": self.shared}
