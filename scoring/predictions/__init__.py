"""The scoring stage's edge to the store: stored probabilities -> image-bootstrap axes and metrics.

``crs probe`` writes test probabilities [seed, fraction, image, class] per (dataset,
encoder, condition); the image axis is the dataset's test rows in store order (for a
shift condition ``shift:T``, T's test rows), and the validation-split probabilities of
the same probes under the condition name ``validation``. This package reads them
(``read``) and hands arrays to the pure cores in ``resample``, ``temperature`` and ``metrics``.

Images that extract could not decode (the store's failures table) keep their rows in
the stored arrays but are dropped here, from targets and probabilities alike, so no
metric, bootstrap or reliability bin counts them.
"""

from crs.scoring.predictions.image_bootstrap import image_bootstrap_axes
from crs.scoring.predictions.read import (
    MissingPredictions,
    Predictions,
    calibration_losses,
    conditions_of,
    counted_rows,
    prediction_attrs,
    split_targets,
)
from crs.scoring.predictions.stored_metrics import MetricsPass, ProbeMetrics, probe_metrics

__all__ = [
    "MetricsPass", "MissingPredictions", "Predictions", "ProbeMetrics", "calibration_losses", "conditions_of",
    "counted_rows", "image_bootstrap_axes", "prediction_attrs", "probe_metrics", "split_targets",
]
