"""``crs datasets check``: a dataset folder checked in full (CSVs, classes per split, missing, extra and
unreadable image files), as a ``CheckReport``."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from crs.extract.images import IMAGE_SUFFIXES, ImageError
from crs.extract.real.dataset import FileDataset
from crs.extract.real.index import SHOWN_PER_KIND, DatasetError, Problem
from crs.extract.table import Table
from crs.foundations.labels import check_task
from crs.foundations.names import SPLITS


@dataclass
class CheckReport:
    dataset: str
    root: str
    problems: list[Problem]
    notes: list[str]
    rows: int
    images_checked: int
    counts: pl.DataFrame | None  # class, split, and images (multi-class) or positive/negative/unknown

    @property
    def usable(self) -> bool:
        return not any(p.fatal for p in self.problems)

    def as_dict(self) -> dict:
        return {
            "dataset": self.dataset, "root": self.root, "usable": self.usable, "rows": self.rows,
            "images_checked": self.images_checked, "notes": self.notes,
            "problems": [{"file": p.file, "line": p.line, "message": p.message, "fatal": p.fatal}
                         for p in self.problems],
            "counts": self.counts.to_dicts() if self.counts is not None else None,
        }


def counts(table: Table, task: str, classes: Sequence[str]) -> pl.DataFrame:
    """Images per class and split (multi-class), or positive/negative/unknown per finding and split."""
    split = np.asarray(SPLITS)[table.split]
    if check_task(task).exclusive:
        return (pl.DataFrame({"class": np.asarray(classes)[table.labels], "split": split})
                .group_by("class", "split").len("images").sort("class", "split"))
    frames = []
    for k, c in enumerate(classes):
        y = table.labels[:, k]
        frames.append(pl.DataFrame({"class": c, "split": split, "positive": y == 1, "negative": y == 0,
                                    "unknown": y == -1}))
    return (pl.concat(frames).group_by("class", "split")
            .agg(pl.col("positive", "negative", "unknown").sum()).sort("class", "split"))


def check_classes(table: Table, task: str, classes: Sequence[str], file: str) -> list[Problem]:
    """What a probe needs of the classes, as problems naming ``file``. Refused: one class only; a
    split the probe reads left empty (train, val and test; a dataset without training rows, a
    shift target, is only tested); a class (multi-label: a finding's positives or negatives)
    absent from train, which no probe could learn; a test split with one class only, where no
    AUROC exists. A class absent from val or test is a warning: its metrics there are undefined."""
    labels, split = np.asarray(table.labels), np.asarray(table.split)
    needed = (0, 1, 2) if (split == 0).any() else (2,)
    if check_task(task).exclusive and len(np.unique(labels)) < 2:
        return [Problem(file, None, f"one class only ({', '.join(np.asarray(classes)[np.unique(labels)])}); a probe "
                                    "needs at least two classes: add the images of the others")]
    problems = []
    for s in needed:
        rows = split == s
        if not rows.any():
            problems.append(Problem(file, None, f"no {SPLITS[s]} rows; a probe needs train, val and test rows "
                                                "(a shift target: test rows)"))
            continue
        for what, fatal in _absent(labels[rows], task, classes, SPLITS[s]):
            problems.append(Problem(file, None, what + (" (give the split column, or add images, so that each "
                                                        "split holds every class)" if fatal else ""), fatal))
    return problems


def _absent(y: np.ndarray, task: str, classes: Sequence[str], split: str) -> list[tuple[str, bool]]:
    """(message, fatal) for each class ``y`` (the rows of one split) lacks; see ``check_classes``."""
    if check_task(task).exclusive:
        absent = [c for k, c in enumerate(classes) if not (y == k).any()]
        if not absent:
            return []
        if split == "test" and len(classes) - len(absent) < 2:
            return [("the test split holds one class only; AUROC needs at least two", True)]
        return [(f"the {split} split has no image of class(es) {_some(absent)}"
                 + ("; a probe cannot learn a class it never sees" if split == "train" else
                    "; their metrics on this split are undefined"), split == "train")]
    out = []
    for k, c in enumerate(classes):
        lacking = [w for w, v in (("positive", 1), ("negative", 0)) if not (y[:, k] == v).any()]
        if lacking:
            out.append((f"the {split} split has no {' or '.join(lacking)} image for finding {c!r}"
                        + ("; a probe cannot learn it" if split == "train" else
                           "; its AUROC on this split is undefined"), split in ("train", "test")))
    return out


def _some(names: Sequence[str]) -> str:
    """The first few of ``names`` quoted, and how many more: a problem stays one line."""
    shown = ", ".join(map(repr, names[:SHOWN_PER_KIND]))
    return shown + (f" and {len(names) - SHOWN_PER_KIND} more" if len(names) > SHOWN_PER_KIND else "")


def refuse_unmeasurable(table, task: str, classes: Sequence[str], name: str, check_args: str) -> None:
    """DatasetError (exit 2) where ``check_classes`` finds a fatal problem: the one check of the classes
    that `crs datasets check` reports and every stage (extract, probe, score, `crs run`) applies before it
    writes, so that none of them measures a task no probe can measure (AUROC undefined, classes never
    seen in training). ``table`` has ``labels`` and ``split`` (a ``Table`` or a stored ``DatasetTable``);
    ``check_args`` are the `crs datasets check` arguments that give the full report."""
    fatal = [p for p in check_classes(table, task, classes, name) if p.fatal]
    if fatal:
        more = f" (and {len(fatal) - 1} more problem{'s' * (len(fatal) > 2)})" if len(fatal) > 1 else ""
        raise DatasetError(f"dataset {name} cannot be measured: {fatal[0].message}{more}; "
                           f"`crs datasets check {check_args}` gives the full report")


def require_measurable(ds) -> None:
    """``refuse_unmeasurable`` of an opened dataset read from files (``FileDataset``, or a shift target's
    view of one); the built-in ones are made to be measurable, and `crs datasets check` checks no class
    of theirs either."""
    if getattr(ds, "index", None) is None or not hasattr(ds, "check_args"):
        return
    refuse_unmeasurable(ds.table(), ds.task, ds.classes, ds.name, ds.check_args())


def _listing(root: Path, named: pl.Series) -> tuple[set[str], set[str]]:
    """Image files (relative to root) in every folder that some row's path points into, and the
    names there that are not regular files (FIFOs, devices, folders) and would block or fail a read."""
    parents = named.str.replace(r"/?[^/]*$", "").unique().to_list()
    found: set[str] = set()
    irregular: set[str] = set()
    for parent in parents:
        try:
            with os.scandir(root / parent) as it:
                for e in it:
                    if e.name.lower().endswith(IMAGE_SUFFIXES):
                        rel = f"{parent}/{e.name}" if parent else e.name
                        (found if e.is_file() else irregular).add(rel)
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found, irregular


def check(ds, *, all_images: bool = False, sample: int = 200, workers: int | None = None,
          progress=None, classes: bool = True) -> CheckReport:
    """Validate a dataset folder: CSVs, ids, codings, missing and extra files, unreadable images, and with
    ``classes`` what a probe needs of its classes per split (``check_classes``; a shift target's are those of
    its test rows, which the caller checks on the target's view: ``require_measurable``)."""
    if not isinstance(ds, FileDataset):  # a built-in dataset: nothing on disk to check
        t = ds.table()
        return CheckReport(ds.name, "(built in)", [], [], len(t.ids), 0, counts(t, ds.task, ds.classes))
    idx = ds.index
    problems, notes = list(idx.problems), list(idx.notes)
    report = CheckReport(ds.name, str(ds.root), problems, notes, 0, 0, None)
    if idx.fatal:
        return report
    t = ds.table()
    report.rows = len(t.ids)
    report.counts = counts(t, ds.task, ds.classes)
    if classes:
        problems.extend(check_classes(t, ds.task, ds.classes, idx.files[0] if idx.files else str(ds.root)))
    exists = _check_files(ds, problems)

    # unreadable images: a seeded sample, or every image with all_images
    readable = np.flatnonzero(exists)
    if not all_images and len(readable) > sample:
        readable = np.sort(np.random.default_rng(ds.seed).choice(readable, sample, replace=False))
    _check_images(ds, readable, problems, workers, progress)
    report.images_checked = len(readable)
    if not all_images and len(readable) < len(np.flatnonzero(exists)):
        notes.append(f"decoded a sample of {len(readable)} images; pass --all to decode every one")
    return report


def files_found(ds) -> tuple[int, int]:
    """(rows whose image file exists, rows) of a file-based dataset, from folder listings as ``check`` finds
    them; (0, 0) for a built-in dataset or an index that could not be read. A dataset in the target role
    (``crs.extract.targets.TargetView``) answers for the dataset it shows."""
    index = getattr(ds, "index", None)  # a file-based dataset's, also through a target's view
    if index is None or index.fatal:
        return 0, 0
    exists = _check_files(ds, [])
    return int(exists.sum()), len(exists)


def _check_files(ds: FileDataset, problems: list[Problem]) -> np.ndarray:
    """bool [row]: the row's image file exists; adds a problem for missing files and a
    warning for image files no row names. Lists the folders the rows point into rather
    than stat each file."""
    idx = ds.index
    f = idx.frame
    relative = ~f["path"].str.starts_with("/")
    found, irregular = _listing(ds.root, f["path"].filter(relative).append(
        idx.named.filter(~idx.named.str.starts_with("/"))))
    exists = np.isin(f["path"].to_numpy().astype(str), np.array(sorted(found), dtype=str))
    odd = np.isin(f["path"].to_numpy().astype(str), np.array(sorted(irregular), dtype=str))
    for row in np.flatnonzero(~relative.to_numpy()):  # absolute paths (csv: only): one stat each
        try:
            mode = os.stat(f["path"][int(row)]).st_mode
        except OSError:
            continue
        exists[row], odd[row] = stat.S_ISREG(mode), not stat.S_ISREG(mode)
    missing = f.filter(pl.Series(~exists))
    for r in np.flatnonzero(~exists)[:SHOWN_PER_KIND].tolist():
        row = f.row(r, named=True)
        what = ("is not a regular file (a FIFO, device or folder); expected an image file" if odd[r]
                else f"is not an image file (the name does not end in {', '.join(IMAGE_SUFFIXES)}); list "
                     "image files only" if not row["path"].lower().endswith(IMAGE_SUFFIXES)
                else f"not found under {ds.root}; expected the file this row names")
        problems.append(Problem(row["file"], row["line"], f"image {row['path']} {what}"))
    if missing.height > SHOWN_PER_KIND:
        problems.append(Problem(missing["file"][0], None, f"{missing.height - SHOWN_PER_KIND} more images not found"))
    extra = sorted(found - set(idx.named.to_list()))
    if extra:
        problems.append(Problem(str(ds.root), None, f"{len(extra)} image files are named by no row of "
                                                    f"{', '.join(idx.files)}, e.g. {extra[0]}; they are ignored",
                                fatal=False))
    return exists


def _check_images(ds: FileDataset, rows: np.ndarray, problems: list[Problem], workers: int | None,
                  progress) -> None:
    """Decode the images of ``rows`` on a thread pool; a problem for each that fails."""

    def try_load(row: int):
        try:
            ds.load_image(row)
        except ImageError as exc:
            return row, exc
        return row, None

    task = progress.add_task(f"decode {ds.name}", total=len(rows), unit="images") if progress is not None else None
    failures = []
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        for r, e in pool.map(try_load, rows.tolist()):
            if e is not None:
                failures.append((r, e))
            if task is not None:  # an optional rich.progress.Progress: the command line's bar
                progress.advance(task)
    f = ds.index.frame
    for row, exc in failures[:SHOWN_PER_KIND]:
        problems.append(Problem(f["file"][row], int(f["line"][row]),
                                f"image {f['path'][row]} cannot be read ({exc.reason}); expected a readable "
                                "JPEG or PNG"))
    if len(failures) > SHOWN_PER_KIND:
        problems.append(Problem(f["file"][0], None, f"{len(failures) - SHOWN_PER_KIND} more unreadable images"))
