"""The real datasets as they ship: ISIC 2019, APTOS 2019, CheXpert, MIMIC-CXR-JPG, and ``csv:PATH``.

Each layout is one ``Layout`` record (registry as data) with a reader that turns the
dataset's own CSV files into an ``Index``: one polars row an image (id, image path
relative to ``--root``, group, official split or null, labels, and the CSV file and line it
came from) plus every problem found, each naming the file and line and saying what was
expected. Readers never open an image and never stat the image files, so that indexing
MIMIC-CXR-JPG's ~377,000 images stays cheap (benchmarks/index_mimic.py measures it);
``check`` is where files are listed and images decoded.

Layouts and codings, verified against the published files and public code that reads
them (headers as they ship):

* ISIC 2019 (challenge.isic-archive.com/data, 2019 training set):
  ``ISIC_2019_Training_GroundTruth.csv``: image,MEL,NV,BCC,AK,BKL,DF,VASC,SCC,UNK, one-hot
  coded 1.0/0.0; ``ISIC_2019_Training_Metadata.csv``: image,age_approx,anatom_site_general,
  lesion_id,sex (lesion_id blank for some images); images
  ``ISIC_2019_Training_Input/<image>.jpg``.
* APTOS 2019 (kaggle.com/c/aptos2019-blindness-detection): ``train.csv``: id_code,diagnosis
  (0-4); images ``train_images/<id_code>.png``.
* CheXpert v1.0 and v1.0-small (stanfordmlgroup.github.io/competitions/chexpert):
  ``train.csv``/``valid.csv``: Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding,Enlarged
  Cardiomediastinum,Cardiomegaly,Lung Opacity,Lung Lesion,Edema,Consolidation,Pneumonia,
  Atelectasis,Pneumothorax,Pleural Effusion,Pleural Other,Fracture,Support Devices;
  findings coded 1.0, 0.0, -1.0 (uncertain) or blank (not mentioned); Path reads
  ``CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg`` (its first component
  is the release folder, i.e. ``--root`` itself).
* MIMIC-CXR-JPG 2.0.0 (physionet.org/content/mimic-cxr-jpg/2.0.0):
  ``mimic-cxr-2.0.0-chexpert.csv.gz``: subject_id,study_id,Atelectasis,Cardiomegaly,
  Consolidation,Edema,Enlarged Cardiomediastinum,Fracture,Lung Lesion,Lung Opacity,No
  Finding,Pleural Effusion,Pleural Other,Pneumonia,Pneumothorax,Support Devices (one row a
  study, same codes as CheXpert); ``-metadata.csv.gz``: dicom_id,subject_id,study_id,
  PerformedProcedureStepDescription,ViewPosition,...; ``-split.csv.gz``: dicom_id,study_id,
  subject_id,split (train/validate/test); images
  ``files/p<first 2 digits>/p<subject_id>/s<study_id>/<dicom_id>.jpg``.

Label policies for the chest X-ray sets: blank (not mentioned) counts as 0, as in the
CheXpert paper's labeller output; uncertain (-1) follows ``uncertain``: ``ignore`` keeps
-1, which every stage masks in training and evaluation (U-Ignore), ``ones`` maps it to 1
(U-Ones), ``zeros`` to 0 (U-Zeros). Frontal views only (CheXpert Frontal/Lateral =
Frontal; MIMIC ViewPosition PA or AP).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from crs.errors import UserError
from crs.extract import splits
from crs.extract.images import IMAGE_SUFFIXES, ImageError, decode
from crs.extract.table import Table, registry
from crs.labels import Task, check_task
from crs.names import MODALITIES, SPLIT_CODE, SPLITS

UNCERTAIN = ("ignore", "ones", "zeros")
DEFAULT_IMAGE_SIZE = 512
COMPETITION = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
CHEXPERT_FINDINGS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
    "Fracture", "Support Devices",
)
ISIC_CLASSES = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC")
ISIC_GT, ISIC_META, ISIC_IMAGES = (
    "ISIC_2019_Training_GroundTruth.csv", "ISIC_2019_Training_Metadata.csv", "ISIC_2019_Training_Input")
MIMIC_CHEXPERT, MIMIC_META, MIMIC_SPLIT = (
    "mimic-cxr-2.0.0-chexpert.csv.gz", "mimic-cxr-2.0.0-metadata.csv.gz", "mimic-cxr-2.0.0-split.csv.gz")
_SHOW = 5  # problems of one kind listed before a summary line
MISSING = ("", "na", "nan", "n/a")  # a label cell holding one of these (any case, spaces around) is missing


class DatasetError(UserError, ValueError):
    """A dataset folder or CSV that cannot be used as given (exit code 2)."""


@dataclass(frozen=True)
class Problem:
    file: str  # relative to the dataset root where it lies under it
    line: int | None  # 1-based line of the file (the header is line 1); None: the whole file
    message: str  # what is wrong and what was expected
    fatal: bool = True  # False: a warning; the folder stays usable

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


@dataclass
class Index:
    """A layout reader's result; ``frame`` is None when the CSV files could not be read."""

    frame: pl.DataFrame | None  # id, path, group, split (str|null), label | y0..yK-1, file, line
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    named: pl.Series | None = None  # every image path any row names, used or not (for extra files)
    files: list[str] = field(default_factory=list)  # the CSV files read
    classes: tuple[str, ...] | None = None  # set by readers whose classes come from the data (csv)

    @property
    def fatal(self) -> list[Problem]:
        return [p for p in self.problems if p.fatal]


