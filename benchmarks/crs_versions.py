"""CRS v1 and v2 side by side on the same simulated benchmarks (issue 40, item 4): what chose v2.

Run through ``benchmarks/bootstrap_coverage.py --versions`` (full figures) or ``--quick --json`` (one
JSON object). The simulator is bootstrap_coverage's (binormal scores, an image effect shared by the
encoders, the encoder's own, the condition's; seeds move the separation below fraction 1; calibration
by a slope and offset on the log likelihood ratio). Each simulated benchmark is drawn once and scored
by both versions, unit ``both`` (seeds and test images, paired), percentile intervals, median
reference, equal weights. The versions differ in C (v1: 1 - 15-bin ECE of the run records; v2: 1 -
the debiased L2 calibration error, ``crs.scoring.calibration``, its replicates recentred) and in q,
dominance and balance (``crs.scoring.crs``). Per version and scenario:

* ``coverage``: the share of benchmarks whose 95 % interval holds the truth, for every pairwise CRS
  difference (mean, min and max over the pairs) and for each axis averaged over datasets (mean over
  encoders; per dataset too). The truth is the population value of each version's own axes
  (C: v1's population 15-bin ECE, v2's population L2 error over 15 equal-mass bins);
* ``width``: the mean width of the pairwise CRS-difference intervals divided by the spread (largest
  minus smallest) of the true CRS over the scenario's encoders (scale-free);
* ``power``: for gap g, two extra encoders A and B_g, B_g's true profile above A's by g on every axis
  of every dataset (D, L and R exactly by g; C by g in v2's calibration error, and what that is in
  v1's), each scored with 13 of the scenario's encoders: the share of benchmarks whose interval of
  CRS(B_g) - CRS(A) excludes 0. At g = 0 that is the false "separable" rate.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq

import bootstrap_coverage as bc

SEEDS = bc.SEEDS
VERSIONS = ("1", "2")
GAPS = (0.0, 0.005, 0.01, 0.02, 0.03)
ONE_AXIS = ("D", 0.02)  # the one-axis power pair: B ahead of A by 0.02 on D alone


# 15 encoders shaped like the paper's leaderboard: a leading three close together, a middle group of
# six within a few points, and six weaker ones; each trades one axis against another.
def _paper_encoders() -> tuple[bc.Encoder, ...]:
    top = (
        bc.Encoder(1.05, 1.00, 0.00, (0.84, 0.94), (0.89, 0.84), 0.88, 0.06),
        bc.Encoder(1.06, 0.95, 0.03, (0.83, 0.93), (0.88, 0.83), 0.87, 0.06),
        bc.Encoder(1.04, 1.02, -0.02, (0.85, 0.94), (0.88, 0.82), 0.89, 0.06),
    )
    middle = tuple(bc.Encoder(0.99 - 0.01 * i, 0.94 + 0.02 * (i % 3), 0.02 * ((-1) ** i),
                              (0.81 + 0.005 * (i % 2), 0.92), (0.86 - 0.005 * i, 0.81), 0.85 - 0.005 * (i % 3), 0.06)
                   for i in range(6))
    weak = tuple(bc.Encoder(0.90 - 0.03 * i, 0.85 + 0.03 * (i % 2), 0.05 * ((-1) ** i),
                            (0.76 - 0.01 * i, 0.88), (0.82 - 0.01 * i, 0.76), 0.80 - 0.01 * i, 0.07)
                 for i in range(6))
    return top + middle + weak


PAPER_ENCODERS = _paper_encoders()
PAPER = (bc.Dataset(5000, 1.8, 0.2, 5000), bc.Dataset(550, 1.3, 0.3, 0), bc.Dataset(500, 1.5, 0.15, 0))
QUICK_PAPER = (bc.Dataset(2000, 1.8, 0.2, 2000), bc.Dataset(550, 1.3, 0.3, 0), bc.Dataset(500, 1.5, 0.15, 0))
# scenario -> (its datasets, its encoders); the power pair is added to each
SCENARIOS = {"paper": (PAPER, PAPER_ENCODERS), "mixed": (bc.SCENARIOS["mixed"], bc.ENCODERS)}
QUICK = {"paper": (QUICK_PAPER, PAPER_ENCODERS), "mixed": (bc.QUICK["mixed"], bc.ENCODERS)}
# A of every power pair: mid-table, and miscalibrated enough (population error 0.055-0.061) that B can be
# better calibrated by every gap studied
BASE = bc.Encoder(0.97, 0.75, 0.15, (0.82, 0.93), (0.87, 0.82), 0.86, 0.06)


# ------------------------------------------------------------------------- the truth
def population_ce(delta: float, prevalence: float, enc: bc.Encoder, grid: int = 200_001) -> float:
    """v2's calibration error of the population: sqrt(sum_b P(b) gap_b^2) over 15 equal-mass bins of the
    top-label confidence (the limit of ``crs.scoring.calibration`` as the test set grows)."""
    from scipy.stats import norm

    s = np.linspace(-9.0, 9.0 + delta, grid)
    f1, f0 = prevalence * norm.pdf(s, delta), (1 - prevalence) * norm.pdf(s, 0.0)
    p = bc.probability(s, delta, prevalence, enc)
    p_pos, w = f1 / (f1 + f0), f1 + f0
    conf, hit = np.maximum(p, 1 - p), np.where(p > 0.5, p_pos, 1 - p_pos)
    order = np.argsort(conf, kind="stable")
    cdf = np.cumsum(w[order]) / w.sum()
    b = np.minimum((cdf * 15).astype(int), 14)  # equal-mass bins of the population
    mass = np.bincount(b, weights=w[order], minlength=15)
    gap = np.bincount(b, weights=((conf - hit) * w)[order], minlength=15)
    seen = mass > 0
    return float(math.sqrt(np.sum(gap[seen] ** 2 / mass[seen]) / w.sum()))


def true_axes(encoders: list[tuple[bc.Encoder, ...]], datasets) -> dict[str, np.ndarray]:
    """x [encoder, dataset, axis] per version; encoders[e][j] is encoder e's parameters on dataset j."""
    out = {}
    for v in VERSIONS:
        x = np.empty((len(encoders), len(datasets), 4))
        for e, per in enumerate(encoders):
            for j, ds in enumerate(datasets):
                enc = per[j]
                x[e, j] = _true_one(enc, ds, v)
        out[v] = x
    return out


