"""Every dataset kind against the ``Dataset`` protocol; the registries refuse duplicate
names; the split rules keep groups whole; dataset errors are user errors."""

import types
import typing
from collections.abc import Sequence

import numpy as np
import pytest
from datasets_fakes import make_aptos, make_chexpert, make_isic, make_mimic, write_csv
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.extract import datasets as dsreg
from crs.extract import real, splits, synthetic
from crs.extract.real import DatasetError
from crs.extract.synthetic.registry import SPECS
from crs.extract.table import Table, check_unique, registry
from crs.foundations.errors import UserError
from crs.foundations.names import MODALITIES

ATTRIBUTES = typing.get_type_hints(dsreg.Dataset)
METHODS = sorted(n for n, v in vars(dsreg.Dataset).items() if callable(v) and not n.startswith("_"))


def _csv(tmp_path, multilabel: bool):
    root = make_aptos(tmp_path / "imgs", n=12)
    paths = [f"train_images/{p.name}" for p in sorted((root / "train_images").iterdir())]
    if multilabel:
        write_csv(tmp_path / "b.csv", ["path", "label:Edema", "split"], [[p, "1", "test"] for p in paths[:3]])
        write_csv(tmp_path / "a.csv", ["path", "label:Edema"],
                  [[p, ("1", "0", "")[i % 3]] for i, p in enumerate(paths)])
        return dsreg.get(f"csv:{tmp_path / 'a.csv'}", image_root=str(root), modality="radiology",
                         shift_target=f"csv:{tmp_path / 'b.csv'}", image_size=16)
    write_csv(tmp_path / "a.csv", ["path", "label"], [[p, "ab"[i % 2]] for i, p in enumerate(paths)])
    return dsreg.get(f"csv:{tmp_path / 'a.csv'}", image_root=str(root), modality="dermatology", image_size=16)


KINDS = {
    **{name: (lambda tmp, name=name: dsreg.get(name, size=0.05)) for name in dsreg.BUILTIN},
    "isic2019": lambda tmp: dsreg.get("isic2019", roots={"isic2019": make_isic(tmp / "isic")}, image_size=16),
    "aptos2019": lambda tmp: dsreg.get("aptos2019", roots={"aptos2019": make_aptos(tmp / "aptos")}, image_size=16),
    "chexpert": lambda tmp: dsreg.get("chexpert", roots={"chexpert": make_chexpert(tmp)}, image_size=16),
    "mimic-cxr": lambda tmp: dsreg.get("mimic-cxr", roots={"mimic-cxr": make_mimic(tmp / "mimic")}, image_size=16),
    "csv multiclass": lambda tmp: _csv(tmp, multilabel=False),
    "csv multilabel": lambda tmp: _csv(tmp, multilabel=True),
}


