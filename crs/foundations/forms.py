"""The form in which a stored prediction array holds a probe's outputs.

``crs probe`` stores log-probabilities (``LOG_PROB``, from ``crs.probe.core.log_link``): a
probability stored as float32 rounds to exactly 1 once the other logits are about 17 below the
top one, and every such row ties in an AUROC; its log stays distinct. The array's attribute
``form`` says so, and a reader refuses an array that records no form or another one.
AUROC ranks the stored values as they are; every other metric reads ``probabilities``, computed
in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from crs.foundations.errors import UserError

KEY = "form"
LOG_PROB = "log_prob"
FORMS = (LOG_PROB,)


def form_of(attrs: dict, where: str = "a prediction array",
            repair: str | Callable[[], str] = "re-run `crs probe` for it") -> str:
    """The form an array's attributes record; UserError (exit 2) naming ``where``, what is wrong and ``repair``
    where they record none, or one this version does not read. ``repair`` may be a function that builds the
    text: it is called only for a refusal (building a repair command reads the store)."""
    if KEY not in attrs:
        raise UserError(f"{where} records no form (attribute {KEY!r}), which every prediction array of this crs "
                        f"records (it was written by an older development version); {_text(repair)}")
    form = attrs[KEY]
    if form not in FORMS:
        raise UserError(f"{where} records its form as {form!r}, which this version does not read (one of "
                        f"{', '.join(FORMS)}); {_text(repair)}, or score it with the version that wrote it")
    return form


def _text(repair: str | Callable[[], str]) -> str:
    return repair() if callable(repair) else repair


def probabilities(values: np.ndarray) -> np.ndarray:
    """The probabilities of stored log-probabilities: exp in float64."""
    return np.exp(np.asarray(values, np.float64))
