"""One dataset read as `crs extract` reads it, for `crs datasets check` and `crs perturbations`:
opened with the config's dataset options, its files checked, a perturbation grid drawn on one image."""

from __future__ import annotations

import dataclasses
import shlex

from crs.extract.options import DatasetOptions
from crs.foundations.config import Config
from crs.foundations.errors import BadInput, UserError

# A label and class check of the data stage (one class only, a split without a class the probe needs, ...):
# ``extract.real.<LABEL_CHECK>(ds) -> list[Problem]``, called where that stage has it.
LABEL_CHECK = "check_labels"



def dataset_options(cfg: Config) -> dict:
    """The datasets section of ``cfg`` as keywords of ``crs.extract.datasets.get`` (``DatasetOptions``' fields)."""
    return dataclasses.asdict(DatasetOptions.from_config(cfg))


def named_datasets(cfg: Config) -> list:
    """The config's datasets, opened as extraction opens them (a CSV read, a folder indexed; no image decoded)."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them

    opts, ds = dataset_options(cfg), cfg.datasets
    return [dsreg.get(d, size=ds.size, seed=0 if d in dsreg.BUILTIN else ds.split_seed, **opts) for d in ds.names]


def with_shift_targets(cfg: Config, named: list | None = None) -> list:
    """The config's datasets (``named``: as ``named_datasets`` opened them), then the shift targets not among
    them, in the target role (clean test rows only): probing evaluates the shift on them."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them

    opts = dataset_options(cfg)
    named = named_datasets(cfg) if named is None else named
    todo = {x.name: x for x in named}  # a dataset named in the config is a dataset, even where it is also a target
    for dataset in named:
        target = dsreg.shift_target_of(dataset, **{**opts, "shift_target": None})
        if target is not None and target.name not in todo:
            todo[target.name] = target
    return list(todo.values())


def require_measurable_stored(store, dataset: str) -> None:
    """``crs.extract.real.refuse_unmeasurable`` of a dataset as the store holds it, where it was read from
    files (its attributes record their identity): the check `crs datasets check` and extraction apply, so a
    store written without it (by another crs, or the library directly) is refused the same way. BadInput."""
    from crs.extract import real  # polars, PIL: crs encoders lists the registry without them

    table = store.dataset(dataset)
    attrs = table.attrs
    if not attrs.get("identity"):
        return
    words = ([f"csv:{attrs['csv']}", "--image-root", str(attrs.get("root")), "--modality", str(attrs.get("modality"))]
             if attrs.get("csv") else [dataset, "--root", f"{dataset}={attrs.get('root')}"])
    try:
        real.refuse_unmeasurable(table, table.task, table.classes, dataset, shlex.join(words))
    except UserError as exc:
        raise BadInput(str(exc)) from None

def open_dataset(cfg: Config, name: str):
    """Dataset ``name`` opened with ``cfg``'s dataset options and split as extraction opens it (a CSV read, a
    folder indexed; no image decoded)."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs --help loads no stage

    seed = 0 if name in dsreg.BUILTIN else cfg.datasets.split_seed
    return dsreg.get(name, size=cfg.datasets.size, seed=seed, **dataset_options(cfg))


def check(ds, all_images: bool, sample: int, progress, classes: bool = True):
    """``extract.real.check`` of one dataset, with the data stage's label and class checks where it has them."""
    from crs.extract import real  # polars, PIL: crs --help loads no stage

    report = real.check(ds, all_images=all_images, sample=sample, progress=progress, classes=classes)
    labels = getattr(real, LABEL_CHECK, None)
    if labels is not None and report.usable:
        report.problems.extend(labels(ds))
    return report


def check_shift_target(cfg: Config, ds, all_images: bool, sample: int, progress):
    """(the shift target ``ds`` names, its check report, a UserError's message or None); all None where ``ds``
    names none. The target is opened as extraction opens it and checked like ``ds``; where its files are
    usable, ``shift_target_of`` compares its classes and test rows with ``ds``'s, and its classes are
    checked on the rows extraction takes from it (its test rows), as every stage checks them."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs --help loads no stage
    from crs.extract import real  # polars, PIL: crs --help loads no stage

    opts = dataset_options(cfg)
    spec = getattr(ds, "shift_spec", None) or ds.shift_target
    target = report = None
    if not spec:
        return None, None, None
    try:
        target = dsreg.get(spec, size=ds.size, seed=ds.seed, **{**opts, "shift_target": None})
        report = check(target, all_images, sample, progress, classes=False)
        if report.usable:  # its classes as extraction reads the target: its test rows
            real.require_measurable(dsreg.shift_target_of(ds, **{**opts, "shift_target": None}))
    except UserError as exc:
        return target, report, str(exc)
    return target, report, None


def draw_perturbations(cfg: Config, dataset: str, row: int, out_path) -> dict:
    """Every perturbation of ``dataset``'s modality suite at every severity drawn on its image ``row``, read as
    extraction reads it, into the PNG ``out_path``: what was drawn (out, dataset, modality, image id, families,
    severities). BadInput for a row out of range or a dataset without a modality."""
    import numpy as np  # numpy: crs --help loads no stage
    import torch  # torch: crs --help loads no stage

    from crs.extract import perturb  # the extract stage: crs --help loads no stage

    ds = open_dataset(cfg, dataset)
    ids = ds.table().ids
    if not 0 <= row < len(ids):
        raise BadInput(f"--row must be in 0..{len(ids) - 1}, not {row}")
    modality = ds.modality
    if modality is None:
        raise BadInput(f"dataset {dataset!r} has no modality, so no perturbation suite; pass --modality")
    img = ds.load_image(row)
    x = torch.from_numpy(np.array(img, copy=True)).permute(2, 0, 1).float().div(255)  # a writable copy
    canvas = perturb.grid(x, str(ids[row]), modality)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out_path)
    return {"out": str(out_path), "dataset": dataset, "modality": modality, "image": str(ids[row]),
            "families": list(perturb.suite(modality)), "severities": list(perturb.SEVERITIES)}
