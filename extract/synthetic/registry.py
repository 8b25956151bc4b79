"""The registry of built-in synthetic datasets: one ``_Spec`` record a dataset."""

from __future__ import annotations

from crs.extract.synthetic.cxr import _CXR_CLASSES, _cxr_group, _cxr_render_for, _cxr_row_for
from crs.extract.synthetic.derm import _DERM_CLASSES, _derm_group, _render_derm, _same_label
from crs.extract.synthetic.fundus import _FUNDUS_CLASSES, _fundus_group, _render_fundus
from crs.extract.synthetic.spec import _Spec
from crs.extract.table import registry


def _cxr_spec(name: str, n_images: int, test_only: bool, shift_target: str | None, description: str) -> _Spec:
    return _Spec(
        name=name,
        task="multilabel",
        classes=_CXR_CLASSES,
        ordinal=False,
        modality="radiology",
        shift_target=shift_target,
        n_images=n_images,
        group_sizes=(0.55, 0.3, 0.15),
        group_prefix="P",
        test_only=test_only,
        draw_group=_cxr_group,
        draw_row=_cxr_row_for(name),
        render=_cxr_render_for(name),
        description=description,
    )


# One record a dataset; adding one is a record here plus its expectations in
# tests/extract/test_synthetic.py.
_SPECS: dict[str, _Spec] = registry(
    (
        _Spec(
            name="demo_derm",
            task="multiclass",
            classes=_DERM_CLASSES,
            ordinal=False,
            modality="dermatology",
            shift_target=None,
            n_images=900,
            group_sizes=(0.5, 0.3, 0.2),
            group_prefix="L",
            test_only=False,
            draw_group=_derm_group,
            draw_row=_same_label,
            render=_render_derm,
            description=(
                "Dermoscopy-like lesions, 5 classes imbalanced like ISIC (45/20/15/12/8%); "
                "signal in lesion colour, variegation, size, border and texture; groups "
                "are lesions imaged 1-3 times."
            ),
        ),
        _Spec(
            name="demo_fundus",
            task="multiclass",
            classes=_FUNDUS_CLASSES,
            ordinal=True,
            modality="ophthalmology",
            shift_target=None,
            n_images=900,
            group_sizes=(0.4, 0.6),
            group_prefix="P",
            test_only=False,
            draw_group=_fundus_group,
            draw_row=_same_label,
            render=_render_fundus,
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

DATASETS: tuple[str, ...] = tuple(_SPECS)
MODALITY: dict[str, str] = {name: spec.modality for name, spec in _SPECS.items()}


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise KeyError(f"unknown synthetic dataset {name!r}; valid names: {', '.join(DATASETS)}") from None