def _true_one(enc: bc.Encoder, ds: bc.Dataset, version: str) -> np.ndarray:
    from crs.scoring.calibration import CALIBRATION_LOSS_SCALE

    x = bc.true_axes((ds,), (enc,))[0, 0]
    if version == "2":  # C = 1 - kappa CE^2 (crs.scoring.calibration)
        x[1] = 1.0 - CALIBRATION_LOSS_SCALE * population_ce(enc.strength * ds.base, ds.prevalence, enc) ** 2
    return x


def power_pair(gap: float, datasets, axes: str = "DCLR") -> tuple[tuple[bc.Encoder, ...], tuple[bc.Encoder, ...]]:
    """(A, B) per dataset: on each axis named in ``axes`` B is ahead of A by ``gap`` exactly (D, L, R: the axis
    value plus ``gap``; C: v2's calibration error minus ``gap``), on every other axis B equals A (each parameter
    solved with brentq)."""
    pairs = [_pair_one({a: (gap if a in axes else 0.0) for a in "DCLR"}, ds) for ds in datasets]
    return tuple(a for a, _ in pairs), tuple(b for _, b in pairs)


def _pair_one(gaps: dict[str, float], ds) -> tuple[bc.Encoder, bc.Encoder]:
    """(A, B) on one dataset, as ``power_pair`` describes; ``gaps`` maps each axis to B's lead on it."""
    a = BASE
    ta = {v: _true_one(a, ds, v) for v in VERSIONS}
    if not any(gaps.values()):
        return a, a
    d_b = ta["1"][0] + gaps["D"]
    strength = math.sqrt(2) * _ndtri(d_b) / ds.base
    delta = strength * ds.base

    def l_of(k: float) -> float:
        b = a._replace(strength=strength, low=tuple(h * k for h in a.low))
        return _true_one(b, ds, "1")[2]

    k_low = brentq(lambda k: l_of(k) - (ta["1"][2] + gaps["L"]), 0.5, 1.0 / min(a.low) - 1e-9)

    def r_of(k: float) -> float:
        b = a._replace(strength=strength, perturbed=tuple(min(r * k, 1.2) for r in a.perturbed),
                       shift=a.shift * k)
        return _true_one(b, ds, "1")[3]

    k_rob = brentq(lambda k: r_of(k) - (ta["1"][3] + gaps["R"]), 0.5, 1.0 / max(a.perturbed) - 1e-9)
    b = a._replace(strength=strength, low=tuple(h * k_low for h in a.low),
                   perturbed=tuple(r * k_rob for r in a.perturbed), shift=a.shift * k_rob)
    ce_a = 1.0 - ta["2"][1]

    def ce_of(t: float) -> float:  # t in [-1, 1]: slope and offset moved towards calibrated (t > 0) or away
        c = b._replace(gamma=b.gamma + t * (1.0 - b.gamma), beta=b.beta * (1.0 - t))
        return population_ce(delta, ds.prevalence, c)

    want = max(ce_a - gaps["C"], 0.0)
    t = brentq(lambda t: ce_of(t) - want, -1.0, 1.0) if ce_of(1.0) < want else 1.0
    return a, b._replace(gamma=b.gamma + t * (1.0 - b.gamma), beta=b.beta * (1.0 - t))


