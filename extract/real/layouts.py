"""The registry of real dataset layouts: one ``Layout`` record a dataset as it ships, with its reader
(ISIC 2019, APTOS 2019, CheXpert, MIMIC-CXR-JPG; the package docstring gives their files and codings)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from crs.extract.real.index import (
    COMPETITION,
    Index,
    Layout,
    check_codes,
    check_unique,
    label_columns,
    read_checked_csv,
    report_rows,
)
from crs.extract.table import registry

ISIC_CLASSES = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC")
ISIC_GT, ISIC_META, ISIC_IMAGES = (
    "ISIC_2019_Training_GroundTruth.csv", "ISIC_2019_Training_Metadata.csv", "ISIC_2019_Training_Input")
MIMIC_CHEXPERT, MIMIC_META, MIMIC_SPLIT = (
    "mimic-cxr-2.0.0-chexpert.csv.gz", "mimic-cxr-2.0.0-metadata.csv.gz", "mimic-cxr-2.0.0-split.csv.gz")


def read_isic(root: Path, **_) -> Index:
    idx = Index(None)
    every = (*ISIC_CLASSES, "UNK")
    gt = read_checked_csv(root, ISIC_GT, ("image", *every), idx)
    meta = read_checked_csv(root, ISIC_META, ("image", "lesion_id"), idx,
                            optional=("age_approx", "anatom_site_general", "sex"))
    if gt is None or meta is None:
        return idx
    check_codes(gt, every, (0.0, 1.0), False, idx)
    check_unique(gt, "image", "image", idx)
    check_unique(meta, "image", "image", idx)
    if idx.fatal:
        return idx
    onehot = gt.select(pl.col(c).cast(pl.Float64).cast(pl.Int8) for c in every).to_numpy()  # [N, 9]
    n_hot = onehot.sum(1)
    bad = gt.filter(pl.Series(n_hot != 1))
    report_rows(idx, bad.with_columns(n=pl.Series(n_hot[n_hot != 1])),
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
    df = read_checked_csv(root, "train.csv", ("id_code", "diagnosis"), idx)
    if df is None:
        return idx
    grade = pl.col("diagnosis").str.strip_chars()
    bad = df.filter(~grade.is_in(["0", "1", "2", "3", "4"]).fill_null(False))
    report_rows(idx, bad, lambda r: f"diagnosis {r['diagnosis']!r}; expected an integer grade 0-4",
                "diagnosis values outside 0-4")
    check_unique(df, "id_code", "id_code", idx)
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
    df = read_checked_csv(root, "train.csv", ("Path", "Frontal/Lateral", *findings), idx)
    if df is None:
        return idx
    check_codes(df, findings, (1.0, 0.0, -1.0), True, idx)
    view = pl.col("Frontal/Lateral")
    report_rows(idx, df.filter(~view.is_in(["Frontal", "Lateral"]).fill_null(False)),
                lambda r: f"Frontal/Lateral holds {r['Frontal/Lateral']!r}; expected Frontal or Lateral",
                "Frontal/Lateral values other than Frontal or Lateral")
    patient = pl.col("Path").str.extract(r"/(patient\d+)/", 1)
    report_rows(idx, df.filter(patient.is_null()),
                lambda r: f"Path {r['Path']!r} names no patient; expected a path like "
                          "CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg",
                "Paths without a patientNNNNN folder")
    check_unique(df, "Path", "Path", idx)
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
        *label_columns(findings, uncertain, blank=0),
        id=rel, path=rel, group=patient, split=pl.lit(None, dtype=pl.String), file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = df.select(rel.alias("path"))["path"]
    return idx


def read_mimic(root: Path, *, findings: Sequence[str], uncertain: str, **_) -> Index:
    idx = Index(None)
    chex = read_checked_csv(root, MIMIC_CHEXPERT, ("subject_id", "study_id", *findings), idx)
    meta = read_checked_csv(root, MIMIC_META, ("dicom_id", "subject_id", "study_id", "ViewPosition"), idx)
    split = read_checked_csv(root, MIMIC_SPLIT, ("dicom_id", "study_id", "subject_id", "split"), idx)
    if chex is None or meta is None or split is None:
        return idx
    check_codes(chex, findings, (1.0, 0.0, -1.0), True, idx)
    for df in (chex, split):
        for c in ("subject_id", "study_id"):
            report_rows(idx, df.filter(~pl.col(c).str.contains(r"^\d{3,}$").fill_null(False)),
                        lambda r, c=c: f"{c} {r[c]!r}; expected a number of digits", f"{c} values that are not numbers")
    report_rows(idx, split.filter(~pl.col("split").is_in(["train", "validate", "test"]).fill_null(False)),
                lambda r: f"split {r['split']!r}; expected train, validate or test",
                "split values outside train/validate/test")
    check_unique(split, "dicom_id", "dicom_id", idx)
    check_unique(meta, "dicom_id", "dicom_id", idx)
    study = chex.with_columns(key=pl.col("subject_id") + "/" + pl.col("study_id"))
    check_unique(study, "key", "subject_id/study_id", idx)
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
        *label_columns(findings, uncertain, blank=0),
        id=pl.col("dicom_id"), path=path, group=pl.lit("p") + pl.col("subject_id"),
        split=pl.col("split").replace({"validate": "val"}), file=pl.col("file"), line=pl.col("line"),
    )
    idx.named = split.select(path.alias("path"))["path"]
    return idx


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
