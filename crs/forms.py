"""The form in which a stored prediction array holds a probe's outputs.

``crs probe`` stores log-probabilities (``LOG_PROB``, from ``crs.probe.core.log_link``): a
probability stored as float32 rounds to exactly 1 once the other logits are about 17 below the
top one, and every such row ties in an AUROC; its log stays distinct. Arrays written before the
form was recorded hold probabilities (``PROB``) and stay readable. The array's attribute
``form`` says which; AUROC ranks the stored values as they are (both forms order the rows
alike), every other metric reads ``probabilities``, computed in float64.
"""

from __future__ import annotations

import numpy as np

from crs.errors import UserError

KEY = "form"
LOG_PROB = "log_prob"
PROB = "prob"
FORMS = (LOG_PROB, PROB)


def form_of(attrs: dict, where: str = "a prediction array") -> str:
    """The form an array's attributes record (``PROB`` where none is: written before forms existed)."""
    form = attrs.get(KEY, PROB)
    if form not in FORMS:
        raise UserError(f"{where} records its form as {form!r}, which this version does not read (one of "
                         f"{', '.join(FORMS)}); re-run `crs probe` for it, or score it with the version that wrote it")
    return form


def probabilities(values: np.ndarray, form: str) -> np.ndarray:
    """The probabilities of stored ``values`` of ``form``: exp in float64 of log-probabilities;
    stored probabilities as they are (so an older store's numbers do not move)."""
    return np.exp(np.asarray(values, np.float64)) if form == LOG_PROB else np.asarray(values)