def _ndtri(p: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(p))


# ------------------------------------------------------------------------ one benchmark
def simulate(encoders: list[tuple[bc.Encoder, ...]], datasets, n_bootstrap: int, rng) -> dict[str, np.ndarray]:
    """x [1 + replicate, encoder, dataset, seed, axis] per version from one simulated benchmark (row 0: the
    point axes; the versions' x differ only in C)."""
    per = [bc.dataset_axes(ds, n_bootstrap, rng, tuple(e[j] for e in encoders), versions=True)
           for j, ds in enumerate(datasets)]
    return {v: np.stack([p[v] for p in per], axis=2) for v in VERSIONS}


class Totals(NamedTuple):
    diff_hits: np.ndarray  # [pair]
    diff_below: np.ndarray  # [pair]: misses with the truth below the interval
    diff_width: np.ndarray  # [pair], summed
    diff_error: np.ndarray  # [pair]: point estimate minus truth, summed
    diff_separated: np.ndarray  # [pair]: the interval excludes 0
    axis_hits: np.ndarray  # [encoder, axis]
    axis_dataset_hits: np.ndarray  # [encoder, dataset, axis]
    separated: np.ndarray  # [gap]
    one_axis: np.ndarray  # [1]: the one-axis pair separated
    best_hits: np.ndarray  # [1]: the true best is in the best set
    best_size: np.ndarray  # [1]: the best set's size, summed
    tier_hits: np.ndarray  # [1]: the true best is in the per-pair tier (the leader and every encoder whose
    tier_size: np.ndarray  # [1]   difference interval to it holds 0), and that tier's size, summed
    union_hits: np.ndarray  # [1]: the true best is in the union of the best set and the per-pair tier
    union_size: np.ndarray  # [1]: that union's size, summed
    mean_width: np.ndarray  # [1]: the plain-mean test's pairwise interval widths, mean over pairs, summed
    mean_separated: np.ndarray  # [gap + 1]: the plain-mean test separates B_g from A (and the one-axis pair)


def benchmark_encoders(datasets, scenario_encoders=PAPER_ENCODERS, gaps=GAPS):
    """(every simulated encoder's parameters per dataset: the scenario's, A, B_g per gap, then the one-axis B
    (``ONE_AXIS``); the truth per version)."""
    paper = [tuple(e for _ in datasets) for e in scenario_encoders]
    pairs = {g: power_pair(g, datasets) for g in gaps}
    one_axis = power_pair(ONE_AXIS[1], datasets, ONE_AXIS[0])[1]
    encoders = paper + [pairs[gaps[0]][0]] + [pairs[g][1] for g in gaps] + [one_axis]
    return encoders, true_axes(encoders, datasets)


