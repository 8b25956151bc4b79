"""``FileDataset``: a dataset read from files, as ``crs.extract.datasets.Dataset``; its table, images,
identity and provenance, and which image paths it reads (under its root unless allowed)."""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from crs.extract import splits
from crs.extract.images import decode
from crs.extract.options import DEFAULT_IMAGE_SIZE
from crs.extract.real.index import (
    CHEXPERT_FINDINGS,
    SHOWN_PER_KIND,
    UNCERTAIN,
    DatasetError,
    Index,
    Layout,
    Problem,
    report_rows,
)
from crs.extract.real.layouts import LAYOUTS
from crs.extract.table import Table
from crs.foundations.files import sha256_file
from crs.foundations.labels import check_task
from crs.foundations.names import MODALITIES, SPLIT_CODE


@dataclass(frozen=True)
class ReadOptions:
    """How a file-based dataset is read: the split ``seed`` (where no split is given), decoded
    ``image_size``, chest X-ray ``uncertain`` label policy and ``findings`` (None: the layout's), and
    whether image paths outside the root (``allow_absolute_paths``) or led out of it by a symbolic
    link (``follow_symlinks``) are read."""

    seed: int = 0
    image_size: int = DEFAULT_IMAGE_SIZE
    uncertain: str = "ignore"
    findings: tuple[str, ...] | None = None
    allow_absolute_paths: bool = False
    follow_symlinks: bool = False


