"""Condition names, shared by every stage.

A condition is what the test images went through before the encoder saw them:

* ``clean``: nothing;
* ``FAMILY@SEVERITY``: a perturbation family at severity 1..5, e.g. ``gaussian_noise@3``;
* ``shift:DATASET``: the clean test split of another dataset (a change of site).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLEAN = "clean"
_PERTURBED = re.compile(r"^([a-z][a-z0-9_]*)@([1-9][0-9]*)$")
_SHIFT = re.compile(r"^shift:([A-Za-z0-9][A-Za-z0-9_.\-]*)$")


@dataclass(frozen=True)
class Condition:
    kind: str  # "clean" | "perturbed" | "shift"
    family: str | None = None  # perturbation family, for kind == "perturbed"
    severity: int | None = None  # 1..5, for kind == "perturbed"
    dataset: str | None = None  # target dataset, for kind == "shift"

    @property
    def name(self) -> str:
        if self.kind == "clean":
            return CLEAN
        if self.kind == "perturbed":
            return f"{self.family}@{self.severity}"
        return f"shift:{self.dataset}"


def parse(name: str) -> Condition:
    """Parse a condition name; raises ValueError naming the bad value."""
    if name == CLEAN:
        return Condition("clean")
    if m := _PERTURBED.match(name):
        return Condition("perturbed", family=m.group(1), severity=int(m.group(2)))
    if m := _SHIFT.match(name):
        return Condition("shift", dataset=m.group(1))
    raise ValueError(
        f"unknown condition {name!r}: expected 'clean', 'FAMILY@SEVERITY' "
        "(e.g. 'gaussian_noise@3') or 'shift:DATASET'"
    )


def perturbed(family: str, severity: int) -> str:
    return f"{family}@{severity}"


def shift(dataset: str) -> str:
    return f"shift:{dataset}"
