"""Built-in synthetic benchmark datasets: procedurally drawn stand-ins for real medical sets.

``crs demo`` runs the whole pipeline on these, with no download and no patient data.
Every dataset is made on the fly from ``(name, seed)`` (numpy only, float32, vectorised
over the pixel grid).

* ``demo_derm``: dermoscopy, 5 classes, imbalanced like ISIC; groups are lesions.
* ``demo_fundus``: colour fundus photographs, diabetic-retinopathy grade 0..4 (ordinal),
  imbalanced like APTOS; groups are patients.
* ``demo_cxr``: chest X-rays, 4 co-occurring findings (multi-label, ~5% of the entries
  uncertain, stored as -1); groups are patients; its shift target is ``demo_cxr_site2``.
* ``demo_cxr_site2``: the same findings acquired at another site (other intensity curve,
  more noise, another field of view, somewhat sicker patients); every row is test.

Determinism. A group's (lesion's, patient's) look and the labels of its images come from
a generator keyed by ``(sha256(name), seed, 0, group)``, and an image's own nuisances
(pose, lighting, noise) from one keyed by ``(..., 1, row)``. Groups are laid out one
after another until the dataset is full, so image ``i`` depends on ``(name, seed, i)``
only: the same whatever rows are asked for, in any order, in any process, at any
``size`` that still holds row ``i``. The split (key ``(..., 2)``) is the one thing that
depends on ``size``.

Difficulty. The label signal is spread over colour, shape and texture, with wide
within-class spread and overlap between classes, so a logistic probe on 16x16 pixels or
on colour histograms lands well between chance and perfect (tests/extract/test_synthetic.py).

Modules: ``dataset`` (``SyntheticDataset``, its plan and ``get``), ``registry`` (one record
a dataset), ``spec`` (the record and the keyed generators), ``draw`` (shared drawing
helpers) and one renderer a modality: ``derm``, ``fundus``, ``cxr``.
"""

from crs.extract.synthetic.dataset import SOURCE, SyntheticDataset, get
from crs.extract.synthetic.registry import DATASETS, MODALITY

__all__ = ["DATASETS", "MODALITY", "SOURCE", "SyntheticDataset", "get"]
