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
QUICK = {"paper": (QUICK_PAPER, PAPER_ENCODERS)}
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
    x = bc.true_axes((ds,), (enc,))[0, 0]
    if version == "2":
        x[1] = 1.0 - population_ce(enc.strength * ds.base, ds.prevalence, enc)
    return x


def power_pair(gap: float, datasets) -> tuple[tuple[bc.Encoder, ...], tuple[bc.Encoder, ...]]:
    """(A, B) per dataset: B's true D, L, R are A's plus ``gap`` exactly and its v2 calibration error A's
    minus ``gap``, on every dataset (each parameter solved with brentq)."""
    pairs = [_pair_one(gap, ds) for ds in datasets]
    return tuple(a for a, _ in pairs), tuple(b for _, b in pairs)


def _pair_one(gap: float, ds) -> tuple[bc.Encoder, bc.Encoder]:
    """(A, B) on one dataset, as ``power_pair`` describes."""
    a = BASE
    ta = {v: _true_one(a, ds, v) for v in VERSIONS}
    if gap == 0.0:
        return a, a
    d_b = ta["1"][0] + gap
    strength = math.sqrt(2) * _ndtri(d_b) / ds.base
    delta = strength * ds.base

    def l_of(k: float) -> float:
        b = a._replace(strength=strength, low=tuple(h * k for h in a.low))
        return _true_one(b, ds, "1")[2]

    k_low = brentq(lambda k: l_of(k) - (ta["1"][2] + gap), 0.5, 1.0 / min(a.low) - 1e-9)

    def r_of(k: float) -> float:
        b = a._replace(strength=strength, perturbed=tuple(min(r * k, 1.2) for r in a.perturbed),
                       shift=a.shift * k)
        return _true_one(b, ds, "1")[3]

    k_rob = brentq(lambda k: r_of(k) - (ta["1"][3] + gap), 0.5, 1.0 / max(a.perturbed) - 1e-9)
    b = a._replace(strength=strength, low=tuple(h * k_low for h in a.low),
                   perturbed=tuple(r * k_rob for r in a.perturbed), shift=a.shift * k_rob)
    ce_a = 1.0 - ta["2"][1]

    def ce_of(t: float) -> float:  # t in [0, 1]: slope and offset moved towards calibrated
        c = b._replace(gamma=b.gamma + t * (1.0 - b.gamma), beta=b.beta * (1.0 - t))
        return population_ce(delta, ds.prevalence, c)

    t = brentq(lambda t: ce_of(t) - max(ce_a - gap, 0.0), 0.0, 1.0) if ce_of(1.0) < ce_a - gap else 1.0
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
    diff_width: np.ndarray  # [pair], summed
    axis_hits: np.ndarray  # [encoder, axis]
    axis_dataset_hits: np.ndarray  # [encoder, dataset, axis]
    separated: np.ndarray  # [gap]


def benchmark_encoders(datasets, scenario_encoders=PAPER_ENCODERS, gaps=GAPS):
    """(every simulated encoder's parameters per dataset: the scenario's, A, then B_g per gap; the truth per
    version)."""
    paper = [tuple(e for _ in datasets) for e in scenario_encoders]
    pairs = {g: power_pair(g, datasets) for g in gaps}
    encoders = paper + [pairs[gaps[0]][0]] + [pairs[g][1] for g in gaps]
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


