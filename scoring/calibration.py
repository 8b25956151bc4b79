"""CRS v2's calibration error: the debiased L2 binned estimator of Kumar, Liang and Ma (2019).

"Verified uncertainty calibration" (NeurIPS 2019), reference code ``uncertainty-calibration``
(``calibration.lower_bound_scaling_ce(probs, labels, p=2, debias=True, num_bins=15,
mode='top-label')``), which tests/scoring/test_calibration_v2.py checks these functions against.
docs/crs-v2.md section 1 says why C rests on it. For top-label confidences c_i and hits h_i
(1 where the predicted class is the true one):

* bins hold equal numbers of images (``equal_mass_edges``: the reference's ``get_equal_bins``):
  the sorted confidences are cut into 15 near-equal parts and each inner edge is the midpoint
  between one part's last value and the next part's first; an image falls in the first bin
  whose edge is >= its confidence;
* per bin b with n_b >= 2 images, the squared gap less its sampling variance,

      t_b = (mean_b c - mean_b h)^2 - mean_b h (1 - mean_b h) / (n_b - 1)

  and t_b = 0 with fewer than 2 images; the squared error is S = sum_b (n_b / n) t_b, an
  unbiased estimate of the binned population's sum_b P(b) gap_b^2 (it may be negative);
* the calibration error is CE = sqrt(max(S, 0)) (what the authors' code returns), and CRS v2's C is
  1 - kappa S (``point_loss``: the loss kappa S, kappa = ``CALIBRATION_LOSS_SCALE``), linear in S so that
  its estimate is unbiased even for a perfectly calibrated probe, where no estimate of the root can be
  (docs/crs-v2.md section 1).

Multi-label tasks score each label as a binary problem (confidence max(p, 1 - p), predicted
positive when p > 0.5, the reference's argmax over [1 - p, p]; known entries only) and average
S over the labels before the square root.

**The bootstrap.** A replicate draws images from the test set, whose own binned squared gap
is the plug-in P = sum_b (n_b / n) (mean_b c - mean_b h)^2, not S: the debiased estimate of a
replicate is unbiased for P, and it spreads as S would around a population whose gaps are the test
set's g_b. Those carry their own sampling noise (E g_b^2 = gap_b^2 + v_b, v_b the bin's sampling
variance), so the spread's linear part 4 sum_b w_b^2 v_b g_b^2 (w_b = n_b / n) is too large by
4 sum_b w_b^2 v_b^2: near perfect calibration, where S is dominated by its quadratic part, the
replicates spread 1.6-1.7 times as much as S does between test sets, and the interval covered C
0.995-0.998 of the time. So the replicates are drawn around gaps shrunk by one factor lam,
lam^2 = max(sum_b w_b^2 v_b t_b, 0) / sum_b w_b^2 v_b g_b^2 with t_b = g_b^2 - v_b, which makes the
linear part an unbiased estimate of the population's wherever the max does not bind (one factor
over the bins, since a per-bin max(t_b, 0) is biased up where the gaps are small), and each
replicate's S* is moved by S - lam^2 sum_b w_b g_b^2, its expectation in that population, so the
replicates spread around S (``replicate_squared_errors``; docs/crs-v2.md section 1 measures it).
"""

from __future__ import annotations

import numpy as np

from crs.foundations.labels import check_task

N_BINS = 15
CALIBRATION_LOSS_SCALE = 10.0  # kappa: C = 1 - kappa CE^2: 0.99 at CE 0.03, 0.9 at CE 0.1, 0 at CE 0.316


