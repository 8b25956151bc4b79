"""Reliability metrics as polars DataFrame -> DataFrame functions over a long prediction table.

The prediction table has one row per (image, class) of each evaluated probe:

    <key columns...>  image (Int64)  class (Int64)  prob (Float64)  target (Int8, 0|1)  known (Boolean)

``target`` is the one-hot label for a multi-class task and the label for a multi-label
task; ``known`` is False where a multi-label entry is unknown (always True for
multi-class). ``long_table`` builds it from stored probabilities. Every metric takes the
table and ``by`` (the key columns that identify one probe evaluation, e.g. encoder,
dataset, seed, fraction, condition) and returns one row per key with the metric, so
they chain with ``.pipe`` and never depend on the order of the rows.

AUROC and the binned calibration errors have one definition each: the numpy kernels
``weighted_auroc`` and ``binned_ece`` (``weighted``), which take multiplicities ``weights [image,
replicate]``. The table functions call them with unit weights; the image bootstrap calls
them with the resampled multiplicities of every replicate at once (``crs.scoring.resample``).
The probe's JAX copies (``crs.probe.metrics``) are tested equal to them, and ``arrays`` computes
the table metrics of many arrays of one split at once, without the long table.

Conventions (the same as the probe's run-record metrics in crs.probe.metrics):

* AUROC: Mann-Whitney U with average ranks for ties (= sklearn ``roc_auc_score``);
  multi-class: macro one-vs-rest; multi-label: mean over labels. Classes without both
  positives and negatives are left out of the mean (null if none is left).
* Equal-width bins: 15 bins, bin ``min(floor(15 c), 14)``, so bin b is [b/15, (b+1)/15)
  and the last one includes 1. (scikit-learn's ``calibration_curve`` puts a value that
  lies exactly on an inner edge in the lower bin; tests pin the difference.)
* ECE (top-label): ``sum_b (n_b / n) |acc_b - conf_b|`` on the top-label confidence;
  multi-label: mean over labels of the binary top-label ECE with confidence
  ``max(p, 1 - p)`` and prediction ``p >= 0.5`` (docs/crs-v1.md section 1).
* Classwise ECE (Kull et al. 2019): mean over classes k of
  ``sum_b (n_b / n) |mean_b y_k - mean_b p_k|``, bins on ``p_k``.
* Brier: multi-class ``mean_i sum_k (p_ik - y_ik)^2``; multi-label: mean over labels of
  the binary Brier score.
* NLL: ``-mean log p(y)`` with probabilities clipped to [eps, 1 - eps] (float32 eps)
  and renormalised (as sklearn ``log_loss``); multi-label: mean over labels of the
  binary log loss.
* Accuracy: top-1 (ties to the lowest class, as ``argmax``); multi-label: mean per-label
  accuracy at threshold 0.5. Balanced accuracy: mean recall over the classes present
  (= sklearn ``balanced_accuracy_score``); multi-label: mean over labels of the binary
  balanced accuracy at 0.5.
* Quadratic-weighted kappa (ordinal tasks): ``1 - sum_i (y_i - h_i)^2 / E`` with
  ``E = (1/n) sum_i sum_j (y_i - h_j)^2``, the same disagreement under independent
  marginals (= sklearn ``cohen_kappa_score(weights='quadratic')`` with every class listed).
* AURC (Geifman et al. 2019): order images by confidence, highest first; risk at
  coverage k/n is the error rate of the k most confident; AURC is the mean of the risks
  over k = 1..n. Within a run of tied confidences the cumulative errors grow linearly
  (the mean over orderings of the tied images), so the value does not depend on row
  order. Multi-label: mean over labels of the binary AURC.
"""

from crs.scoring.metrics.arrays import (
    ARRAY_METRICS,
    array_metrics,
    auroc_rows,
    nanmean_last,
    tie_runs,
)
from crs.scoring.metrics.tables import (
    BASE,
    accuracy,
    all_metrics,
    aurc,
    auroc,
    auroc_per_class,
    balanced_accuracy,
    binary_view,
    brier,
    classwise_ece,
    ece,
    kappa_quadratic,
    long_table,
    nll,
    reliability,
    top_label,
)
from crs.scoring.metrics.weighted import (
    EPS,
    N_BINS,
    bin_index,
    binned_ece,
    ece_draws,
    weighted_auroc,
    weighted_ece,
    weighted_macro_auroc,
)

__all__ = [
    "ARRAY_METRICS",
    "BASE",
    "EPS",
    "N_BINS",
    "accuracy",
    "all_metrics",
    "array_metrics",
    "aurc",
    "auroc",
    "auroc_per_class",
    "auroc_rows",
    "balanced_accuracy",
    "bin_index",
    "binary_view",
    "binned_ece",
    "brier",
    "classwise_ece",
    "ece",
    "ece_draws",
    "kappa_quadratic",
    "long_table",
    "nanmean_last",
    "nll",
    "reliability",
    "tie_runs",
    "top_label",
    "weighted_auroc",
    "weighted_ece",
    "weighted_macro_auroc",
]
