"""Temperature scaling against scipy's scalar minimiser and a known temperature."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.metrics import log_loss

from crs.foundations.labels import TASKS, targets
from crs.scoring import metrics, temperature


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_recovers_the_temperature_that_sharpened_calibrated_probabilities():
    rng = np.random.default_rng(0)
    n, k = 4000, 4
    z = rng.normal(size=(n, k)) * 2.0
    y = np.array([rng.choice(k, p=p) for p in softmax(z)])  # calibrated by construction
    overconfident = softmax(z * 2.5)  # T = 2.5 undoes it
    t, known = targets(y, "multiclass", k)
    got = temperature.fit(overconfident, t, known, "multiclass")
    assert got == pytest.approx(2.5, rel=0.1)


@pytest.mark.parametrize("task", TASKS)
def test_matches_scipy_minimum_and_lowers_nll(task):
    rng = np.random.default_rng(1)
    n, k = 300, 3
    if task == "multiclass":
        labels = rng.integers(0, k, n)
        p = softmax(3 * rng.normal(size=(n, k)) + 2 * np.eye(k)[labels])
    else:
        labels = rng.integers(-1, 2, (n, k)).astype(np.int8)
        p = 1 / (1 + np.exp(-(3 * rng.normal(size=(n, k)) + 2 * (2 * (labels == 1) - 1))))
    t, known = targets(labels, task, k)

    def nll(log_t):
        q = temperature.scale(p, np.exp(log_t), task)
        return metrics.nll(metrics.long_table(q, labels, task), (), task).item()

    want = np.exp(minimize_scalar(nll, bounds=temperature.LOG_T_RANGE, method="bounded",
                                  options={"xatol": 1e-8}).x)
    got = float(temperature.fit(p, t, known, task))
    assert got == pytest.approx(want, rel=1e-3)
    assert nll(np.log(got)) <= nll(0.0) + 1e-12
    if task == "multiclass":  # T = 1 leaves probabilities unchanged, up to the eps clip
        assert temperature.scale(p, np.array(1.0), task) == pytest.approx(p, abs=1e-6)
        assert log_loss(labels, temperature.scale(p, np.array(got), task)) == pytest.approx(nll(np.log(got)))


def test_vectorised_over_probes_equals_one_by_one():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 80)
    p = softmax(rng.normal(size=(2, 3, 80, 3)) * rng.uniform(0.5, 4, size=(2, 3, 1, 1)))
    t, known = targets(labels, "multiclass", 3)
    all_at_once = temperature.fit(p, t, known, "multiclass")
    assert all_at_once.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert all_at_once[i, j] == pytest.approx(float(temperature.fit(p[i, j], t, known, "multiclass")))