def equal_mass_edges(conf: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Upper bin edges, ascending and distinct, the last 1.0 (the reference's ``get_equal_bins``)."""
    s = np.sort(np.asarray(conf, dtype=np.float64))
    k = min(n_bins, s.size)
    if k == 0:
        return np.ones(1)
    parts = np.array_split(s, k)
    inner = [(parts[i][-1] + parts[i + 1][0]) / 2.0 for i in range(k - 1)]
    return np.unique(np.asarray([*inner, 1.0]))


def bins_of(conf: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bin of each confidence: the first edge >= it (``np.searchsorted`` left, as the reference)."""
    return np.minimum(np.searchsorted(edges, conf), edges.size - 1)


def _bin_means(conf: np.ndarray, hit: np.ndarray, counts_t: np.ndarray, edges: np.ndarray):
    """(n_b, mean_b conf - mean_b hit, mean_b hit) [replicate, bin] under each replicate's multiplicities
    counts_t [replicate, image]; one matrix product gives every replicate's per-bin sums."""
    n_bins = edges.size
    b = bins_of(conf, edges)
    a = np.zeros((conf.size, 3 * n_bins))  # per bin: images, their confidences, their hits
    rows = np.arange(conf.size)
    a[rows, b] = 1.0
    a[rows, n_bins + b] = conf
    a[rows, 2 * n_bins + b] = hit
    s = counts_t @ a  # [replicate, 3 bins]
    n_b, conf_b, hit_b = s[:, :n_bins], s[:, n_bins:2 * n_bins], s[:, 2 * n_bins:]
    with np.errstate(invalid="ignore", divide="ignore"):
        return n_b, conf_b / n_b - hit_b / n_b, hit_b / n_b


def _debiased(n_b: np.ndarray, gap: np.ndarray, mean_h: np.ndarray) -> np.ndarray:
    """(S [replicate], t_b [replicate, bin]): S = sum_b (n_b / n) t_b with t_b = gap_b^2 - h (1 - h) / (n_b - 1)
    (0 below 2 images); NaN where a replicate holds no image."""
    total = n_b.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        term = np.where(n_b >= 2, np.where(n_b > 0, gap, 0.0) ** 2 - mean_h * (1.0 - mean_h) / (n_b - 1.0), 0.0)
        return np.where(total > 0, (n_b / total[:, None] * term).sum(axis=1), np.nan), term


def squared_error(conf: np.ndarray, hit: np.ndarray, counts_t: np.ndarray, edges: np.ndarray):
    """(S, P) [replicate]: the debiased squared calibration error and its plug-in, per replicate.

    conf, hit [image]; counts_t [replicate, image] float64 multiplicities (0 leaves an image out);
    bins from ``edges``. NaN where a replicate holds no image.
    """
    n_b, gap, mean_h = _bin_means(conf, hit, counts_t, edges)
    s, _ = _debiased(n_b, gap, mean_h)
    total = n_b.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        plug_in = (n_b / total[:, None] * np.where(n_b > 0, gap, 0.0) ** 2).sum(axis=1)
    return s, np.where(total > 0, plug_in, np.nan)


def replicate_squared_errors(conf: np.ndarray, hit: np.ndarray, full: np.ndarray, counts_t: np.ndarray,
                             edges: np.ndarray) -> np.ndarray:
    """S [replicate] drawn from a test set whose bin gaps are shrunk by a common factor (the module docstring).

    full [1, image]: the test set's multiplicities (its known images); counts_t [replicate, image]. Each
    replicate's gap in bin b is moved from around the test set's gap g_b to around lam g_b, with
    lam^2 = max(sum_b w_b^2 v_b t_b, 0) / sum_b w_b^2 v_b g_b^2 (w_b = n_b / n, v_b the bin's sampling variance,
    t_b its debiased squared gap), and the replicates are moved by S - lam^2 sum_b w_b g_b^2."""
    n_f, gap_f, h_f = _bin_means(conf, hit, full, edges)
    s_full, t_full = _debiased(n_f, gap_f, h_f)
    seen = n_f >= 2
    w = n_f / n_f.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(seen, h_f * (1.0 - h_f) / (n_f - 1.0), 0.0)
        g2 = np.where(seen, gap_f, 0.0) ** 2
        linear = (w**2 * v * g2).sum()
        lam2 = max(float((w**2 * v * t_full).sum()), 0.0) / linear if linear > 0 else 0.0
    centre = np.where(n_f > 0, gap_f, 0.0)
    n_b, gap, mean_h = _bin_means(conf, hit, counts_t, edges)
    s_rep, _ = _debiased(n_b, gap - centre + np.sqrt(lam2) * centre, mean_h)
    return s_rep + (s_full - lam2 * float((w * centre**2).sum()))


def _views(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str):
    """(conf, hit, known) per binary view: one for a multi-class task (top label), one per label otherwise."""
    p = np.asarray(probs, dtype=np.float64)
    if check_task(task).exclusive:
        hit = (p.argmax(axis=1) == np.asarray(target).argmax(axis=1)).astype(np.float64)
        return [(p.max(axis=1), hit, np.ones(p.shape[0], bool))]
    out = []
    for k in range(p.shape[1]):
        pk = p[:, k]
        hit = ((pk > 0.5) == (np.asarray(target)[:, k] == 1)).astype(np.float64)
        out.append((np.maximum(pk, 1.0 - pk), hit, np.asarray(known)[:, k].astype(bool)))
    return out


def squared_errors(probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts_t: np.ndarray | None,
                   task: str, recentre: bool) -> tuple[np.ndarray, np.ndarray]:
    """(S of the full test set [1], S per replicate [replicate]) averaged over the task's views.

    ``counts_t`` [replicate, image] (None: no replicates, an empty second array). With ``recentre``
    each replicate's S is moved by the full set's S - P (the module docstring says why).
    """
    point, reps = [], []
    for conf, hit, kn in _views(probs, target, known, task):
        if not kn.any():
            continue
        edges = equal_mass_edges(conf[kn])
        s_full, _ = squared_error(conf, hit, kn[None, :].astype(np.float64), edges)
        point.append(s_full)
        if counts_t is not None:
            if recentre:
                reps.append(replicate_squared_errors(conf, hit, kn[None, :].astype(np.float64),
                                                     counts_t * kn[None, :], edges))
            else:
                reps.append(squared_error(conf, hit, counts_t * kn[None, :], edges)[0])
    if not point:
        return np.full(1, np.nan), np.full(0 if counts_t is None else counts_t.shape[0], np.nan)
    return np.mean(point, axis=0), (np.mean(reps, axis=0) if reps else np.zeros(0))


def calibration_error(sq: np.ndarray) -> np.ndarray:
    """CE = sqrt(max(S, 0)) of squared errors S (NaN stays NaN)."""
    return np.sqrt(np.maximum(sq, 0.0))


def point_error(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str) -> float:
    """CE = sqrt(max(S, 0)) of one probe's test probabilities [image, class], as the authors' code returns it."""
    return float(calibration_error(squared_errors(probs, target, known, None, task, False)[0])[0])


def replicate_errors(probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts_t: np.ndarray,
                     task: str) -> np.ndarray:
    """CE [replicate] under the image draw ``counts_t`` [replicate, image], recentred on the full set."""
    return calibration_error(squared_errors(probs, target, known, counts_t, task, True)[1])


def point_loss(probs: np.ndarray, target: np.ndarray, known: np.ndarray, task: str) -> float:
    """kappa S of one probe's test probabilities [image, class]: what CRS v2's C = 1 - kappa S reads."""
    return float(CALIBRATION_LOSS_SCALE * squared_errors(probs, target, known, None, task, False)[0][0])


def replicate_losses(probs: np.ndarray, target: np.ndarray, known: np.ndarray, counts_t: np.ndarray,
                     task: str) -> np.ndarray:
    """kappa S [replicate] under the image draw ``counts_t`` [replicate, image], recentred on the full set."""
    return CALIBRATION_LOSS_SCALE * squared_errors(probs, target, known, counts_t, task, True)[1]