class FileDataset:
    """A dataset read from files; satisfies ``crs.extract.datasets.Dataset``.

    ``shift_spec`` is the shift target as the user named it (``csv:PATH`` or a dataset
    name), which ``crs.extract.datasets.shift_target_of`` opens; ``shift_target`` is its
    store name. ``allow_absolute_paths``: image paths outside ``root`` (absolute, or climbing out
    with ``..``) are read as given; without it they are refused, so that a dataset is what
    lies under its root (``provenance["identity"]``). ``follow_symlinks``: the same for paths under the
    root that a symbolic link (the file's, or a folder's on the way) leads out of it."""

    size = 1.0  # read as it ships: --size scales the built-in datasets only

    def __init__(self, layout: Layout, root: str | os.PathLike, options: ReadOptions = ReadOptions(), *,
                 csv_path: str | os.PathLike | None = None, shift_spec: str | None = None):
        uncertain, findings = options.uncertain, options.findings
        if uncertain not in UNCERTAIN:
            raise DatasetError(f"uncertain-label policy {uncertain!r} is not one of {', '.join(UNCERTAIN)}")
        if layout.modality not in MODALITIES:
            raise DatasetError(f"modality {layout.modality!r} is not one of {', '.join(MODALITIES)}")
        if findings is not None:
            unknown = [f for f in findings if f not in CHEXPERT_FINDINGS]
            if unknown or check_task(layout.task).exclusive or not findings:
                raise DatasetError(f"findings {list(findings)!r}: expected a non-empty selection of "
                                   f"{', '.join(CHEXPERT_FINDINGS)} for a chest X-ray dataset")
        self.layout = layout
        self.root = Path(root).expanduser().resolve()
        self.csv_path = Path(csv_path).expanduser().resolve() if csv_path is not None else None
        self.name = layout.name
        self.task = layout.task
        self.classes = tuple(findings) if findings else layout.classes
        self.ordinal = layout.ordinal
        self.modality = layout.modality
        self.shift_target = layout.shift_target
        self.shift_spec = shift_spec
        self.description = layout.description
        self.source = layout.source
        self.seed = int(options.seed)
        self.image_size = int(options.image_size)
        self.uncertain = uncertain
        self.allow_absolute_paths = bool(options.allow_absolute_paths)
        self.follow_symlinks = bool(options.follow_symlinks)
        if not self.root.is_dir():
            raise DatasetError(f"{self.name}: --root {str(root)!r} is not a folder; expected the folder that holds "
                               f"{layout.root_holds}")

    @functools.cached_property
    def index(self) -> Index:
        idx = self.layout.read(self.root, findings=self.classes, uncertain=self.uncertain, csv_path=self.csv_path)
        if idx.classes is not None:
            self.classes = idx.classes
        if idx.frame is not None and idx.frame.height == 0:
            idx.problems.append(Problem(idx.files[0] if idx.files else str(self.root), None,
                                        "no usable images are left after filtering; expected at least one row"))
        if idx.frame is not None and idx.frame.height and not self.allow_absolute_paths:
            outside = idx.frame.filter(_outside_root(pl.col("path")))
            report_rows(idx, outside, lambda r: f"image path {r['path']!r} lies outside the image root {self.root}; "
                                                "expected a path relative to it (or allow paths outside it: "
                                                "allow_absolute_paths)", "image paths outside the image root")
        if idx.frame is not None and idx.frame.height and not self.follow_symlinks:
            inside = idx.frame.filter(~_outside_root(pl.col("path")))
            led = _led_out(self.root, inside["path"].to_list())
            report_rows(idx, inside.filter(pl.col("path").is_in(list(led))),
                        lambda r: f"image path {r['path']!r} leads out of the image root {self.root} through a "
                                  f"symbolic link (to {led[r['path']]}); expected a file under it (or follow such "
                                  "links: --follow-symlinks, follow_symlinks)", "image paths led out of the image root")
        if idx.frame is not None and idx.frame.height and idx.frame["split"].null_count() == 0:
            # an official or given split must keep each group (patient, lesion) in one split
            straddle = (idx.frame.group_by("group")
                        .agg(pl.col("split").n_unique().alias("n"), pl.first("file", "line"))
                        .filter(pl.col("n") > 1).sort("line"))
            report_rows(idx, straddle, lambda r: f"group {r['group']!r} has images in more than one split; expected "
                                                 "each patient or lesion in one split only", "groups in several splits")
        return idx

    @functools.cached_property
    def _built(self) -> tuple[Table, np.ndarray, np.ndarray]:
        idx = self.index
        if idx.fatal:
            shown = "\n  ".join(str(p) for p in idx.fatal[:SHOWN_PER_KIND])
            more = f"\n  ... and {len(idx.fatal) - SHOWN_PER_KIND} more" if len(idx.fatal) > SHOWN_PER_KIND else ""
            raise DatasetError(f"{self.name} at {self.root} cannot be used:\n  {shown}{more}\n"
                               f"run `crs datasets check {self.check_args()}` for the full report")
        f = idx.frame
        if check_task(self.task).exclusive:
            labels = f["label"].to_numpy().astype(np.int64)
        else:
            labels = f.select(f"y{k}" for k in range(len(self.classes))).to_numpy().astype(np.int8)
        group = f["group"].to_numpy().astype(str)
        official = f["split"].null_count() == 0
        if official:
            split = f["split"].replace_strict(SPLIT_CODE, return_dtype=pl.Int8).to_numpy()
        else:
            split = splits.group_split(group, labels, self.seed)
        table = Table(ids=f["id"].to_numpy().astype(str), labels=labels, split=np.asarray(split, np.int8), group=group)
        lines = f["line"].to_numpy()
        return table, f["path"].to_numpy(), lines

    def table(self) -> Table:
        return self._built[0]

    def check_args(self) -> str:
        """The `crs datasets check` arguments for this dataset, quoted for a shell."""
        words = ([f"csv:{self.csv_path}", "--image-root", str(self.root), "--modality", self.modality]
                 if self.csv_path is not None else [self.name, "--root", f"{self.name}={self.root}"])
        words += ["--allow-absolute-paths"] * self.allow_absolute_paths + ["--follow-symlinks"] * self.follow_symlinks
        return shlex.join(words)

    def path(self, row: int) -> str:
        return str(self.root / self._built[1][row])  # an absolute path in the CSV stays as it is

    @property
    def paths(self) -> Sequence[str]:
        """The image file of each row of ``table()``, built one at a time as asked for."""
        return _RowPaths(self)

    def load_image(self, row: int, upscale: bool = True) -> np.ndarray:
        """uint8 [s, s, 3] for one row of ``table()``, s = image_size, or with ``upscale=False`` at most
        that (a smaller image keeps its own size, for perturbing); raises ImageError."""
        return decode(self.path(int(row)), self.image_size, upscale=upscale)

    def images(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n = self.image_size
        out = np.empty((len(rows), n, n, 3), dtype=np.uint8)
        for i, r in enumerate(rows.tolist()):
            out[i] = self.load_image(r)
        return out

    @functools.cached_property
    def identity(self) -> dict:
        """What defines this dataset's images: the resolved image root, the sha256 of every CSV file
        read, the decoded size and whether paths outside the root are read. The store refuses to mix
        embeddings of two datasets under one name whose identities differ."""
        base = self.csv_path.parent if self.csv_path else self.root
        return {"image_root": str(self.root),
                "csv_sha256": {rel: sha256_file(base / rel) for rel in self.index.files},
                "image_size": self.image_size,
                "allow_absolute_paths": self.allow_absolute_paths,
                # only where set: with links not followed, the identity is that of a dataset read without the setting
                **({"follow_symlinks": True} if self.follow_symlinks else {})}

    @property
    def provenance(self) -> dict:
        """What the store records about where this dataset's table came from."""
        idx = self.index
        official = idx.frame is not None and idx.frame["split"].null_count() == 0
        files = {}
        for rel in idx.files:
            p = (self.csv_path.parent if self.csv_path else self.root) / rel
            files[rel] = os.path.getsize(p)
        out = {
            "source": self.layout.source,
            "modality": self.modality,
            "root": str(self.root),
            "files": files,
            "split_kind": "official" if official else "seeded group-stratified 70/10/20",
            "official_split": bool(official),
            "split_seed": None if official else self.seed,
            "notes": list(idx.notes),
            "image_rule": "shorter side to image_size (bicubic), centre crop; RGB 8-bit (crs.extract.images)",
            "identity": self.identity,
        }
        if not check_task(self.task).exclusive:
            out["uncertain"] = self.uncertain
            out["blank"] = "-1 (unknown)" if self.csv_path else "0 (not mentioned)"
        if self.csv_path is not None:
            out["csv"] = str(self.csv_path)
        if self.shift_spec and self.shift_spec.startswith("csv:"):  # how a command line names the target again
            out["shift_spec"] = f"csv:{Path(self.shift_spec[len('csv:'):]).expanduser().resolve()}"
        return out


class _RowPaths(Sequence):
    """``FileDataset.paths``: a row's absolute image path, without building the list for
    every row of a large dataset."""

    def __init__(self, ds: FileDataset):
        self._ds = ds

    def __len__(self) -> int:
        return len(self._ds._built[1])

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self._ds.path(r) for r in range(len(self))[row]]
        return self._ds.path(int(row))


