"""``temperature.fit`` (safeguarded Newton on the derivative in beta = 1/T) against slow references:
a one-probe bisection on the sign of the derivative written out here, and a golden-section search
on log T (which stops where NLL differences sink below float noise, ~1e-7 in log T)."""

from __future__ import annotations

import numpy as np
import pytest

from crs.foundations.labels import targets
from crs.scoring import temperature


def _probes(task, rng, m=6, n=400, k=4):
    scales = rng.uniform(0.1, 8.0, (m, 1, 1))  # from nearly flat to very overconfident
    if task == "multiclass":
        labels = rng.integers(0, k, n)
        z = scales * rng.normal(size=(m, n, k)) + 1.5 * np.eye(k)[labels]
        p = np.exp(z - z.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
    else:
        labels = rng.integers(-1, 2, (n, k)).astype(np.int8)
        p = 1.0 / (1.0 + np.exp(-(scales * rng.normal(size=(m, n, k)) + (2.0 * (labels == 1) - 1.0))))
    t, known = targets(labels, task, k)
    return p.astype(np.float32), t, known


def _slope(z, t, known, task, beta):
    """d NLL / d beta of one probe, written out: E_p[z] - z_y (multi-class), (sigmoid - y) z over known
    (multi-label)."""
    if task == "multiclass":
        p = np.exp(beta * z)
        p /= p.sum(-1, keepdims=True)
        return float(((p * z).sum(-1) - (z * t).sum(-1)).mean())
    s = 1.0 / (1.0 + np.exp(-beta * z))
    per_label = ((s - t) * z * known).sum(0) / np.maximum(known.sum(0), 1)
    return float(per_label.mean())


def _bisect(p, t, known, task):
    z = temperature.logits(p, task)
    lo, hi = 1 / 20, 20.0
    if _slope(z, t, known, task, lo) >= 0:
        return 20.0
    if _slope(z, t, known, task, hi) <= 0:
        return 1 / 20
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _slope(z, t, known, task, mid) < 0 else (lo, mid)
    return 1 / ((lo + hi) / 2)


def _golden(p, t, known, task):
    """A golden-section search on log T: a slow reference for ``fit``."""
    def f(log_t):
        return temperature.nll(p, t, known, task, np.exp(log_t))

    g = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = temperature.LOG_T_RANGE
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(48):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return float(np.exp((a + b) / 2))


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_fit_is_the_root_of_the_derivative_and_no_worse_than_the_golden_section(task):
    p, t, known = _probes(task, np.random.default_rng(0 if task == "multiclass" else 1))
    got = temperature.fit(p, t, known, task)
    assert got.shape == (p.shape[0],)
    for i in range(p.shape[0]):
        assert np.log(got[i]) == pytest.approx(np.log(_bisect(p[i], t, known, task)), abs=1e-10)
        before = _golden(p[i], t, known, task)
        assert abs(np.log(got[i]) - np.log(before)) <= 1e-6  # the golden-section search's own precision
        nll_now, nll_before = temperature.nll(p[i], t, known, task, got[i]), temperature.nll(p[i], t, known, task,
                                                                                            before)
        assert nll_now <= nll_before + 1e-14


def test_the_ends_of_the_range_and_non_finite_probabilities():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 50)
    t, known = targets(labels, "multiclass", 3)
    separable = np.where(np.eye(3)[labels] == 1, 0.9, 0.05)  # right and underconfident: sharpen to the end
    flat = np.full((50, 3), 1 / 3)  # every T gives the same NLL: the top of the range
    broken = flat.copy()
    broken[0, 0] = np.nan
    got = temperature.fit(np.stack([separable, flat, broken]), t, known, "multiclass")
    assert got[0] == pytest.approx(1 / 20)
    assert got[1] == pytest.approx(20.0, rel=1e-15)
    assert np.isnan(got[2])