def study(name: str, scenario, replications: int, n_bootstrap: int, seed: int, gaps=GAPS, every: int = 0):
    """Yields {version: row} after the last replication (and every ``every`` replications, ``partial``);
    ``scenario``: (datasets, encoders)."""
    datasets, scenario_encoders = scenario
    encoders, truth = benchmark_encoders(datasets, scenario_encoders, gaps)  # the scenario's, A, then B_g per gap
    tally = {v: Tally(truth[v], v, len(datasets), len(gaps), len(scenario_encoders)) for v in VERSIONS}
    rng = np.random.default_rng([seed, 40])
    t0 = time.perf_counter()
    for r in range(replications):
        xs = simulate(encoders, datasets, n_bootstrap, rng)
        for v in VERSIONS:
            tally[v].add(xs[v], seed * 100_003 + r)
        if r + 1 == replications or (every and (r + 1) % every == 0):
            yield {v: _row(name, datasets, v, tally[v], n_bootstrap, gaps, time.perf_counter() - t0,
                           r + 1 < replications) for v in VERSIONS}


def plain_mean(x: np.ndarray) -> np.ndarray:
    """The paired plain-mean baseline [..., encoder]: the mean of the twelve axis values (every axis of every
    dataset) of seed means x [..., encoder, dataset, axis]; no q, no dominance."""
    return np.asarray(x, dtype=float).mean(axis=(-2, -1))


def _separates(diff_reps: np.ndarray) -> np.ndarray:
    low, high = _interval(diff_reps)
    return (low > 0) | (high < 0)


def _interval(values: np.ndarray):
    from crs.scoring.bootstrap import interval

    return interval(values)


class Tally:
    """Coverage, bias, widths, separations and best sets of one version summed over simulated benchmarks."""

    def __init__(self, truth: np.ndarray, version: str, n_datasets: int, n_gaps: int, n_encoders: int,
                 scorer=None):
        n = self.n_encoders = n_encoders
        self.truth, self.version, self.n = truth, version, 0
        # (x [encoder, dataset, axis], replicates [replicate, encoder, dataset, axis] or None, the replicates'
        # seeds resampled without the t widening or None) -> (CRS, replicate CRS or None): crs's own by default,
        # or a candidate definition's (its truth too)
        self.scorer = scorer or self._product_scorer
        self.c_shift = None  # [encoder, dataset]: taken from C of the scenario's encoders (tune's diagnostic)
        self.true_crs = self.scorer(truth[:n], None)[0]
        self.true_mean = plain_mean(truth[:n])
        self.i, self.j = np.triu_indices(n, 1)
        self.power_sets = [list(range(n - 2)) + [n, n + 1 + k] for k in range(n_gaps)]
        self.power_sets.append(list(range(n - 2)) + [n, n + 1 + n_gaps])  # the one-axis pair
        shapes = {"axis_hits": (n, 4), "axis_dataset_hits": (n, n_datasets, 4), "separated": (n_gaps,),
                  "mean_separated": (n_gaps + 1,)}  # the diff_* totals are per pair, the rest one number
        self.t = Totals(*(np.zeros(shapes.get(f, (self.i.size,) if f.startswith("diff_") else (1,)))
                          for f in Totals._fields))

    def add(self, x: np.ndarray, draw_seed: int) -> None:
        """One benchmark's x [1 + replicate, encoder, dataset, seed, axis]."""
        from crs.scoring.bootstrap import draw_seeds, seed_means_of, unclipped_axis, variance_scale

        n, t, truth = self.n_encoders, self.t, self.truth
        draw = draw_seeds(SEEDS, x.shape[0] - 1, draw_seed)
        free = unclipped_axis(self.version)  # v2's C may lie above 1: not clipped, as crs does
        m = seed_means_of(x[1:].astype(float), draw, unclipped=free)  # [replicate, encoder, dataset, axis]
        spread = seed_means_of(x[1:].astype(float), draw, free, variance_scale(SEEDS))  # the point's own noise
        point = x[0].astype(float).mean(axis=2)  # [encoder, dataset, axis]
        main_point, main_reps = point[:n], m[:, :n]
        if self.c_shift is not None:  # tune's c_unbiased diagnostic
            main_point, main_reps = main_point.copy(), main_reps.copy()
            main_point[..., 1] -= self.c_shift
            main_reps[..., 1] -= self.c_shift
        crs, crs_reps = self.scorer(main_point, main_reps, spread[:, :n])
        diff = crs_reps[:, self.i] - crs_reps[:, self.j]
        low, high = _interval(diff)
        want = self.true_crs[self.i] - self.true_crs[self.j]
        t.diff_hits[:] += (low <= want + 1e-12) & (want - 1e-12 <= high)
        t.diff_below[:] += want + 1e-12 < low
        t.diff_width[:] += high - low
        t.diff_error[:] += (crs[self.i] - crs[self.j]) - want
        t.diff_separated[:] += (low > 0) | (high < 0)
        low, high = _interval(m[:, :n].mean(axis=2))
        want = truth[:n].mean(axis=1)
        t.axis_hits[:] += (low <= want + 1e-12) & (want - 1e-12 <= high)
        low, high = _interval(m[:, :n])
        t.axis_dataset_hits[:] += (low <= truth[:n] + 1e-12) & (truth[:n] - 1e-12 <= high)
        self._sets(crs_reps, crs)
        means = plain_mean(m)  # [replicate, encoder]
        low, high = _interval(means[:, self.i] - means[:, self.j])
        t.mean_width[:] += (high - low).mean()
        for k, idx in enumerate(self.power_sets):
            g_reps = self.scorer(point[idx], m[:, idx], spread[:, idx])[1]
            hit = _separates(g_reps[:, -1] - g_reps[:, -2])
            if k < t.separated.size:
                t.separated[k] += hit
            else:
                t.one_axis[:] += hit
            t.mean_separated[k] += _separates(means[:, idx[-1]] - means[:, idx[-2]])
        self.n += 1

    def _product_scorer(self, point: np.ndarray, reps: np.ndarray | None, spread: np.ndarray | None = None):
        """(point CRS [encoder], replicate CRS [replicate, encoder] or None) as crs scores them: the truth by the
        definition, an estimate with the noise its replicates measure taken out (``crs.scoring.crs.estimate``)."""
        from crs.scoring.crs import estimate, score

        if reps is None:
            return score(point, "median", version=self.version).crs, None
        crs, crs_reps, _ = estimate(point, reps, "median", version=self.version, x_spread=spread)
        return crs.crs, crs_reps.crs

    def _sets(self, crs_reps: np.ndarray, crs: np.ndarray) -> None:
        """The best set and the per-pair tier of one benchmark, against the true best."""
        from crs.scoring.best_set import best_set

        t, best = self.t, int(np.argmax(self.true_crs))
        chosen = best_set(crs_reps, crs)
        t.best_hits[:] += bool(chosen[best])
        t.best_size[:] += chosen.sum()
        leader = int(np.argmax(crs))
        low, high = _interval(crs_reps - crs_reps[:, [leader]])
        tier = (low <= 0) & (high >= 0)
        tier[leader] = True
        t.tier_hits[:] += bool(tier[best])
        t.tier_size[:] += tier.sum()
        t.union_hits[:] += bool(tier[best] or chosen[best])
        t.union_size[:] += (tier | chosen).sum()