# ------------------------------------------------------------------ reading helpers


def _read(root: Path, rel: str, required: Sequence[str], idx: Index,
          optional: Sequence[str] = ()) -> pl.DataFrame | None:
    """Every value as a string (codings are checked exactly), plus file and line columns."""
    path = root / rel
    if not path.is_file():
        what = "not a regular file (a FIFO, device or folder)" if path.exists() else "missing"
        idx.problems.append(Problem(rel, None, f"{what}; expected {path} (the file as it ships)"))
        return None
    try:
        header = pl.read_csv(path, n_rows=0, infer_schema=False).columns
    except Exception as exc:
        idx.problems.append(Problem(rel, None, f"cannot be read as CSV ({exc}); expected the file as it ships"))
        return None
    missing = [c for c in required if c not in header]
    if missing:
        idx.problems.append(Problem(rel, 1, f"missing column(s) {', '.join(map(repr, missing))}; expected "
                                             f"the columns {', '.join(required)}"))
        return None
    idx.files.append(rel)
    keep = [c for c in header if c in set(required) | set(optional)]
    try:
        df = pl.read_csv(path, columns=keep, infer_schema=False)
    except Exception as exc:
        idx.problems.append(Problem(rel, None, f"cannot be read as CSV ({exc})"))
        return None
    return df.with_row_index("line", offset=2).with_columns(pl.col("line").cast(pl.Int64), file=pl.lit(rel))


def _report(idx: Index, bad: pl.DataFrame, message: Callable[[dict], str], summary: str, fatal: bool = True) -> None:
    """One problem for each of the first rows of ``bad`` (which has file, line), then a count."""
    for row in bad.head(_SHOW).iter_rows(named=True):
        idx.problems.append(Problem(row["file"], row["line"], message(row), fatal))
    if bad.height > _SHOW:
        idx.problems.append(Problem(bad["file"][0], None, f"{bad.height - _SHOW} more rows: {summary}", fatal))


def _check_codes(df: pl.DataFrame, cols: Sequence[str], allowed: Sequence[float], blank_ok: bool, idx: Index) -> None:
    names = ", ".join(f"{v:g}" for v in allowed) + (" or blank" if blank_ok else "")
    for c in cols:
        value = pl.col(c).str.strip_chars().cast(pl.Float64, strict=False)
        ok = value.is_in(list(allowed)).fill_null(False)
        if blank_ok:
            ok = ok | pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "")  # quoted "" is blank too
        bad = df.filter(~ok)
        _report(idx, bad, lambda r, c=c: f"column {c!r} holds {r[c]!r}; expected {names}",
                f"values in column {c!r} outside {names}")


def _check_unique(df: pl.DataFrame, key: str, what: str, idx: Index) -> None:
    bad = df.filter(pl.col(key).is_duplicated()).sort(key, "line")
    _report(idx, bad, lambda r: f"duplicate {what} {r[key]!r}; expected each {what} once",
            f"duplicate {what}s")


def _policy(col: str, uncertain: str, blank: int) -> pl.Expr:
    """A 1/0/-1/blank coded column as int8 under the uncertain-label policy."""
    v = pl.col(col).str.strip_chars().cast(pl.Float64, strict=False)
    u = {"ignore": -1, "ones": 1, "zeros": 0}[uncertain]
    return (pl.when(v.is_null()).then(blank).when(v == -1).then(u).otherwise(v)).cast(pl.Int8)


