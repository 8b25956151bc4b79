"""Coverage of the 95 % bootstrap intervals of each unit (seed, image, both) on simulated
benchmarks whose true CRS and axes are known exactly (issue 16, item 1).

The simulated benchmark is shaped like the real one: several encoders close together, 5
seeds, datasets whose test sets run from a few hundred to tens of thousands of images, label
fractions below 1 (the L axis), perturbed conditions and a shift target (R), and
probabilities whose calibration differs between encoders (C). Every dataset is a binary
task (one label; the multi-label path of ``weighted_ece``).

Generative model, per dataset (binormal, equal variance, so every population AUROC is exact):

    y_i ~ Bernoulli(prevalence)
    score of encoder e, condition c, seed s on image i:
        delta_{e,c,s} y_i + sqrt(rho) z_i + sqrt(lam) eps_{e,i} + sqrt(1 - rho - lam) eta_{e,c,s,i}
    z: shared by every encoder (what pairing removes); eps: the encoder's own, shared by its
    conditions; eta: the condition's (and, below fraction 1, the seed's) own; all N(0, 1).
    Population AUROC = Phi(delta / sqrt(2)) (each class has unit variance).
    Fraction 1: every seed fits the same probe (as a linear probe does in crs), so D, C, R
    do not depend on the seed. Fraction f < 1, seed s: delta = delta_e h_{e,f} + sd_L u_{e,f,s},
    u = sqrt(kappa) v_{f,s} + sqrt(1 - kappa) w_{e,f,s} (one label subset per seed, the same
    for every encoder), and eta drawn afresh per seed.
    Probability: sigmoid(gamma_e * logLR(score) + beta_e), logLR the true log likelihood ratio
    plus the log prior odds, so gamma = 1, beta = 0 is perfectly calibrated.

The truth, per (encoder, dataset, axis), is the population value with infinitely many seeds:
D = Phi(delta/sqrt 2); C = 1 - the population 15-bin ECE (an integral over the score,
computed with crs's own ``binned_ece`` on a fine grid weighted by the score density); L =
E_u[mean_f retain(Phi(delta_{f}(u)/sqrt 2), D)] by Gauss-Hermite quadrature over the seed
effect; R from the population AUROCs of the perturbed and shift conditions. The true CRS is
``crs.scoring.crs.score`` of those values (median reference, equal weights), so the true CRS
difference between two encoders is exact too.

Each replication draws a fresh benchmark (test images, and the seed effects), computes the
point axes per seed and the image-bootstrap axes with ``crs.scoring.resample.image_counts``,
``crs.scoring.metrics.weighted_macro_auroc`` / ``weighted_ece`` and
``crs.scoring.axes.axes_from``, then forms each unit's replicates exactly as
``crs.scoring.replicates.bootstrap_means`` does (seed: ``seed_weights`` over the point axes;
image: ``seed_means_of(x, None)``; both: ``seed_means_of(x, draw)``), scores them with
``crs.scoring.bootstrap.score_replicates`` and takes ``interval`` (percentile, 95 %).
Coverage = share of replications whose interval contains the truth, for (a) the CRS difference
of every encoder to encoder 0 (the true leader), (b) each axis averaged over datasets (the
``*_low``/``*_high`` columns of scores/encoders) and (c) each axis per dataset.

Monte Carlo error of a coverage near 0.95 over R replications: 1.96 sqrt(0.95 * 0.05 / R),
+/- 1.5 % at R = 811. Each row is also given for the basic interval, a candidate fix.
``--calibration`` runs only the study of C's estimator (crs's binned ECE against two debiased
candidates: per bin |gap|, and the squared calibration error). Findings: docs/bootstrap-coverage.md.
Usage (one JSON line per scenario, unit and interval, then a summary line):

    python benchmarks/bootstrap_coverage.py [--replications 800] [--bootstrap 200] [--quick]
        [--scenario mixed|small|large|all] [--seed 0] [--every N] [--calibration]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import NamedTuple

import numpy as np

SEEDS = 5
FRACTIONS = 2  # label fractions below 1 per dataset
PERTURBED = 2  # perturbed conditions per dataset
RHO, LAM = 0.5, 0.35  # image-noise shares: shared by encoders, the encoder's own; the rest per condition
KAPPA = 0.5  # share of the seed effect common to every encoder (the same label subset)
UNITS = ("seed", "image", "both")
INTERVALS = ("percentile", "basic")  # crs's interval, and the bias-correcting alternative


class Encoder(NamedTuple):
    """One simulated encoder, relative to a dataset's base separation."""

    strength: float  # delta = strength * base delta of the dataset
    gamma: float  # calibration slope on the log likelihood ratio (1 = calibrated)
    beta: float  # calibration offset
    low: tuple[float, ...]  # delta multiplier at each fraction below 1
    perturbed: tuple[float, ...]  # delta multiplier under each perturbation
    shift: float  # delta multiplier on the shift target
    seed_sd: float  # sd of the seed effect on delta below fraction 1 (in delta units)