def tune(paths: list[str], grid: dict, gaps=GAPS, c_unbiased: bool = False, scorer=None) -> list[dict]:
    """Figures on cached benchmarks (``crs_versions_cache.py``): v2's for every combination of the constants in
    ``grid`` ({'Q_FLOOR': [...], 'KINK_SCALE': [...], 'DOMINANCE_SCALE': [...], 'NOISE_FLOOR': [...]}), and
    v1's once where the cache holds v1. ``tune(paths, {})`` gives v2's figures with the constants as they are.

    ``c_unbiased`` (a diagnostic, not an estimator: it uses the truth): C's mean error over the cached benchmarks
    (per encoder and dataset) is taken out of the point and the replicates of the scenario's encoders, so the
    figures show what the rest of the definition does when C's estimator is unbiased. ``scorer``: a candidate
    definition (``Tally``'s scorer) scored in place of v2."""
    import itertools

    from crs.scoring.versions import v2 as core  # the module whose constants v2's functions read

    data = [np.load(p) for p in paths]
    versions = [v for v in VERSIONS if f"x{v}" in data[0]]
    xs = {v: np.concatenate([d[f"x{v}"] for d in data]) for v in versions}
    truth = {v: data[0][f"truth{v}"] for v in versions}
    n_scenario = truth[versions[0]].shape[0] - 2 - len(gaps)  # less A, B per gap and the one-axis B
    rows = []

    def run(version: str, label: dict) -> None:
        tally = Tally(truth[version], version, truth[version].shape[1], len(gaps), n_scenario,
                      scorer if version == "2" else None)
        if c_unbiased:
            tally.c_shift = (xs[version][:, 0, :n_scenario, :, :, 1].astype(float).mean(axis=(0, 3))
                             - truth[version][:n_scenario, :, 1])
        for r, x in enumerate(xs[version]):
            tally.add(x, 100_003 * 7 + r)
        row = _row("cached", [], version, tally, xs[version].shape[1] - 1, gaps, 0.0, False)
        rows.append({**label, "c_unbiased": c_unbiased, **{k: row[k] for k in STUDY_KEYS},
                     "crs_diff": row["coverage"]["crs_diff"], "axis": row["coverage"]["axis"],
                     "pairs": row["coverage"]["pairs"], "replications": tally.n})

    if "1" in versions:
        run("1", {"crs_version": "1"})
    names = list(grid)
    saved = {k: getattr(core, k) for k in names}
    try:
        for values in itertools.product(*grid.values()):
            for k, val in zip(names, values, strict=True):
                setattr(core, k, val)
            run("2", {"crs_version": "2", **dict(zip(names, values, strict=True))})
    finally:
        for k, val in saved.items():
            setattr(core, k, val)
    return rows


