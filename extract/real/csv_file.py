"""``csv:PATH``: a user's CSV file as a dataset (its reader, its store name, opening it)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from crs.extract.real.dataset import FileDataset, ReadOptions
from crs.extract.real.index import (
    MISSING,
    DatasetError,
    Index,
    Layout,
    Problem,
    check_codes,
    check_unique,
    label_columns,
    read_checked_csv,
    report_rows,
)
from crs.foundations.labels import Task
from crs.foundations.names import MODALITIES, SPLITS


def read_csv_dataset(root: Path, *, csv_path: Path, **_) -> Index:
    """A generic CSV: ``path`` (image path, relative to --image-root; one outside it only where
    the dataset allows it), then either ``label`` (one class name a row: multi-class) or
    ``label:NAME`` columns coded 1/0/-1/blank (multi-label; blank = unknown, masked like -1);
    optional ``group``, ``split`` (train/val/test) and ``id`` (default: the path).

    Labels are read without guessing: a class name is taken with the spaces around it removed
    (a warning names the rows); a label cell that is blank or a missing-value mark (``NA``,
    ``NaN``, ``N/A``, any case) is never a class: in a ``label`` column it is refused with its
    line, in a ``label:NAME`` column it means unknown, as blank does. Blank or duplicate ids
    are refused; at least two classes are needed."""
    idx = Index(None)
    rel = csv_path.name
    df = read_checked_csv(csv_path.parent, rel, ("path",), idx, optional=())
    if df is None:
        return idx
    header = pl.read_csv(csv_path, n_rows=0, infer_schema=False).columns
    multi = [c for c in header if c.startswith("label:")]
    extra = [c for c in ("label", "group", "split", "id") if c in header]
    if ("label" in header) == bool(multi):
        idx.problems.append(Problem(rel, 1, "expected either one 'label' column (multi-class) or 'label:NAME' "
                                            f"columns (multi-label), not {'both' if multi else 'neither'}; "
                                            f"columns found: {', '.join(header)}"))
        return idx
    df = df.join(pl.read_csv(csv_path, columns=extra + multi, infer_schema=False)
                 .with_row_index("line", offset=2).with_columns(pl.col("line").cast(pl.Int64)), on="line")
    df = df.with_columns(id=pl.col("id") if "id" in header else pl.col("path"))
    df = df.with_columns(_missing(pl.col(c)).alias(c) for c in multi)  # NA and NaN mean unknown, as blank does
    _check_csv_rows(df, header, multi, idx)
    if idx.fatal:
        return idx
    idx.classes, label_cols = _csv_labels(df, multi)
    if not multi and len(idx.classes) < 2:
        held = f"one class only ({idx.classes[0]!r})" if idx.classes else "no class"
        idx.problems.append(Problem(rel, None, f"column 'label' holds {held}; "
                                               "a probe needs at least two classes: add the images of the others"))
        return idx
    idx.frame = df.select(
        *label_cols, id=pl.col("id"), path=pl.col("path"),
        group=pl.col("group").fill_null(pl.col("id")) if "group" in header else pl.col("id"),
        split=pl.col("split") if "split" in header else pl.lit(None, dtype=pl.String),
        file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = idx.frame["path"]
    return idx


def _missing(col: pl.Expr) -> pl.Expr:
    """``col`` with blank cells and missing-value marks (``MISSING``) as null."""
    return pl.when(col.str.strip_chars().str.to_lowercase().is_in(list(MISSING))).then(None).otherwise(col)


def _check_csv_rows(df: pl.DataFrame, header: Sequence[str], multi: Sequence[str], idx: Index) -> None:
    """Blank paths, labels and ids, split values, label codes and duplicate ids of a generic CSV."""
    blank = lambda c: pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "")  # noqa: E731
    report_rows(idx, df.filter(blank("path")), lambda r: "blank path; expected an image path", "blank paths")
    if "split" in header:
        report_rows(idx, df.filter(~pl.col("split").is_in(list(SPLITS)).fill_null(False)),
                    lambda r: f"split {r['split']!r}; expected train, val or test",
                    "split values outside train/val/test")
    if "label" in header:
        report_rows(idx, df.filter(_missing(pl.col("label")).is_null()),
                    lambda r: f"label {r['label'] or ''!r} is missing; expected a class name (give the row its class, "
                              "or leave the row out)", "missing labels")
        padded = df.filter(_missing(pl.col("label")).is_not_null()
                           & (pl.col("label") != pl.col("label").str.strip_chars()))
        report_rows(idx, padded, lambda r: f"label {r['label']!r} has spaces around it; read as "
                                           f"{r['label'].strip()!r}", "labels with spaces around them", fatal=False)
    else:
        check_codes(df, multi, (1.0, 0.0, -1.0), True, idx)
    if "id" in header:
        report_rows(idx, df.filter(blank("id")), lambda r: "blank id; expected a unique id on every row (or drop the "
                                                           "'id' column: the path is the id then)", "blank ids")
    ids = df.filter(~blank("id")).with_columns(pl.col("id").str.strip_chars())
    check_unique(ids, "id", "id", idx)


def _csv_labels(df: pl.DataFrame, multi: Sequence[str]) -> tuple[tuple[str, ...], list[pl.Expr]]:
    """(classes, label column expressions) of a generic CSV: class names in numeric order where
    they are numbers (grades), else sorted; or the ``label:NAME`` findings coded 1/0/-1/blank."""
    if not multi:
        values = sorted(set(df["label"].str.strip_chars().to_list()))  # _check_csv_rows refused missing ones
        numbers = [_finite(v) for v in values]
        if all(x is not None for x in numbers):  # numeric order for grades; ties ("1", "1.0") by text
            values = [v for _, v in sorted(zip(numbers, values))]
        classes = tuple(values)
        labels = pl.col("label").str.strip_chars().replace_strict({c: k for k, c in enumerate(classes)},
                                                                  return_dtype=pl.Int64)
        return classes, [labels.alias("label")]
    return tuple(c[len("label:"):] for c in multi), label_columns(multi, "ignore", blank=-1)


def _finite(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if np.isfinite(x) else None


CSV_LAYOUT = Layout("csv", "multiclass", (), False, "radiology", None,
                    "the images the CSV names (relative paths)", "a user's CSV file", "", read_csv_dataset)


def csv_name(csv_path: str | os.PathLike) -> str:
    """The store name of ``csv:PATH``: the file's stem where it is made of letters, digits, _ . -
    (not starting with '.'); otherwise those characters with the rest as _, then '-' and 8 hex
    digits of the stem's sha256, so that ``a b.csv`` and ``a_b.csv`` get different names."""
    stem = Path(csv_path).stem
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", stem)
    safe = "_" + safe[1:] if safe.startswith(".") else safe
    if safe == stem and stem:
        return stem
    return f"{safe or 'csv'}-{hashlib.sha256(stem.encode()).hexdigest()[:8]}"


