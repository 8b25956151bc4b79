"""The registry of built-in synthetic datasets: one ``Spec`` record a dataset."""

from __future__ import annotations

from crs.extract.synthetic.cxr import CXR_CLASSES, cxr_group, cxr_render_for, cxr_row_for
from crs.extract.synthetic.derm import DERM_CLASSES, derm_group, render_derm, same_label
from crs.extract.synthetic.fundus import FUNDUS_CLASSES, fundus_group, render_fundus
from crs.extract.synthetic.spec import Spec
from crs.extract.table import registry


def _cxr_spec(name: str, n_images: int, test_only: bool, shift_target: str | None, description: str) -> Spec:
    return Spec(
        name=name,
        task="multilabel",
        classes=CXR_CLASSES,
        ordinal=False,
        modality="radiology",
        shift_target=shift_target,
        n_images=n_images,
        group_sizes=(0.55, 0.3, 0.15),
        group_prefix="P",
        test_only=test_only,
        draw_group=cxr_group,
        draw_row=cxr_row_for(name),
        render=cxr_render_for(name),
        description=description,
    )


# One record a dataset; adding one is a record here plus its expectations in
# tests/extract/test_synthetic.py.
SPECS: dict[str, Spec] = registry(
   (
       Spec(
          name="demo_derm",
          task="multiclass",
          classes=DERM_CLASSES,
          ordinal=False,
          modality="dermatology",
          shift_target=None,
          n_images=900,
          group_sizes=(0.5, 0.3, 0.2),
          group_prefix="L",
          test_only=False,
          draw_group=derm_group,
          draw_row=same_label,
          render=render_derm,
          description=(
              "Dermoscopy-like lesions, 5 classes imbalanced like ISIC (45/20/15/12/8%); "
              "signal in lesion colour, variegation, size, border and texture; groups "
              "are lesions imaged 1-3 times."
          ),
       ),
       Spec(
          name="demo_fundus",
          task="multiclass",
          classes=FUNDUS_CLASSES,
          ordinal=True,
          modality="ophthalmology",
          shift_target=None,
          n_images=900,
          group_sizes=(0.4, 0.6),
          group_prefix="P",
          test_only=False,
          draw_group=fundus_group,
          draw_row=same_label,
          render=render_fundus,
          description=(
              "Fundus-photograph-like, diabetic-retinopathy grade 0-4 imbalanced like "
              "APTOS (40/15/25/10/10%); signal in the count and size of red dots, blots, "
              "exudates and new vessels; groups are patients (one image an eye)."
          ),
       ),
       _cxr_spec(
           "demo_cxr",
           1100,
           test_only=False,
           shift_target="demo_cxr_site2",
           description=(
               "Chest-X-ray-like, 4 co-occurring findings (cardiomegaly, effusion, "
               "consolidation, edema; 12-25% positive; ~5% of entries uncertain, -1); "
               "signal in heart width, basal and patchy opacities and perihilar haze; "
               "groups are patients."
           ),
       ),
       _cxr_spec(
           "demo_cxr_site2",
           400,
           test_only=True,
           shift_target=None,
           description=(
               "demo_cxr's findings at a second site: another intensity curve, more "
               "noise, a zoomed and offset field of view, sicker patients; test only."
           ),
       ),
   ),
   "synthetic dataset",
)

DATASETS: tuple[str, ...] = tuple(SPECS)
MODALITY: dict[str, str] = {name: spec.modality for name, spec in SPECS.items()}


def spec_of(name: str) -> Spec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown synthetic dataset {name!r}; valid names: {', '.join(DATASETS)}") from None