class Dataset(NamedTuple):
    n: int  # test images
    base: float  # base separation (AUROC of strength 1 = Phi(base / sqrt 2))
    prevalence: float
    shift_n: int  # test images of its shift target; 0 = no shift target


# Four encoders close together, none dominating another: true CRS 51.9, 51.4, 50.4, 50.0
# (median reference, equal weights), each trading an axis against another.
ENCODERS = (
    Encoder(0.97, 1.03, -0.02, (0.80, 0.92), (0.88, 0.83), 0.87, 0.06),  # robust, well calibrated
    Encoder(0.98, 0.97, 0.02, (0.81, 0.92), (0.86, 0.81), 0.84, 0.06),  # calibrated
    Encoder(0.99, 0.90, 0.03, (0.83, 0.93), (0.85, 0.80), 0.86, 0.06),  # label-efficient
    Encoder(1.00, 0.92, 0.00, (0.80, 0.92), (0.86, 0.80), 0.85, 0.06),  # best D
)

SCENARIOS = {
    # sizes from a few hundred to tens of thousands, as on the real registry (APTOS .. CheXpert)
    "mixed": (Dataset(300, 1.3, 0.3, 0), Dataset(2000, 1.8, 0.2, 1000), Dataset(10000, 1.5, 0.1, 0)),
    "small": (Dataset(300, 1.3, 0.3, 0), Dataset(500, 1.8, 0.2, 300), Dataset(800, 1.5, 0.15, 0)),
    "large": (Dataset(10000, 1.3, 0.3, 0), Dataset(20000, 1.8, 0.2, 10000), Dataset(30000, 1.5, 0.1, 0)),
}
QUICK = {"mixed": (Dataset(300, 1.3, 0.3, 0), Dataset(1000, 1.8, 0.2, 500), Dataset(3000, 1.5, 0.1, 0))}