def _conforms(value, hint) -> bool:
    """``value`` is of the annotated type (unions, None, tuples of str, abstract containers)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(isinstance(v, args[0]) for v in value)
    return isinstance(value, origin or hint)


def test_the_protocol_names_what_callers_use():
    assert {"name", "task", "classes", "ordinal", "modality", "shift_target", "shift_spec", "description", "source",
            "size", "seed", "image_size", "provenance", "paths"} == set(ATTRIBUTES)
    assert METHODS == ["images", "load_image", "table"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_dataset_kind_has_every_member(kind, tmp_path):
    ds = KINDS[kind](tmp_path)
    missing = object()
    wrong = {m: getattr(ds, m, missing) for m, hint in ATTRIBUTES.items()
             if not _conforms(getattr(ds, m, missing), hint)}
    assert not wrong, f"{kind}: members not as the protocol says: {wrong}"
    assert ds.modality in MODALITIES and ds.task in ("multiclass", "multilabel")
    t = ds.table()
    assert isinstance(t, Table) and len(t.ids) == len(t.split) > 1
    n = ds.image_size
    images = ds.images([1, 0])
    assert images.shape == (2, n, n, 3) and images.dtype == np.uint8
    assert np.array_equal(ds.load_image(0), images[1])
    if kind in dsreg.BUILTIN:
        assert (ds.source, ds.provenance, ds.paths, ds.shift_spec) == ("builtin synthetic benchmark", None, None, None)
    else:
        assert ds.size == 1.0 and ds.source == ds.provenance["source"] and len(ds.paths) == len(t.ids)
        assert ds.paths[1] == ds.path(1) and ds.paths[:2] == [ds.path(0), ds.path(1)]
        ident = ds.provenance["identity"]  # what the store compares before mixing embeddings of two datasets
        assert ident["image_root"] == str(ds.root) and ident["image_size"] == n
        assert ident["csv_sha256"] and all(len(v) == 64 for v in ident["csv_sha256"].values())


def test_shift_spec_is_what_the_user_named(tmp_path):
    ds = _csv(tmp_path, multilabel=True)
    assert ds.shift_spec == f"csv:{tmp_path / 'b.csv'}" and ds.shift_target == "b"
    assert dsreg.shift_target_of(ds, modality="radiology", image_size=16).name == "b"
    assert dsreg.get("demo_cxr", size=0.05).shift_spec is None
    assert dsreg.shift_target_of(dsreg.get("demo_cxr", size=0.05)).name == "demo_cxr_site2"


def test_registries_refuse_a_duplicate_name():
    spec = SPECS["demo_derm"]
    with pytest.raises(ValueError, match="synthetic dataset 'demo_derm' is registered twice"):
        registry([spec, SPECS["demo_cxr"], spec], "synthetic dataset")
    isic = real.LAYOUTS["isic2019"]
    with pytest.raises(ValueError, match="dataset layout 'isic2019' is registered twice"):
        registry([isic, isic], "dataset layout")
    with pytest.raises(ValueError, match="dataset 'demo_cxr' is registered twice"):
        check_unique([*dsreg.BUILTIN, "demo_cxr"], "dataset")
    assert list(registry([spec, isic], "dataset")) == ["demo_derm", "isic2019"]


def test_registry_records_name_a_known_modality():
    assert {n: synthetic.MODALITY[n] for n in synthetic.DATASETS} == {
        "demo_derm": "dermatology", "demo_fundus": "ophthalmology", "demo_cxr": "radiology",
        "demo_cxr_site2": "radiology"}
    assert all(lay.modality in MODALITIES for lay in real.LAYOUTS.values())
    assert not set(dsreg.BUILTIN) & set(dsreg.REAL)


def test_dataset_errors_are_user_errors(tmp_path):
    assert issubclass(DatasetError, UserError) and issubclass(DatasetError, ValueError)
    with pytest.raises(UserError, match="--root aptos2019=DIR"):
        dsreg.get("aptos2019")
    with pytest.raises(UserError, match="--size must be positive"):
        dsreg.get("demo_derm", size=0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=60), st.integers(0, 3), st.integers(0, 2**16))
def test_deal_split_deals_in_the_stratified_order_and_keeps_the_shares(sizes, n_strata, seed):
    sizes = np.array(sizes)
    stratum = np.random.default_rng(seed).integers(0, n_strata + 1, len(sizes))
    order = splits.stratified_order(stratum, np.random.default_rng(seed))
    assert sorted(order.tolist()) == list(range(len(sizes))) and (np.diff(stratum[order]) >= 0).all()
    split = splits.deal_split(stratum, sizes, np.random.default_rng(seed))
    assert split.dtype == np.int8 and set(split.tolist()) <= {0, 1, 2}
    # A slow reference: deal in the same order, each group to the split with the largest deficit.
    dealt, total = [0.0, 0.0, 0.0], 0
    for g in order.tolist():
        total += int(sizes[g])
        deficit = [f * total - d for f, d in zip(splits.FRACTIONS, dealt)]
        s = deficit.index(max(deficit))
        assert split[g] == s
        dealt[s] += int(sizes[g])
    images = np.bincount(split, weights=sizes, minlength=3)
    assert (np.abs(images - np.array(splits.FRACTIONS) * sizes.sum()) <= sizes.max()).all()


def test_paths_is_a_sequence_built_on_demand(tmp_path):
    ds = dsreg.get("aptos2019", roots={"aptos2019": make_aptos(tmp_path / "aptos", n=10)})
    assert isinstance(ds.paths, Sequence) and list(ds.paths) == [ds.path(r) for r in range(10)]
    assert ds.paths[-1] == ds.path(9)
