"""Predictions stored as log-probabilities: ranks that survive float32 saturation, probabilities in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from crs.foundations import forms
from crs.foundations.errors import UserError
from crs.probe import core
from crs.scoring.predictions import Predictions, probe_metrics


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_margins_of_40_and_50_do_not_tie_in_the_stored_form(task):
    z = np.array([[40.0, 0.0, 0.0], [50.0, 0.0, 0.0]], np.float32)
    lp = np.asarray(core.log_link(jnp.asarray(z), task))  # float32, as stored
    assert lp.dtype == np.float32 and lp[0, 0] != lp[1, 0] and lp[0, 0] < lp[1, 0] < 0
    link = jax.nn.softmax if task == "multiclass" else jax.nn.sigmoid
    p32 = np.asarray(link(jnp.asarray(z)))  # probabilities in float32
    assert p32[0, 0] == p32[1, 0] == 1.0  # saturated: these two rows tied
    z64 = z.astype(np.float64)
    if task == "multiclass":  # log p_k = z_k - z_top - log1p(sum over the other classes of exp(z_j - z_top)), by hand
        ref = np.array([[row[k] - row.max() - np.log1p(sum(np.exp(row[j] - row.max()) for j in range(3) if j != 0))
                         for k in range(3)] for row in z64])
    else:
        ref = -np.log1p(np.exp(-z64))
    np.testing.assert_allclose(lp, ref, rtol=1e-5, atol=1e-30)


def test_scoring_reads_the_form_and_ranks_the_stored_log_probabilities(make_store, tmp_path):
    store, records = make_store(tmp_path / "s.zarr", {"a": 1.0, "b": 0.6}, seeds=(0,), fractions=(1.0,))
    probs, attrs = store.read_predictions("d1", "a", "clean")
    y = store.dataset("d1").labels[store.dataset("d1").rows("test")]
    # every row saturated in float32 (top margins 20-60); half of the tops are wrong, with the smaller margins
    n = len(y)
    wrong = np.arange(n) % 2 == 1
    margin = np.where(wrong, np.linspace(20, 39, n), np.linspace(41, 60, n))
    z = np.zeros(probs.shape, np.float32)
    z[0, 0, np.arange(n), (y + wrong) % 3] = margin
    lp = np.asarray(core.log_link(jnp.asarray(z), "multiclass"))
    store.write_predictions("d1", "a", "clean", lp, {**attrs, forms.KEY: forms.LOG_PROB})
    pred = Predictions(store, "d1", "a", "clean")
    assert pred.form == forms.LOG_PROB and pred.scores.dtype == np.float32 and pred.probs.dtype == np.float64
    np.testing.assert_array_equal(pred.probs, np.exp(lp.astype(np.float64)))
    found = probe_metrics(store, records, ["a"], ["d1"])
    got = found.metrics.filter(pl.col("condition") == "clean")["auroc"]
    per_class = found.per_class.filter(pl.col("condition") == "clean").sort("class")["auroc"].to_list()
    assert per_class == pytest.approx([roc_auc_score(y == k, lp[0, 0, :, k]) for k in range(3)], abs=1e-12)
    def ovr(scores):  # macro one-vs-rest, as crs.scoring.metrics computes it
        return np.mean([roc_auc_score(y == k, scores[:, k]) for k in range(3)])

    want, saturated = ovr(lp[0, 0]), ovr(np.exp(lp[0, 0]).astype(np.float32))
    assert got.item() == pytest.approx(want, abs=1e-12) and abs(want - saturated) > 0.05
    # an array that records no form (probabilities, as unreleased development stored them) is refused
    probs, attrs = store.read_predictions("d1", "b", "clean")
    store.write_predictions("d1", "b", "clean", np.exp(probs), {k: v for k, v in attrs.items() if k != forms.KEY})
    with pytest.raises(UserError, match=r"b/d1/clean .* records no form .*write them again with `crs probe "
                                        r"--encoder b --dataset d1 --store"):
        Predictions(store, "d1", "b", "clean")


def test_an_unknown_form_is_refused_with_the_repair():
    with pytest.raises(UserError, match="records its form as 'logit'.*re-run `crs probe`"):
        forms.form_of({"form": "logit"})


def test_reading_sound_predictions_builds_no_repair_command(make_store, tmp_path, monkeypatch):
    """The repair command reads the store (every sibling array's attributes, where none records its run): built
    for every array read, it made a paper-scale `crs score` eight times slower. Only a refusal builds it."""
    from crs.scoring.predictions import read

    store, _ = make_store(tmp_path / "s.zarr", {"a": 1.0}, seeds=(0,), fractions=(1.0,))
    built = []
    monkeypatch.setattr(read, "probe_command", lambda *a: built.append(a) or "`crs probe ...`")
    Predictions(store, "d1", "a", "clean")
    assert built == []
    probs, attrs = store.read_predictions("d1", "a", "clean")
    store.write_predictions("d1", "a", "clean", probs, {k: v for k, v in attrs.items() if k != forms.KEY})
    with pytest.raises(UserError, match=r"records no form .*write them again with `crs probe \.\.\.`"):
        Predictions(store, "d1", "a", "clean")
    assert built == [(store.path, "d1", "a")]