# ---------------------------------------------------------------------------- the truth
def phi(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(x)


def probability(score: np.ndarray, delta: float, prevalence: float, enc: Encoder) -> np.ndarray:
    """sigmoid(gamma * (log LR + log prior odds) + beta) for the binormal score."""
    logit = delta * score - delta**2 / 2 + math.log(prevalence / (1 - prevalence))
    return 1.0 / (1.0 + np.exp(-(enc.gamma * logit + enc.beta)))


def population_ece(delta: float, prevalence: float, enc: Encoder, grid: int = 200_001) -> float:
    """The 15-bin top-label ECE of the whole population: crs's binned_ece over a score grid
    weighted by the score's density, with the probability of a correct prediction as the hit."""
    from scipy.stats import norm

    from crs.scoring.metrics import binned_ece

    s = np.linspace(-9.0, 9.0 + delta, grid)
    f1, f0 = prevalence * norm.pdf(s, delta), (1 - prevalence) * norm.pdf(s, 0.0)
    p = probability(s, delta, prevalence, enc)
    p_pos = f1 / (f1 + f0)
    hit = np.where(p >= 0.5, p_pos, 1.0 - p_pos)
    return float(binned_ece(np.maximum(p, 1.0 - p), hit, (f1 + f0)[:, None])[0])


def population_sq_ce(delta: float, prevalence: float, enc: Encoder, grid: int = 200_001) -> float:
    """The population's squared 15-bin calibration error, sum_b P(b) g_b^2 (g_b the bin's mean gap between
    a correct prediction and its confidence): the estimand of ``debiased_sq_ce``, bins as crs's."""
    from scipy.stats import norm

    from crs.scoring.metrics import bin_index

    s = np.linspace(-9.0, 9.0 + delta, grid)
    f1, f0 = prevalence * norm.pdf(s, delta), (1 - prevalence) * norm.pdf(s, 0.0)
    p = probability(s, delta, prevalence, enc)
    p_pos, w = f1 / (f1 + f0), f1 + f0
    hit, conf = np.where(p >= 0.5, p_pos, 1.0 - p_pos), np.maximum(p, 1.0 - p)
    bins = bin_index(conf, 15)
    mass = np.bincount(bins, weights=w, minlength=15)
    gap = np.bincount(bins, weights=(hit - conf) * w, minlength=15)
    seen = mass > 0
    return float(np.sum(gap[seen] ** 2 / mass[seen]) / w.sum())


def true_axes(datasets: tuple[Dataset, ...], encoders=None) -> np.ndarray:
    """x [encoder, dataset, axis]: the population axis values with infinitely many seeds (``encoders``:
    default ``ENCODERS``)."""
    from crs.scoring.axes import AxisArrays, axes_from

    nodes, weights = np.polynomial.hermite_e.hermegauss(64)  # E over u ~ N(0, 1)
    weights = weights / weights.sum()
    encoders = ENCODERS if encoders is None else encoders
    out = np.empty((len(encoders), len(datasets), 4))
    for e, enc in enumerate(encoders):
        for j, ds in enumerate(datasets):
            delta = enc.strength * ds.base
            low = np.stack([phi((delta * h + delta * enc.seed_sd * nodes) / math.sqrt(2)) for h in enc.low], -1)
            x = AxisArrays(
                d=np.full(nodes.size, phi(delta / math.sqrt(2))),
                ece=np.full(nodes.size, population_ece(delta, ds.prevalence, enc)),
                low_fraction=low,  # [node, fraction]
                perturbed=np.tile(phi(delta * np.array(enc.perturbed) / math.sqrt(2)), (nodes.size, 1)),
                shift=np.full((nodes.size, 1), phi(delta * enc.shift / math.sqrt(2))) if ds.shift_n else None,
            )
            out[e, j] = weights @ axes_from(x)  # only L depends on the node
    return out


# ---------------------------------------------------------------------- one replication
def replicate_counts(n: int, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """[image, 1 + replicate]: column 0 all ones (the point estimate), then the bootstrap draws."""
    from crs.scoring.resample import image_counts

    return np.ascontiguousarray(np.hstack([np.ones((n, 1), np.int32), image_counts(n, n_bootstrap, rng)]))


def _auroc(score: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    from crs.scoring.metrics import weighted_macro_auroc

    return weighted_macro_auroc(score[:, None], y[:, None].astype(np.int8), np.ones((y.size, 1), bool), counts)


def dataset_axes(ds: Dataset, n_bootstrap: int, rng: np.random.Generator, encoders=None,
                 versions: bool = False):
    """x [1 + replicate, encoder, seed, axis] of one simulated test set: row 0 the point axes. ``encoders``:
    the Encoder records (default ``ENCODERS``). With ``versions``, {"1": x, "2": x with CRS v2's C} from the
    same draws (benchmarks/crs_versions.py)."""
    from crs.scoring.axes import AxisArrays, axes_from
    from crs.scoring.calibration import point_loss, replicate_losses
    from crs.scoring.metrics import weighted_ece

    encoders = ENCODERS if encoders is None else encoders

    y = rng.random(ds.n) < ds.prevalence
    z = rng.standard_normal(ds.n)
    counts = replicate_counts(ds.n, n_bootstrap, rng)
    if ds.shift_n:
        y_t, z_t = rng.random(ds.shift_n) < ds.prevalence, rng.standard_normal(ds.shift_n)
        counts_t = replicate_counts(ds.shift_n, n_bootstrap, rng)
    v = rng.standard_normal((len(encoders[0].low), SEEDS))  # the label subsets' common effect [fraction, seed]
    out = np.empty((n_bootstrap + 1, len(encoders), SEEDS, 4))
    ce2 = np.empty((n_bootstrap + 1, len(encoders)))  # CRS v2's C = 1 - kappa S per replicate, with ``versions``
    rest = math.sqrt(1 - RHO - LAM)
    for e, enc in enumerate(encoders):
        delta = enc.strength * ds.base
        common = math.sqrt(RHO) * z + math.sqrt(LAM) * rng.standard_normal(ds.n)

        def score(d: float | np.ndarray, common: np.ndarray = common) -> np.ndarray:
            return d * y + common + rest * rng.standard_normal(ds.n)

        clean = score(delta)
        p = probability(clean, delta, ds.prevalence, enc)
        target = y[:, None].astype(np.int8)
        ece = weighted_ece(p[:, None], target, np.ones((ds.n, 1), bool), counts, "multilabel")
        if versions:
            known = np.ones((ds.n, 1), bool)
            ce2[0, e] = 1.0 - point_loss(p[:, None], target, known, "multilabel")
            ce2[1:, e] = 1.0 - replicate_losses(p[:, None], target, known,
                                                np.ascontiguousarray(counts[:, 1:].T, dtype=np.float64), "multilabel")
        u = math.sqrt(KAPPA) * v + math.sqrt(1 - KAPPA) * rng.standard_normal(v.shape)
        low = np.stack([
            np.stack([_auroc(score(delta * (h + enc.seed_sd * u[f, s])), y, counts) for f, h in enumerate(enc.low)], -1)
            for s in range(SEEDS)
        ])  # [seed, 1 + replicate, fraction]
        pert = np.stack([_auroc(score(delta * r), y, counts) for r in enc.perturbed], -1)
        shift = None
        if ds.shift_n:
            own = math.sqrt(RHO) * z_t + math.sqrt(LAM) * rng.standard_normal(ds.shift_n)
            s_t = delta * enc.shift * y_t + own + rest * rng.standard_normal(ds.shift_n)
            shift = _auroc(s_t, y_t, counts_t)[:, None]
        seeds = (SEEDS, 1, 1)  # fraction 1 is the same probe for every seed
        x = AxisArrays(
            d=np.tile(_auroc(clean, y, counts), seeds[:2]),
            ece=np.tile(ece, seeds[:2]),
            low_fraction=low,
            perturbed=np.tile(pert, seeds),
            shift=None if shift is None else np.tile(shift, seeds),
        )
        out[:, e] = axes_from(x).transpose(1, 0, 2)  # [seed, rep, axis] -> [rep, seed, axis]
    if not versions:
        return out
    out2 = out.copy()
    out2[..., 1] = ce2[:, :, None]
    return {"1": out, "2": out2}


def unit_replicates(x: np.ndarray, n_bootstrap: int, seed: int, unwidened: bool = False) -> dict:
    """(seed means [replicate, encoder, dataset, axis], Replicates) of each unit from
    x [1 + replicate, encoder, dataset, seed, axis], as ``crs.scoring.replicates.bootstrap_means``
    forms them (median reference, default weights); with ``unwidened`` also 'both_unwidened',
    the unit 'both' before its seed deviations were widened (``crs.scoring.bootstrap.seed_scale``)."""
    from crs.scoring.bootstrap import draw_seeds, resample_seeds, score_replicates, seed_means_of, seed_weights

    draw = draw_seeds(SEEDS, n_bootstrap, seed)
    point, x_rep = x[0], x[1:]
    seed_unit = resample_seeds(seed_weights(draw, SEEDS), np.moveaxis(point, 2, -1))
    means = {"seed": seed_unit, "image": seed_means_of(x_rep, None), "both": seed_means_of(x_rep, draw)}
    if unwidened:
        means["both_unwidened"] = np.einsum("bs,bedsa->beda", seed_weights(draw, SEEDS), x_rep)
    return {unit: (m, score_replicates(m)) for unit, m in means.items()}


def covered(reps, point, truth_x: np.ndarray, truth_crs: np.ndarray, x_boot: np.ndarray, basic: bool) -> dict:
    """bool arrays: CRS difference to encoder 0 [encoder - 1], axis [encoder, axis], per dataset
    [encoder, dataset, axis]; each True where the 95 % interval holds the truth.

    The interval is crs's percentile interval (``crs.scoring.bootstrap.interval``) or, with
    ``basic``, the basic bootstrap interval [2 t - q_high, 2 t - q_low] around the point
    estimate t (``point``: the Replicates of the full data), which corrects a bias the
    replicates share with the estimate."""
    from crs.scoring.bootstrap import interval

    def inside(values: np.ndarray, estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
        low, high = interval(values)
        if basic:
            low, high = 2 * estimate - high, 2 * estimate - low
        return (low <= truth + 1e-12) & (truth - 1e-12 <= high)

    diff = reps.crs[:, 1:] - reps.crs[:, [0]]
    point_diff = point.crs[0, 1:] - point.crs[0, [0]]
    return {
        "crs_diff": inside(diff, point_diff, truth_crs[1:] - truth_crs[0]),
        "axis": inside(reps.axis, point.axis[0], truth_x.mean(axis=1)),
        "axis_dataset": inside(x_boot, point.x[0], truth_x),
        "width_diff": np.diff(np.stack(interval(diff)), axis=0)[0],
    }


class Point(NamedTuple):
    x: np.ndarray  # [1, encoder, dataset, axis] seed means of the full data
    axis: np.ndarray  # [1, encoder, axis]
    crs: np.ndarray  # [1, encoder]


def point_of(x: np.ndarray) -> Point:
    from crs.scoring.bootstrap import score_replicates

    m = x[:1].mean(axis=3)  # the full data: every image once, every seed once
    reps = score_replicates(m)
    return Point(m, reps.axis, reps.crs)


# ------------------------------------------------------------------------------ the study
def study(name: str, datasets: tuple[Dataset, ...], replications: int, n_bootstrap: int, seed: int,
          every: int = 0, unwidened: bool = False):
    """Yields one JSON-able row per (unit, interval): coverage of CRS differences and axes, after
    the last replication and, with ``every``, after each ``every`` replications (``partial``)."""
    from crs.scoring.crs import score

    truth_x = true_axes(datasets)
    truth_crs = score(truth_x).crs
    rng = np.random.default_rng([seed, 16])
    units = (*UNITS, "both_unwidened") if unwidened else UNITS
    hits = {(u, i): {} for u in units for i in INTERVALS}
    t0 = time.perf_counter()
    for r in range(replications):
        x = np.stack([dataset_axes(ds, n_bootstrap, rng) for ds in datasets], axis=2)
        point = point_of(x)
        for unit, (means, reps) in unit_replicates(x, n_bootstrap, seed * 100_003 + r, unwidened).items():
            for kind in INTERVALS:
                got = covered(reps, point, truth_x, truth_crs, means, kind == "basic")
                for k, v in got.items():
                    hits[unit, kind][k] = hits[unit, kind].get(k, 0) + v.astype(float)
        if r + 1 == replications or (every and (r + 1) % every == 0):
            yield from _rows(name, datasets, hits, r + 1, n_bootstrap, truth_crs, time.perf_counter() - t0,
                             partial=r + 1 < replications)


def _rows(name, datasets, hits, replications, n_bootstrap, truth_crs, seconds, partial) -> list[dict]:
    from crs.scoring.axes import AXES

    half = 1.96 * math.sqrt(0.95 * 0.05 / replications)
    rows = []
    for unit, kind in hits:
        h = {k: v / replications for k, v in hits[unit, kind].items()}
        diff = h["crs_diff"]
        rows.append({
            "scenario": name, "unit": unit, "interval": kind, "replications": replications, "bootstrap": n_bootstrap,
            "test_images": [ds.n for ds in datasets], "shift_images": [ds.shift_n for ds in datasets],
            "true_crs": [round(float(c), 3) for c in truth_crs],
            "true_crs_diff": [round(float(c - truth_crs[0]), 3) for c in truth_crs[1:]],
            "crs_diff_coverage": [round(float(c), 3) for c in diff],
            "crs_diff_mean_width": [round(float(w), 3) for w in h["width_diff"]],
            "axis_coverage": {a: round(float(h["axis"][:, k].mean()), 3) for k, a in enumerate(AXES)},
            "axis_coverage_by_encoder": {a: [round(float(c), 3) for c in h["axis"][:, k]] for k, a in enumerate(AXES)},
            "axis_coverage_by_dataset": {
                a: {str(ds.n): round(float(h["axis_dataset"][:, j, k].mean()), 3) for j, ds in enumerate(datasets)}
                for k, a in enumerate(AXES)
            },
            "monte_carlo_half_width": round(half, 4), "seconds": round(seconds, 1), "partial": partial,
        })
    return rows


def _debiased_bins(conf: np.ndarray, hit: np.ndarray, weights: np.ndarray, n_bins: int):
    """Per non-empty bin b: (n_b / n, g_b^2 - v_b / (n_b - 1)) [replicate], g_b and v_b the mean and
    variance of (hit - conf) in the bin under each replicate's weights (bins as crs's)."""
    from crs.scoring.metrics import bin_index

    bins, gap = bin_index(conf, n_bins), hit - conf
    w = weights.astype(np.float64)
    total = w.sum(axis=0)
    for k in np.unique(bins):
        wk, gk = w[bins == k], gap[bins == k]
        nb = wk.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (gk @ wk) / nb
            var = (gk**2 @ wk) / nb - mean**2
            yield nb / total, np.where(nb > 1, mean**2 - var / np.maximum(nb - 1, 1), 0.0)


def debiased_ece(conf: np.ndarray, hit: np.ndarray, weights: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """A candidate fix, not crs's definition: sum_b (n_b / n) sqrt(max(g_b^2 - v_b / n_b, 0)) [replicate],
    g_b, v_b the mean and variance of (hit - conf) in bin b (the debiased squared gap of
    Kumar, Liang & Ma 2019, "Verified uncertainty calibration", per bin), bins as crs's."""
    return sum(share * np.sqrt(np.maximum(sq, 0.0)) for share, sq in _debiased_bins(conf, hit, weights, n_bins))


def debiased_sq_ce(conf: np.ndarray, hit: np.ndarray, weights: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """A CRS v2 candidate: sum_b (n_b / n) (g_b^2 - v_b / (n_b - 1)) [replicate], the unbiased estimate of
    the squared binned calibration error (Kumar, Liang & Ma 2019). It may be negative; its interval is
    reported for its square root by clipping the endpoints at 0 (a monotone map keeps the coverage)."""
    return sum(share * sq for share, sq in _debiased_bins(conf, hit, weights, n_bins))


def calibration_study(sizes: tuple[int, ...], replications: int, n_bootstrap: int, seed: int) -> list[dict]:
    """Coverage of the population ECE (1 - C) by the image bootstrap's percentile interval, for crs's
    binned ECE and the debiased candidate, per test-set size. C is fixed at fraction 1, so its
    interval is the same under 'image' and 'both', and 'seed' gives it zero width."""
    from crs.scoring.bootstrap import interval
    from crs.scoring.metrics import binned_ece

    rng, base, prevalence = np.random.default_rng([seed, 17]), 1.5, 0.1
    # (estimator, its population value): L1 estimators target the ECE, the squared one its own estimand
    studies = {"binned_ece": (binned_ece, population_ece), "debiased_ece": (debiased_ece, population_ece),
               "debiased_sq_ce": (debiased_sq_ce, population_sq_ce)}
    rows = []
    for n in sizes:
        truth = {k: np.array([true(e.strength * base, prevalence, e) for e in ENCODERS])
                 for k, (_, true) in studies.items()}
        hits = {k: np.zeros(len(ENCODERS)) for k in studies}
        bias = {k: np.zeros(len(ENCODERS)) for k in studies}
        for _ in range(replications):
            y = rng.random(n) < prevalence
            counts = replicate_counts(n, n_bootstrap, rng)
            for e, enc in enumerate(ENCODERS):
                delta = enc.strength * base
                p = probability(delta * y + rng.standard_normal(n), delta, prevalence, enc)
                conf, hit = np.maximum(p, 1 - p), ((p >= 0.5) == y).astype(float)
                for name, (fn, _) in studies.items():
                    v = fn(conf, hit, counts)
                    low, high = interval(v[1:])
                    hits[name][e] += low <= truth[name][e] <= high
                    bias[name][e] += v[0] - truth[name][e]
        for name in hits:
            rows.append({"calibration_study": name, "test_images": n, "replications": replications,
                         "bootstrap": n_bootstrap, "true_value": [round(float(t), 6) for t in truth[name]],
                         "mean_bias": [round(float(b / replications), 6) for b in bias[name]],
                         "coverage": [round(float(h / replications), 3) for h in hits[name]]})
    return rows


def seed_study(replications: int, n_bootstrap: int, seed: int, n_seeds: int = SEEDS) -> list[dict]:
    """Coverage of the true L by the seed bootstrap with an infinite test set (so only seeds vary):
    the plain percentile interval of the resampled seed mean ('unwidened', crs before the change)
    and crs's, whose seed deviations are widened by ``crs.scoring.bootstrap.seed_scale``
    (sqrt(S/(S-1)) t_{S-1,0.975} / z_0.975: the resampled mean of S seeds has variance (S-1)/S
    of the mean's, and S = 5 is too few for z)."""
    from crs.scoring.bootstrap import draw_seeds, interval, resample_seeds, seed_scale, seed_weights

    base, rng = 1.5, np.random.default_rng([seed, 18])
    truth = true_axes((Dataset(1, base, 0.1, 0),))[:, 0, 2]  # [encoder]
    hits = {"unwidened": np.zeros(len(ENCODERS)), "crs": np.zeros(len(ENCODERS))}
    for r in range(replications):
        v = rng.standard_normal((len(ENCODERS[0].low), n_seeds))
        x = np.empty((len(ENCODERS), n_seeds))
        for e, enc in enumerate(ENCODERS):
            delta = enc.strength * base
            u = math.sqrt(KAPPA) * v + math.sqrt(1 - KAPPA) * rng.standard_normal(v.shape)
            a = phi(delta * (np.array(enc.low)[:, None] + enc.seed_sd * u) / math.sqrt(2))  # [fraction, seed]
            x[e] = np.clip((a - 0.5) / (phi(delta / math.sqrt(2)) - 0.5), 0, 1).mean(axis=0)
        w = seed_weights(draw_seeds(n_seeds, n_bootstrap, seed * 100_003 + r), n_seeds)  # [replicate, seed]
        for name, reps in (("unwidened", w @ x.T), ("crs", resample_seeds(w, x))):
            low, high = interval(reps)
            hits[name] += (low <= truth) & (truth <= high)
    scale = {"unwidened": 1.0, "crs": seed_scale(n_seeds)}
    return [{"seed_study": name, "seeds": n_seeds, "replications": replications, "bootstrap": n_bootstrap,
             "scale": round(scale[name], 3), "coverage_of_L": [round(float(h / replications), 3) for h in hits[name]]}
            for name in hits]


def within(c: float, target: float = 0.95, tol: float = 0.03) -> bool:
    return abs(c - target) <= tol


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replications", type=int, default=800)
    ap.add_argument("--bootstrap", type=int, default=200, help="replicates per interval (B)")
    ap.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="mixed")
    ap.add_argument("--quick", action="store_true", help="60 replications, B=100, smaller test sets: a smoke run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=0, help="also print partial rows every N replications")
    ap.add_argument("--calibration", action="store_true",
                    help="only the calibration study: binned vs debiased ECE, per test-set size")
    ap.add_argument("--unwidened", action="store_true",
                    help="also 'both_unwidened': 'both' without crs's widened seed deviations (see seed_study)")
    ap.add_argument("--seeds-only", action="store_true",
                    help="only the seed study: L with an infinite test set, crs's interval against a scaled one")
    ap.add_argument("--versions", action="store_true",
                    help="CRS v1 and v2 side by side (benchmarks/crs_versions.py): coverage, width ratio, power")
    ap.add_argument("--json", action="store_true",
                    help="with --versions (implied): one JSON object {scenario: {version: {coverage, width, power, "
                         "bias, baseline, best_set, ...}}}")
    args = ap.parse_args()
    if args.versions or args.json:
        import crs_versions as cv

        runs = cv.QUICK if args.quick else (cv.SCENARIOS if args.scenario == "all" else
                                            {args.scenario: cv.SCENARIOS.get(args.scenario, cv.SCENARIOS["paper"])})
        reps, boot = (min(args.replications, 20), 100) if args.quick else (args.replications, args.bootstrap)
        result = {}
        for name, scenario in runs.items():
            for rows in cv.study(name, scenario, reps, boot, args.seed, every=args.every):
                if not args.json:
                    for row in rows.values():
                        print(json.dumps(row), flush=True)
            result[name] = rows
        if args.json:
            keys = ("coverage", "width", "power", "bias", "baseline", "best_set", "power_one_axis", "power_top_pairs",
                    "replications")
            print(json.dumps({name: {v: {k: row[k] for k in keys} for v, row in rows.items()}
                              for name, rows in result.items()}))
        return
    if args.seeds_only:
        for row in seed_study(args.replications, args.bootstrap, args.seed):
            print(json.dumps(row), flush=True)
        return
    if args.calibration:
        sizes = (300, 2000) if args.quick else (300, 2000, 10000)
        for row in calibration_study(sizes, 60 if args.quick else args.replications, args.bootstrap, args.seed):
            print(json.dumps(row), flush=True)
        return
    if args.quick:
        runs = dict(QUICK)
        args.replications, args.bootstrap = min(args.replications, 60), 100
    else:
        runs = SCENARIOS if args.scenario == "all" else {args.scenario: SCENARIOS[args.scenario]}
    verdict = {}
    for name, datasets in runs.items():
        for row in study(name, datasets, args.replications, args.bootstrap, args.seed, args.every, args.unwidened):
            print(json.dumps(row), flush=True)
            if row["partial"]:
                continue
            values = [*row["crs_diff_coverage"], *row["axis_coverage"].values()]
            verdict[f"{name}/{row['unit']}/{row['interval']}"] = {"min": min(values), "max": max(values),
                                                "within_95_pm_3": all(within(v) for v in values)}
    print(json.dumps({"summary": verdict}), flush=True)


if __name__ == "__main__":
    main()