def open_layout(name: str, root, options: ReadOptions = ReadOptions()) -> FileDataset:
    return FileDataset(LAYOUTS[name], root, options)


def _led_out(root: Path, paths: list[str]) -> dict[str, str]:
    """{path: where it resolves} of the relative ``paths`` under ``root`` that a symbolic link leads out
    of it. One realpath per folder and one listing per folder (whose entries say which are links), then
    a realpath only for the files that are links; missing files and folders are left to ``check``."""
    by_dir: dict[str, list[str]] = {}
    for p in paths:
        by_dir.setdefault(os.path.dirname(p), []).append(p)
    out: dict[str, str] = {}
    for folder, members in by_dir.items():
        where = Path(os.path.realpath(root / folder))
        if not where.is_relative_to(root):  # a folder on the way is a link out: every file in it
            out.update({p: str(where / os.path.basename(p)) for p in members})
            continue
        try:
            with os.scandir(root / folder) as entries:
                links = {e.name for e in entries if e.is_symlink()}
        except OSError:
            continue
        for p in members:
            if os.path.basename(p) in links:
                target = Path(os.path.realpath(root / p))
                if not target.is_relative_to(root):
                    out[p] = str(target)
    return out


def _outside_root(path: pl.Expr) -> pl.Expr:
    """A path that does not stay under the root: absolute (/x, \\x, C:x) or with a '..' component."""
    return (path.str.contains(r"^(/|\\|[A-Za-z]:)") | path.str.contains(r"(^|[/\\])\.\.([/\\]|$)")).fill_null(False)