def _label_columns(findings: Sequence[str], uncertain: str, blank: int) -> list[pl.Expr]:
    return [_policy(f, uncertain, blank).alias(f"y{k}") for k, f in enumerate(findings)]


# ------------------------------------------------------------------ layouts


def read_isic(root: Path, **_) -> Index:
    idx = Index(None)
    every = (*ISIC_CLASSES, "UNK")
    gt = _read(root, ISIC_GT, ("image", *every), idx)
    meta = _read(root, ISIC_META, ("image", "lesion_id"), idx, optional=("age_approx", "anatom_site_general", "sex"))
    if gt is None or meta is None:
        return idx
    _check_codes(gt, every, (0.0, 1.0), False, idx)
    _check_unique(gt, "image", "image", idx)
    _check_unique(meta, "image", "image", idx)
    if idx.fatal:
        return idx
    onehot = gt.select(pl.col(c).cast(pl.Float64).cast(pl.Int8) for c in every).to_numpy()  # [N, 9]
    n_hot = onehot.sum(1)
    bad = gt.filter(pl.Series(n_hot != 1))
    _report(idx, bad.with_columns(n=pl.Series(n_hot[n_hot != 1])),
            lambda r: f"image {r['image']!r} has {r['n']} diagnoses marked 1.0; expected exactly one of "
                      f"{', '.join(every)}", "rows without exactly one diagnosis")
    if idx.fatal:
        return idx
    unk = onehot[:, -1] == 1
    if unk.any():
        idx.notes.append(f"{int(unk.sum())} images labelled UNK are left out (the 8 diagnostic classes only)")
    labels = onehot[:, :-1].argmax(1)
    frame = (
        gt.select("image", "file", "line").with_columns(label=pl.Series(labels, dtype=pl.Int64))
        .filter(pl.Series(~unk))
        .join(meta.select("image", "lesion_id", in_meta=pl.lit(True)), on="image", how="left")
    )
    no_meta = int(frame["in_meta"].null_count())
    no_lesion = int(frame["lesion_id"].null_count()) - no_meta
    if no_meta:
        idx.notes.append(f"{no_meta} images have no row in {ISIC_META}; each is its own group")
    if no_lesion:
        idx.notes.append(f"{no_lesion} images have a blank lesion_id; each is its own group")
    idx.frame = frame.select(
        id=pl.col("image"),
        path=pl.lit(ISIC_IMAGES + "/") + pl.col("image") + pl.lit(".jpg"),
        group=pl.coalesce("lesion_id", "image"),
        split=pl.lit(None, dtype=pl.String),
        label=pl.col("label"),
        file="file", line="line",
    )
    idx.named = gt.select((pl.lit(ISIC_IMAGES + "/") + pl.col("image") + pl.lit(".jpg")).alias("path"))["path"]
    return idx


def read_aptos(root: Path, **_) -> Index:
    idx = Index(None)
    df = _read(root, "train.csv", ("id_code", "diagnosis"), idx)
    if df is None:
        return idx
    grade = pl.col("diagnosis").str.strip_chars()
    bad = df.filter(~grade.is_in(["0", "1", "2", "3", "4"]).fill_null(False))
    _report(idx, bad, lambda r: f"diagnosis {r['diagnosis']!r}; expected an integer grade 0-4",
            "diagnosis values outside 0-4")
    _check_unique(df, "id_code", "id_code", idx)
    if idx.fatal:
        return idx
    idx.notes.append("APTOS 2019 publishes no patient ids: each image is its own group, so the two eyes of "
                     "one patient can fall in different splits")
    path = pl.lit("train_images/") + pl.col("id_code") + pl.lit(".png")
    idx.frame = df.select(
        id=pl.col("id_code"), path=path, group=pl.col("id_code"), split=pl.lit(None, dtype=pl.String),
        label=grade.cast(pl.Int64), file="file", line="line",
    )
    idx.named = idx.frame["path"]
    return idx