STUDY_KEYS = ("width", "width_points", "true_crs_spread", "power", "power_one_axis", "power_top_pairs", "bias",
              "baseline", "best_set")


PAIR_FLOOR = 0.92  # every pair's coverage must be at least this (issue 51), tested per pair


def _row(name, datasets, version, tally: Tally, n_bootstrap: int, gaps, seconds, partial):
    from crs.scoring.axes import AXES

    t, n, true_crs = tally.t, tally.n, tally.true_crs
    datasets = datasets or [bc.Dataset(j, 0, 0, 0) for j in range(t.axis_dataset_hits.shape[1])]
    diff = t.diff_hits / n
    spread = float(true_crs.max() - true_crs.min())
    mean_spread = float(tally.true_mean.max() - tally.true_mean.min())
    return {
        "scenario": name, "crs_version": version, "replications": n, "bootstrap": n_bootstrap, "unit": "both",
        "test_images": [ds.n for ds in datasets], "shift_images": [ds.shift_n for ds in datasets],
        "true_crs": [round(float(c), 2) for c in true_crs],
        "coverage": {
            "crs_diff": {"mean": round(float(diff.mean()), 3), "min": round(float(diff.min()), 3),
                         "max": round(float(diff.max()), 3), "pairs": int(diff.size)},
            "axis": {a: round(float(t.axis_hits[:, k].mean() / n), 3) for k, a in enumerate(AXES)},
            "axis_min": {a: round(float(t.axis_hits[:, k].min() / n), 3) for k, a in enumerate(AXES)},
            "axis_by_dataset": {a: {str(ds.n): round(float(t.axis_dataset_hits[:, j, k].mean() / n), 3)
                                    for j, ds in enumerate(datasets)} for k, a in enumerate(AXES)},
            "pairs": _pair_test(t.diff_hits, t.diff_below, n),
        },
        "bias": _bias(tally),
        "width": round(float((t.diff_width / n).mean()) / spread, 4),
        "width_points": round(float((t.diff_width / n).mean()), 2), "true_crs_spread": round(spread, 2),
        "power": {str(g): round(float(s / n), 3) for g, s in zip(gaps, t.separated, strict=True)},
        "power_one_axis": {f"{ONE_AXIS[0]}+{ONE_AXIS[1]}": round(float(t.one_axis[0] / n), 3)},
        "power_top_pairs": _top_pairs(tally, t.diff_separated / n),
        "baseline": {"width": round(float(t.mean_width[0] / n) / mean_spread, 4),
                     "power": {str(g): round(float(s / n), 3) for g, s in zip(gaps, t.mean_separated, strict=False)},
                     "power_one_axis": {f"{ONE_AXIS[0]}+{ONE_AXIS[1]}": round(float(t.mean_separated[-1] / n), 3)}},
        "best_set": {"coverage": round(float(t.best_hits[0] / n), 3), "mean_size": round(float(t.best_size[0] / n), 2),
                     "tier_coverage": round(float(t.tier_hits[0] / n), 3),
                     "tier_mean_size": round(float(t.tier_size[0] / n), 2),
                     "union_coverage": round(float(t.union_hits[0] / n), 3),
                     "union_mean_size": round(float(t.union_size[0] / n), 2)},
        "monte_carlo_half_width": round(1.96 * math.sqrt(0.95 * 0.05 / n), 4),
        "seconds": round(seconds, 1), "partial": partial,
    }


