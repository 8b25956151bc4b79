"""The shared vocabulary: names every stage uses for the same thing, defined once.

* ``SPLITS`` / ``SPLIT_CODE``: the three splits of a dataset and their codes in the store.
* ``VALIDATION``: the key of a probe's validation-split probabilities among its stored
  predictions (a split, not a test condition).
* ``MODALITIES``: the imaging modalities; each has one perturbation suite.
* ``SEVERITIES``: the severities of every perturbation family.
* ``HEADS``: the probe heads (``crs.probe.run`` registers one record per name; the
  settings check a head without importing JAX).
"""

from __future__ import annotations

SPLITS = ("train", "val", "test")
SPLIT_CODE = {name: i for i, name in enumerate(SPLITS)}
VALIDATION = "validation"
MODALITIES = ("dermatology", "ophthalmology", "radiology")
SEVERITIES = (1, 2, 3, 4, 5)
HEADS = ("linear", "mlp")

# CRS definitions: v1 frozen (docs/crs-v1.md), v2 the default (docs/crs-v2.md)
CRS_VERSIONS = ("1", "2")
CRS_LATEST = "2"