class Tally:
    """Coverage, widths and separations of one version summed over simulated benchmarks."""

    def __init__(self, truth: np.ndarray, version: str, n_datasets: int, n_gaps: int, n_encoders: int):
        from crs.scoring.crs import score

        n = self.n_encoders = n_encoders
        self.truth, self.version, self.n = truth, version, 0
        self.true_crs = score(truth[:n], "median", version=version).crs
        self.i, self.j = np.triu_indices(n, 1)
        self.power_sets = [list(range(n - 2)) + [n, n + 1 + k] for k in range(n_gaps)]
        self.t = Totals(np.zeros(self.i.size), np.zeros(self.i.size), np.zeros((n, 4)),
                        np.zeros((n, n_datasets, 4)), np.zeros(n_gaps))

    def add(self, x: np.ndarray, draw_seed: int) -> None:
        """One benchmark's x [1 + replicate, encoder, dataset, seed, axis]."""
        from crs.scoring.bootstrap import draw_seeds, interval, score_replicates, seed_means_of

        n, t, v, truth = self.n_encoders, self.t, self.version, self.truth
        draw = draw_seeds(SEEDS, x.shape[0] - 1, draw_seed)
        m = seed_means_of(x[1:].astype(float), draw)  # [replicate, encoder, dataset, axis]
        reps = score_replicates(m[:, :n], "median", version=v)
        low, high = interval(reps.crs[:, self.i] - reps.crs[:, self.j])
        want = self.true_crs[self.i] - self.true_crs[self.j]
        t.diff_hits[:] += (low <= want + 1e-12) & (want - 1e-12 <= high)
        t.diff_width[:] += high - low
        low, high = interval(reps.axis)
        want = truth[:n].mean(axis=1)
        t.axis_hits[:] += (low <= want + 1e-12) & (want - 1e-12 <= high)
        low, high = interval(m[:, :n])
        t.axis_dataset_hits[:] += (low <= truth[:n] + 1e-12) & (truth[:n] - 1e-12 <= high)
        for k, idx in enumerate(self.power_sets):
            g_reps = score_replicates(m[:, idx], "median", version=v)
            low, high = interval(g_reps.crs[:, -1] - g_reps.crs[:, -2])
            t.separated[k] += (low > 0) | (high < 0)
        self.n += 1


def tune(paths: list[str], grid: dict, gaps=GAPS) -> list[dict]:
    """v2's figures on cached benchmarks (``crs_versions_cache.py``) for every combination of the constants in
    ``grid`` ({'Q_FLOOR': [...], 'DOMINANCE_SCALE': [...], 'DOMINANCE_SLACK': [...], 'BALANCE_OFFSET': [...]}), and
    v1's once. ``tune(paths, {})`` gives v2's figures with the constants as they are."""
    import itertools

    from crs.scoring import crs as core

    data = [np.load(p) for p in paths]
    xs = {v: np.concatenate([d[f"x{v}"] for d in data]) for v in VERSIONS}
    truth = {v: data[0][f"truth{v}"] for v in VERSIONS}
    n_scenario = truth["1"].shape[0] - 1 - len(gaps)
    rows = []

    def run(version: str, label: dict) -> None:
        tally = Tally(truth[version], version, truth[version].shape[1], len(gaps), n_scenario)
        for r, x in enumerate(xs[version]):
            tally.add(x, 100_003 * 7 + r)
        row = _row("cached", [], version, tally, xs[version].shape[1] - 2, gaps, 0.0, False)
        rows.append({**label, **{k: row[k] for k in ("width", "width_points", "true_crs_spread", "power")},
                     "crs_diff": row["coverage"]["crs_diff"], "axis": row["coverage"]["axis"],
                     "replications": tally.n})

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


def _row(name, datasets, version, tally: Tally, n_bootstrap: int, gaps, seconds, partial):
    from crs.scoring.axes import AXES

    t, n, true_crs = tally.t, tally.n, tally.true_crs
    datasets = datasets or [bc.Dataset(j, 0, 0, 0) for j in range(t.axis_dataset_hits.shape[1])]
    diff = t.diff_hits / n
    spread = float(true_crs.max() - true_crs.min())
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
        },
        "width": round(float((t.diff_width / n).mean()) / spread, 4),
        "width_points": round(float((t.diff_width / n).mean()), 2), "true_crs_spread": round(spread, 2),
        "power": {str(g): round(float(s / n), 3) for g, s in zip(gaps, t.separated, strict=True)},
        "monte_carlo_half_width": round(1.96 * math.sqrt(0.95 * 0.05 / n), 4),
        "seconds": round(seconds, 1), "partial": partial,
    }
