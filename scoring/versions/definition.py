"""What a CRS version is: one frozen ``Definition`` record (docs/crs-v1.md, docs/crs-v2.md), registered in
``crs.scoring.versions``. Code that scores, bootstraps, warns or writes the report asks the record, never the
version's number."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from crs.scoring.versions.common import reference_values


@dataclass(frozen=True)
class Calibration:
    """How a version estimates the calibration axis C of one run.

    ``from_store``: C is computed from the store's test probabilities (the score needs ``--store``), not taken from
    the run records; ``unclipped``: C may lie above 1 (an unbiased estimate of a loss near 0), so resampling leaves
    it unclipped (``crs.scoring.bootstrap.unclipped_axis``)."""

    name: str
    from_store: bool
    unclipped: bool


# C = 1 - the run records' 15-bin top-label ECE (docs/crs-v1.md section 1)
BINNED_ECE = Calibration("binned_ece", from_store=False, unclipped=False)
# C = 1 - kappa S, S the debiased squared calibration error of the stored probabilities (crs.scoring.calibration)
SQUARED_ERROR = Calibration("squared_error", from_store=True, unclipped=True)


@dataclass(frozen=True)
class Words:
    """What the report and the warnings say about a version. Each function takes the constants a scores.json
    recorded (``settings.crs_constants``; {} for a version without constants) and returns plain text."""

    q: Callable[[Mapping], str]  # the Methods section's q sentence
    calibration: Callable[[Mapping], str]  # what C is
    worst: Callable[[Mapping], str]  # what Worst is
    balance: Callable[[Mapping], str]  # what Bal is
    calibration_shift: str | None  # why C's intervals may sit off-centre; None: the general reason applies


@dataclass(frozen=True)
class Definition:
    """One CRS version.

    ``q(x, reference)``: reference-relative scores q [..., encoder, dataset, axis] from seed-mean axis values x (a
    version that takes out noise also takes ``noise=``, the variance of x - x_ref an estimate carries);
    ``components(q, noise)``: (Dom, Bal, Worst) [..., encoder] from the overall q [..., encoder, axis];
    ``takes_out_noise``: its estimate takes the bootstrap's noise out of the smoothing scales
    (``crs.scoring.crs.estimate``), so ``components`` reads ``noise``; otherwise ``noise`` is ignored;
    ``constants``: what every output of this version records (``settings.crs_constants``);
    ``lipschitz_bound(n_datasets, weights)``: the worst-case slope of CRS in one axis value, None where the version
    states none; ``spec``: its definition's file in docs/; ``reference(x, reference)``: x_ref, by which q is relative
    (a version that takes out noise also takes ``noise=``, the variance of each x_e)."""

    number: str  # as crs records it ("1", "2")
    spec: str
    q: Callable[..., np.ndarray]
    components: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
    takes_out_noise: bool
    calibration: Calibration
    words: Words
    constants: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    lipschitz_bound: Callable[..., float] | None = None
    reference: Callable[..., np.ndarray] = reference_values  # (x, reference) -> x_ref [..., dataset, axis]

    @property
    def docs_path(self) -> str:
        """The definition's page, by its path in the repository."""
        return f"docs/{self.spec}"
