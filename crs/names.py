"""The shared vocabulary: names every stage uses for the same thing, defined once.

* ``SPLITS`` / ``SPLIT_CODE``: the three splits of a dataset and their codes in the store.
* ``VALIDATION``: the key of a probe's validation-split probabilities among its stored
  predictions (a split, not a test condition).
* ``MODALITIES``: the imaging modalities; each has one perturbation suite.
"""

from __future__ import annotations

SPLITS = ("train", "val", "test")
SPLIT_CODE = {name: i for i, name in enumerate(SPLITS)}
VALIDATION = "validation"
MODALITIES = ("dermatology", "ophthalmology", "radiology")
