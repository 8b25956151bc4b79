"""The shared vocabulary: names every stage uses for the same thing, defined once.

* ``SPLITS`` / ``SPLIT_CODE``: the three splits of a dataset and their codes in the store.
* ``VALIDATION``: the key of a probe's validation-split probabilities among its stored
  predictions (a split, not a test condition).
* ``MODALITIES``: the imaging modalities; each has one perturbation suite.
* ``SEVERITIES``: the severities of every perturbation family.
* ``PERTURBATION_GENERATORS``: the generators of the perturbations' random draws, oldest first;
  the last is the one ``crs extract`` draws with (``crs.extract.perturb.GENERATOR``).
* ``HEADS``: the probe heads (``crs.probe.run`` registers one record per name; the
  settings check a head without importing JAX).
"""

from __future__ import annotations

SPLITS = ("train", "val", "test")
SPLIT_CODE = {name: i for i, name in enumerate(SPLITS)}
VALIDATION = "validation"
MODALITIES = ("dermatology", "ophthalmology", "radiology")
SEVERITIES = (1, 2, 3, 4, 5)
# counter-lowbias32-v1: a counter-based hash of (image id, condition, position) on the image's device
# (crs.extract.noise). The same image under another generator is another image: a store's perturbed
# embeddings of a dataset share one. (Stores of unreleased development drew with a torch.Generator per image
# and recorded no generator; they are refused, not read: crs.store.generators.)
PERTURBATION_GENERATORS = ("counter-lowbias32-v1",)
HEADS = ("linear", "mlp")

# CRS definitions: v1 frozen (docs/crs-v1.md), v2 the default (docs/crs-v2.md)
CRS_VERSIONS = ("1", "2")
CRS_LATEST = "2"