DEFAULT_READ = ReadOptions()


def open_csv(csv_path: str | os.PathLike, options: ReadOptions = DEFAULT_READ, *, image_root=None,
             modality: str | None = None, shift_target: str | None = None,
             shift_spec: str | None = None) -> FileDataset:
    csv_path = Path(csv_path).expanduser()
    if not csv_path.is_file():
        what = "not a regular file (a FIFO, device or folder)" if csv_path.exists() else "no such file"
        raise DatasetError(f"csv:{csv_path}: {what}; expected a CSV with a 'path' column and 'label' or "
                           "'label:NAME' columns")
    if modality is None:
        raise DatasetError(f"csv:{csv_path}: pass --modality (one of {', '.join(MODALITIES)}); a CSV does not "
                           "say which kind of image it holds")
    _check_has_rows(csv_path)
    header = pl.read_csv(csv_path, n_rows=0, infer_schema=False).columns
    task = (Task.MULTILABEL if any(c.startswith("label:") for c in header) else Task.MULTICLASS).value
    layout = Layout(csv_name(csv_path), task, (), False, modality, shift_target,
                    CSV_LAYOUT.root_holds, f"CSV file {csv_path}", f"images listed in {csv_path.name}",
                    read_csv_dataset)
    ds = FileDataset(layout, image_root or csv_path.parent, options, csv_path=csv_path, shift_spec=shift_spec)
    _ = ds.index  # the classes come from the data
    return ds


def _check_has_rows(csv_path: Path) -> None:
    """Refuse a CSV that is empty or holds its header only: there is nothing to benchmark in it."""
    want = "expected a header line (path,label or path,label:NAME,...) and one line per image"
    lines = []
    with open(csv_path, "rb") as f:
        for line in f:
            if line.strip():
                lines.append(line)
                if len(lines) == 2:
                    break
    if not lines:
        raise DatasetError(f"csv:{csv_path}: the file is empty; {want}")
    if len(lines) == 1 or pl.read_csv(csv_path, n_rows=1, infer_schema=False).height == 0:
        raise DatasetError(f"csv:{csv_path}: it holds a header line but no images; {want}")