def _top_three_pairs(tally: Tally) -> list[int]:
    """The pair indices (of ``tally.i``, ``tally.j``) whose encoders are both among the true top three."""
    top = set(np.argsort(-tally.true_crs)[:3].tolist())
    return [k for k, (a, b) in enumerate(zip(tally.i, tally.j)) if a in top and b in top]


def _bias(tally: Tally) -> dict:
    """The point estimate's mean error (CRS points) for the pairs of the true top three, and its largest |value|."""
    pairs = _top_three_pairs(tally)
    err = tally.t.diff_error / max(tally.n, 1)
    return {"top_pairs_max_abs": round(float(np.abs(err[pairs]).max()), 3),
            "top_pairs": {f"{tally.i[k]}-{tally.j[k]}": round(float(err[k]), 3) for k in pairs},
            "all_pairs_max_abs": round(float(np.abs(err).max()), 3)}


def _top_pairs(tally: Tally, separated: np.ndarray) -> dict:
    return {f"{tally.i[k]}-{tally.j[k]}": round(float(separated[k]), 3) for k in _top_three_pairs(tally)}


def _pair_test(hits: np.ndarray, below: np.ndarray, n: int) -> dict:
    """Each pair's coverage against PAIR_FLOOR: a one-sided binomial test per pair at 5 % / pairs (Bonferroni);
    and the side of the misses (truth below or above the interval) for pairs with 10 or more misses: how many
    miss more than two thirds on one side, how many would on average if every pair's misses fell on either side
    with probability 1/2 (m misses: P(the larger side of Binomial(m, 1/2) > 2m/3)), and how many are lopsided
    by a two-sided binomial test of 1/2 at 5 % / those pairs (Bonferroni)."""
    from scipy.stats import binom, binomtest

    p = binom.cdf(hits, n, PAIR_FLOOR)  # P(this few hits or fewer | coverage = PAIR_FLOOR)
    misses = (n - hits).astype(int)
    below = below.astype(int)
    heavy = misses >= 10
    one_sided = heavy & (np.maximum(below, misses - below) > 2 * misses / 3)
    chance = [2 * binom.sf(np.floor(2 * m / 3), m, 0.5) for m in misses[heavy]]  # each side > 2m/3
    by_chance = sum(chance)
    lopsided = sum(binomtest(int(b), int(m)).pvalue < 0.05 / max(int(heavy.sum()), 1)
                   for b, m in zip(below[heavy], misses[heavy], strict=True))
    return {"below_floor": int((p < 0.05 / hits.size).sum()), "floor": PAIR_FLOOR,
            "smallest_p": float(p.min()), "misses_below": int(below.sum()), "misses_above": int((misses - below).sum()),
            "one_sided_pairs": int(one_sided.sum()), "pairs_with_10_misses": int(heavy.sum()),
            "one_sided_if_symmetric": round(float(by_chance), 1),
            "one_sided_p": round(_at_least(chance, int(one_sided.sum())), 4), "lopsided_pairs": int(lopsided)}


def _at_least(chances: list[float], k: int) -> float:
    """P(k or more of independent events with these chances happen): the Poisson-binomial tail, exact by convolution.
    For the one-sided pairs under symmetric misses; pairs that share an encoder are not independent, so it is a
    guide, not a test."""
    dist = np.ones(1)
    for c in chances:
        dist = np.convolve(dist, [1 - c, c])
    return float(dist[k:].sum())


def main() -> None:
    """``python benchmarks/crs_versions.py CACHE.npz [CACHE.npz ...] [--c-unbiased]``: the figures of the cached
    benchmarks (``tune`` with the constants as they are), one JSON line per version."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("caches", nargs="+")
    ap.add_argument("--c-unbiased", action="store_true", help="the diagnostic of ``tune``: C's mean error taken out")
    a = ap.parse_args()
    for row in tune(a.caches, {}, c_unbiased=a.c_unbiased):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
