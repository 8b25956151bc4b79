"""The dataset registry: names a user can pass to ``--dataset`` and how to load each.

* the built-in synthetic benchmark (``crs.extract.synthetic``): no files needed;
* the real datasets as they ship (``crs.extract.real``): ``isic2019``, ``aptos2019``,
  ``chexpert``, ``mimic-cxr``, each read from a ``root`` folder;
* ``csv:PATH``: a generic CSV (``crs.extract.real.read_csv_dataset``) with its images under
  ``image_root``.

Every dataset, whatever its kind, satisfies ``Dataset``; callers use its members as they
are, never by probing for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from crs.extract import real, synthetic, targets
from crs.extract.options import DatasetOptions
from crs.extract.real import DatasetError
from crs.extract.table import Table, check_unique
from crs.foundations.errors import BadInput
from crs.foundations.labels import check_task


class Dataset(Protocol):
    """What every dataset offers (``synthetic.SyntheticDataset``, ``real.FileDataset``)."""

    name: str  # the store name (``csv:PATH`` -> the file's stem)
    task: str  # a crs.foundations.labels.Task value: 'multiclass' | 'multilabel'
    classes: tuple[str, ...]
    ordinal: bool
    modality: str | None  # one of crs.foundations.names.MODALITIES: selects the perturbation suite
    shift_target: str | None  # store name of the dataset whose test rows are this one's shift condition
    shift_spec: str | None  # the shift target as the user named it, where that differs (csv:PATH)
    description: str
    source: str  # where the data comes from; the synthetic ones: "builtin synthetic benchmark"
    size: float  # multiple of the default image count; 1.0 for the ones read from files
    seed: int  # the split seed (and, for the synthetic ones, of every draw)
    image_size: int  # square RGB images: image_size x image_size x 3
    provenance: dict | None  # what the store records about the files read; None: nothing read
    paths: Sequence[str] | None  # each row's image file; None: images are made, not read

    def table(self) -> Table:
        """The rows: ids, labels, split, group."""
        ...

    def images(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """uint8 [len(rows), image_size, image_size, 3]."""
        ...

    def load_image(self, row: int) -> np.ndarray:
        """uint8 [image_size, image_size, 3] for one row; file-based ones raise ImageError."""
        ...


BUILTIN = synthetic.DATASETS
REAL = real.NAMES
CSV_PREFIX = "csv:"
check_unique([*BUILTIN, *REAL], "dataset")  # one namespace for --dataset and the store


def names() -> list[str]:
    """The datasets that need no files (what ``--all`` and ``crs demo`` run)."""
    return list(BUILTIN)


def all_names() -> list[str]:
    """Every name ``--dataset`` accepts, with ``csv:PATH`` as a pattern."""
    return [*BUILTIN, *REAL, f"{CSV_PREFIX}PATH"]


def is_known(name: str) -> bool:
    return name in BUILTIN or name in REAL or (name.startswith(CSV_PREFIX) and len(name) > len(CSV_PREFIX))


def store_name(name: str) -> str:
    """The name a dataset has in the store and the run records (``csv:PATH`` -> the file's stem)."""
    return real.csv_name(name[len(CSV_PREFIX):]) if name.startswith(CSV_PREFIX) else name


def get(name: str, size: float = 1.0, seed: int = 0, options: DatasetOptions | None = None,
        **settings) -> Dataset:
    """The dataset ``name``, opened as ``options`` says (default: the defaults; ``settings``: fields of
    ``DatasetOptions`` that change it); real ones need ``options.roots[name]``, ``csv:PATH`` reads PATH.

    ``shift_target`` (a dataset name or ``csv:PATH``) applies to ``csv:`` datasets; the real
    ones name theirs in the registry (chexpert -> mimic-cxr). ``findings`` (chexpert and
    mimic-cxr only): ``competition`` (the 5 competition findings), ``all`` (the 14), or a
    comma-separated list of finding names. ``allow_absolute_paths`` (file-based datasets): read
    image paths outside the root (absolute, or with '..') instead of refusing them; ``follow_symlinks``: read
    image paths that a symbolic link leads out of the root.
    """
    opts = DatasetOptions.of(options, **settings)
    if not size > 0:
        raise BadInput(f"--size must be positive, not {size!r}")
    if name in BUILTIN:
        return synthetic.get(name, size=size, seed=seed)
    if name in REAL or name.startswith(CSV_PREFIX):
        if size != 1.0:
            raise DatasetError(f"--size scales the built-in datasets only; {name} is read as it ships (drop --size)")
    if name in REAL:
        root = (opts.roots or {}).get(name)
        if root is None:
            raise DatasetError(f"{name} needs its folder: pass --root {name}=DIR, where DIR holds "
                               f"{real.LAYOUTS[name].root_holds}")
        chest = not check_task(real.LAYOUTS[name].task).exclusive
        return real.open_layout(name, root, _read_options(opts, seed, _findings(opts.findings) if chest else None))
    if name.startswith(CSV_PREFIX) and len(name) > len(CSV_PREFIX):
        if store_name(name) in BUILTIN or store_name(name) in REAL:
            raise DatasetError(f"{name}: its store name {store_name(name)!r} (the file's stem) is taken by a "
                               "built-in or real dataset; rename the CSV file")
        check_shift_target(opts.shift_target)
        target = store_name(opts.shift_target) if opts.shift_target else None
        return real.open_csv(name[len(CSV_PREFIX):], _read_options(opts, seed, None), image_root=opts.image_root,
                             modality=opts.modality, shift_target=target, shift_spec=opts.shift_target)
    raise DatasetError(f"unknown dataset {name!r}; valid datasets: {', '.join(all_names())}")


def check_shift_target(spec: str | None) -> None:
    """DatasetError (exit 2) naming ``spec`` and the valid names where it names no dataset."""
    if spec and not is_known(spec):
        raise DatasetError(f"--shift-target {spec!r} is not a dataset; valid: {', '.join(all_names())} "
                           "(a dataset name, or csv:PATH of a CSV like the dataset's own)")


def _read_options(opts: DatasetOptions, seed: int, findings: tuple[str, ...] | None) -> real.ReadOptions:
    return real.ReadOptions(seed=seed, image_size=opts.image_size, uncertain=opts.uncertain, findings=findings,
                            allow_absolute_paths=opts.allow_absolute_paths, follow_symlinks=opts.follow_symlinks)


def _findings(text: str | None) -> tuple[str, ...] | None:
    if text in (None, "", "competition"):
        return None  # the layout's default, the 5 competition findings
    if text == "all":
        return real.CHEXPERT_FINDINGS
    return tuple(f.strip() for f in text.split(",") if f.strip())


def shift_target_of(ds: Dataset, options: DatasetOptions | None = None, **settings) -> Dataset | None:
    """The dataset ``ds`` names as its shift target (None if it names none), in the target role
    (``crs.extract.targets``: test rows only, so it is embedded clean and never probed); its classes
    and task must equal ``ds``'s, since ``ds``'s probes are evaluated on its test rows."""
    spec = ds.shift_spec or ds.shift_target
    if not spec:
        return None
    options = DatasetOptions.of(options, **settings)
    if spec.startswith(CSV_PREFIX):
        options = DatasetOptions.of(options, shift_target=None)
    target = get(spec, size=ds.size, seed=ds.seed, options=options)
    if target.task != ds.task or tuple(target.classes) != tuple(ds.classes):
        raise DatasetError(f"{ds.name}'s shift target {target.name} has task {target.task} and classes "
                           f"{list(target.classes)}; expected the same as {ds.name} ({ds.task}, {list(ds.classes)})")
    split = target.table().split  # first: a target whose files cannot be used is refused with its problems
    prov = target.provenance
    given = prov is None or bool(prov.get("official_split", True))
    if given and not (split == 2).any():
        raise DatasetError(f"{ds.name}'s shift target {target.name} has no test rows; expected its split to mark "
                           "the rows to evaluate on")
    return targets.as_target(target, ds.name, given)