def read_chexpert(root: Path, *, findings: Sequence[str], uncertain: str, **_) -> Index:
    idx = Index(None)
    df = _read(root, "train.csv", ("Path", "Frontal/Lateral", *findings), idx)
    if df is None:
        return idx
    _check_codes(df, findings, (1.0, 0.0, -1.0), True, idx)
    view = pl.col("Frontal/Lateral")
    _report(idx, df.filter(~view.is_in(["Frontal", "Lateral"]).fill_null(False)),
            lambda r: f"Frontal/Lateral holds {r['Frontal/Lateral']!r}; expected Frontal or Lateral",
            "Frontal/Lateral values other than Frontal or Lateral")
    patient = pl.col("Path").str.extract(r"/(patient\d+)/", 1)
    _report(idx, df.filter(patient.is_null()),
            lambda r: f"Path {r['Path']!r} names no patient; expected a path like "
                      "CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg",
            "Paths without a patientNNNNN folder")
    _check_unique(df, "Path", "Path", idx)
    if idx.fatal:
        return idx
    rel = pl.col("Path").str.replace(r"^[^/]*/", "")  # the first component is the release folder: --root
    lateral = int(df.filter(view == "Lateral").height)
    if lateral:
        idx.notes.append(f"{lateral} lateral views are left out (frontal views only)")
    if (root / "valid.csv").is_file():
        idx.notes.append("valid.csv (the 200-study radiologist-labelled validation set) is not used: the split "
                         "is by patient over train.csv, since the download has no labelled test split")
    idx.frame = df.filter(view == "Frontal").select(
        id=rel, path=rel, group=patient, split=pl.lit(None, dtype=pl.String),
        *_label_columns(findings, uncertain, blank=0), file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = df.select(rel.alias("path"))["path"]
    return idx


def read_mimic(root: Path, *, findings: Sequence[str], uncertain: str, **_) -> Index:
    idx = Index(None)
    chex = _read(root, MIMIC_CHEXPERT, ("subject_id", "study_id", *findings), idx)
    meta = _read(root, MIMIC_META, ("dicom_id", "subject_id", "study_id", "ViewPosition"), idx)
    split = _read(root, MIMIC_SPLIT, ("dicom_id", "study_id", "subject_id", "split"), idx)
    if chex is None or meta is None or split is None:
        return idx
    _check_codes(chex, findings, (1.0, 0.0, -1.0), True, idx)
    for df in (chex, split):
        for c in ("subject_id", "study_id"):
            _report(idx, df.filter(~pl.col(c).str.contains(r"^\d{3,}$").fill_null(False)),
                    lambda r, c=c: f"{c} {r[c]!r}; expected a number of digits", f"{c} values that are not numbers")
    _report(idx, split.filter(~pl.col("split").is_in(["train", "validate", "test"]).fill_null(False)),
            lambda r: f"split {r['split']!r}; expected train, validate or test",
            "split values outside train/validate/test")
    _check_unique(split, "dicom_id", "dicom_id", idx)
    _check_unique(meta, "dicom_id", "dicom_id", idx)
    study = chex.with_columns(key=pl.col("subject_id") + "/" + pl.col("study_id"))
    _check_unique(study, "key", "subject_id/study_id", idx)
    if idx.fatal:
        return idx
    frame = split.join(meta.select("dicom_id", "ViewPosition"), on="dicom_id", how="left")
    no_meta = int(frame["ViewPosition"].null_count())
    frontal = frame.filter(pl.col("ViewPosition").is_in(["PA", "AP"]).fill_null(False))
    n_other = frame.height - frontal.height - no_meta
    labelled = frontal.join(chex.drop("file", "line"), on=["subject_id", "study_id"], how="inner")
    for n, what in ((no_meta, f"have no row or no ViewPosition in {MIMIC_META}"),
                    (n_other, "are not frontal (ViewPosition other than PA or AP)"),
                    (frontal.height - labelled.height, f"belong to studies without a row in {MIMIC_CHEXPERT}")):
        if n:
            idx.notes.append(f"{n} images in {MIMIC_SPLIT} {what}; left out")
    path = (pl.lit("files/p") + pl.col("subject_id").str.slice(0, 2) + pl.lit("/p") + pl.col("subject_id")
            + pl.lit("/s") + pl.col("study_id") + pl.lit("/") + pl.col("dicom_id") + pl.lit(".jpg"))
    idx.frame = labelled.select(
        id=pl.col("dicom_id"), path=path, group=pl.lit("p") + pl.col("subject_id"),
        split=pl.col("split").replace({"validate": "val"}),
        *_label_columns(findings, uncertain, blank=0), file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = split.select(path.alias("path"))["path"]
    return idx


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
    df = _read(csv_path.parent, rel, ("path",), idx, optional=())
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
        id=pl.col("id"), path=pl.col("path"),
        group=pl.col("group").fill_null(pl.col("id")) if "group" in header else pl.col("id"),
        split=pl.col("split") if "split" in header else pl.lit(None, dtype=pl.String),
        *label_cols, file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = idx.frame["path"]
    return idx


def _missing(col: pl.Expr) -> pl.Expr:
    """``col`` with blank cells and missing-value marks (``MISSING``) as null."""
    return pl.when(col.str.strip_chars().str.to_lowercase().is_in(list(MISSING))).then(None).otherwise(col)


def _check_csv_rows(df: pl.DataFrame, header: Sequence[str], multi: Sequence[str], idx: Index) -> None:
    """Blank paths, labels and ids, split values, label codes and duplicate ids of a generic CSV."""
    blank = lambda c: pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "")  # noqa: E731
    _report(idx, df.filter(blank("path")), lambda r: "blank path; expected an image path", "blank paths")
    if "split" in header:
        _report(idx, df.filter(~pl.col("split").is_in(list(SPLITS)).fill_null(False)),
                lambda r: f"split {r['split']!r}; expected train, val or test", "split values outside train/val/test")
    if "label" in header:
        _report(idx, df.filter(_missing(pl.col("label")).is_null()),
                lambda r: f"label {r['label'] or ''!r} is missing; expected a class name (give the row its class, "
                          "or leave the row out)", "missing labels")
        padded = df.filter(_missing(pl.col("label")).is_not_null()
                           & (pl.col("label") != pl.col("label").str.strip_chars()))
        _report(idx, padded, lambda r: f"label {r['label']!r} has spaces around it; read as "
                                       f"{r['label'].strip()!r}", "labels with spaces around them", fatal=False)
    else:
        _check_codes(df, multi, (1.0, 0.0, -1.0), True, idx)
    if "id" in header:
        _report(idx, df.filter(blank("id")), lambda r: "blank id; expected a unique id on every row (or drop the "
                                                       "'id' column: the path is the id then)", "blank ids")
    ids = df.filter(~blank("id")).with_columns(pl.col("id").str.strip_chars())
    _check_unique(ids, "id", "id", idx)


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
    return tuple(c[len("label:"):] for c in multi), _label_columns(multi, "ignore", blank=-1)


def _finite(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if np.isfinite(x) else None


# ------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Layout:
    name: str
    task: str
    classes: tuple[str, ...]
    ordinal: bool
    modality: str
    shift_target: str | None
    root_holds: str  # what --root must contain
    source: str  # where the data comes from and under which terms
    description: str
    read: Callable[..., Index]


# One record a layout (and its reader above); adding a dataset is a record here plus its
# test with a fake copy of its files (tests/extract/datasets_fakes.py).
LAYOUTS: dict[str, Layout] = registry(
    (
        Layout("isic2019", "multiclass", ISIC_CLASSES, False, "dermatology", None,
               f"{ISIC_GT}, {ISIC_META} and {ISIC_IMAGES}/",
               "ISIC 2019 challenge training set, challenge.isic-archive.com/data (CC BY-NC 4.0)",
               "Dermoscopy, 8 diagnoses (MEL NV BCC AK BKL DF VASC SCC; UNK left out); groups are lesions.",
               read_isic),
        Layout("aptos2019", "multiclass", ("0", "1", "2", "3", "4"), True, "ophthalmology", None,
               "train.csv and train_images/",
               "APTOS 2019 Blindness Detection, kaggle.com/c/aptos2019-blindness-detection (competition rules: "
               "non-commercial research use)",
               "Colour fundus photographs, diabetic-retinopathy grade 0-4 (ordinal); each image its own group.",
               read_aptos),
        Layout("chexpert", "multilabel", COMPETITION, False, "radiology", "mimic-cxr",
               "train.csv (the folder CheXpert-v1.0 or CheXpert-v1.0-small)",
               "CheXpert v1.0, stanfordmlgroup.github.io/competitions/chexpert (Stanford University School of "
               "Medicine CheXpert Dataset Research Use Agreement)",
               "Chest X-rays, frontal views, the 5 competition findings; groups are patients; shift target "
               "mimic-cxr.",
               read_chexpert),
        Layout("mimic-cxr", "multilabel", COMPETITION, False, "radiology", None,
               f"{MIMIC_CHEXPERT}, {MIMIC_META}, {MIMIC_SPLIT} and files/",
               "MIMIC-CXR-JPG 2.0.0, physionet.org/content/mimic-cxr-jpg/2.0.0 (credentialed access, PhysioNet "
               "Credentialed Health Data License 1.5.0)",
               "Chest X-rays, frontal views, CheXpert's findings by the CheXpert labeller; official "
               "patient-level split; groups are patients.",
               read_mimic),
    ),
    "dataset layout",
)
NAMES: tuple[str, ...] = tuple(LAYOUTS)


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
            _report(idx, outside, lambda r: f"image path {r['path']!r} lies outside the image root {self.root}; "
                                            "expected a path relative to it (or allow paths outside it: "
                                            "allow_absolute_paths)", "image paths outside the image root")
        if idx.frame is not None and idx.frame.height and not self.follow_symlinks:
            inside = idx.frame.filter(~_outside_root(pl.col("path")))
            led = _led_out(self.root, inside["path"].to_list())
            _report(idx, inside.filter(pl.col("path").is_in(list(led))),
                    lambda r: f"image path {r['path']!r} leads out of the image root {self.root} through a symbolic "
                              f"link (to {led[r['path']]}); expected a file under it (or follow such links: "
                              "--follow-symlinks, follow_symlinks)", "image paths led out of the image root")
        if idx.frame is not None and idx.frame.height and idx.frame["split"].null_count() == 0:
            # an official or given split must keep each group (patient, lesion) in one split
            straddle = (idx.frame.group_by("group")
                        .agg(pl.col("split").n_unique().alias("n"), pl.first("file", "line"))
                        .filter(pl.col("n") > 1).sort("line"))
            _report(idx, straddle, lambda r: f"group {r['group']!r} has images in more than one split; expected "
                                             "each patient or lesion in one split only", "groups in several splits")
        return idx

    @functools.cached_property
    def _built(self) -> tuple[Table, np.ndarray, np.ndarray]:
        idx = self.index
        if idx.fatal:
            shown = "\n  ".join(str(p) for p in idx.fatal[:_SHOW])
            more = f"\n  ... and {len(idx.fatal) - _SHOW} more" if len(idx.fatal) > _SHOW else ""
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
        """The `crs datasets check` arguments for this dataset."""
        extra = (" --allow-absolute-paths" if self.allow_absolute_paths else "") + \
            (" --follow-symlinks" if self.follow_symlinks else "")
        if self.csv_path is not None:
            return f"csv:{self.csv_path} --image-root {self.root}{extra}"
        return f"{self.name} --root {self.root}{extra}"

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
                "csv_sha256": {rel: _sha256(base / rel) for rel in self.index.files},
                "image_size": self.image_size,
                "allow_absolute_paths": self.allow_absolute_paths,
                # only where set, so that stores written before the setting keep their identity
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def open_csv(csv_path: str | os.PathLike, options: ReadOptions = ReadOptions(), *, image_root=None,
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
    ds.index  # the classes come from the data
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


# ------------------------------------------------------------------ checking a folder


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
        return [(f"the {split} split has no image of class(es) {', '.join(map(repr, absent))}"
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
          progress=None) -> CheckReport:
    """Validate a dataset folder: CSVs, ids, codings, missing and extra files, unreadable images."""
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
    for r in np.flatnonzero(~exists)[:_SHOW].tolist():
        row = f.row(r, named=True)
        what = ("is not a regular file (a FIFO, device or folder); expected an image file" if odd[r]
                else f"is not an image file (the name does not end in {', '.join(IMAGE_SUFFIXES)}); list "
                     "image files only" if not row["path"].lower().endswith(IMAGE_SUFFIXES)
                else f"not found under {ds.root}; expected the file this row names")
        problems.append(Problem(row["file"], row["line"], f"image {row['path']} {what}"))
    if missing.height > _SHOW:
        problems.append(Problem(missing["file"][0], None, f"{missing.height - _SHOW} more images not found"))
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
    for row, exc in failures[:_SHOW]:
        problems.append(Problem(f["file"][row], int(f["line"][row]),
                                f"image {f['path'][row]} cannot be read ({exc.reason}); expected a readable "
                                "JPEG or PNG"))
    if len(failures) > _SHOW:
        problems.append(Problem(f["file"][0], None, f"{len(failures) - _SHOW} more unreadable images"))
