"""Tiny fake copies of the real datasets' layouts: the exact file names, column names and
codings (1.0 / 0.0 / -1.0 / blank), a few generated images. No real data."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np
from PIL import Image

CHEXPERT_COLUMNS = [
    "Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly",
    "Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax",
    "Pleural Effusion", "Pleural Other", "Fracture", "Support Devices",
]
MIMIC_FINDINGS = [
    "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Enlarged Cardiomediastinum", "Fracture", "Lung Lesion",
    "Lung Opacity", "No Finding", "Pleural Effusion", "Pleural Other", "Pneumonia", "Pneumothorax", "Support Devices",
]
COMPETITION = ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion"]
CODES = ["1.0", "0.0", "-1.0", ""]


def write_csv(path: Path, header: list[str], rows: list[list], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    data = buf.getvalue().encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def image(path: Path, seed: int, size=(28, 20), mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    im = Image.fromarray(a, "RGB")
    if mode != "RGB":
        im = im.convert(mode)
    im.save(path)
    return path


def make_aptos(root: Path, n: int = 60) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        code = f"{i:04x}abcd{i:04d}"
        rows.append([code, i % 5])
        image(root / "train_images" / f"{code}.png", i)
    write_csv(root / "train.csv", ["id_code", "diagnosis"], rows)
    write_csv(root / "test.csv", ["id_code"], [["ffff0000"]])  # ships too; not read
    return root


ISIC_CLASSES = ["MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC", "UNK"]


def make_isic(root: Path, n: int = 48) -> Path:
    """n images: lesions of 1-3 images, a few blank lesion ids, one UNK image (as in a
    hypothetical file; the real training CSV has UNK all 0.0)."""
    root.mkdir(parents=True, exist_ok=True)
    gt, meta = [], []
    lesion = 0
    for i in range(n):
        name = f"ISIC_{i:07d}"
        cls = "UNK" if i == n - 1 else ISIC_CLASSES[(i // 3) % 8]
        gt.append([name, *("1.0" if c == cls else "0.0" for c in ISIC_CLASSES)])
        if i % 3 == 0:
            lesion += 1
        lid = "" if i % 7 == 6 else f"IL_{lesion:07d}"
        meta.append([name, "55.0" if i % 2 else "", "anterior torso", lid, "male" if i % 2 else "female"])
        image(root / "ISIC_2019_Training_Input" / f"{name}.jpg", i, size=(36, 24))
    write_csv(root / "ISIC_2019_Training_GroundTruth.csv", ["image", *ISIC_CLASSES], gt)
    write_csv(root / "ISIC_2019_Training_Metadata.csv",
              ["image", "age_approx", "anatom_site_general", "lesion_id", "sex"], meta)
    return root


def chexpert_codes(i: int) -> dict[str, str]:
    """A deterministic mix of 1.0, 0.0, -1.0 and blank for image i."""
    return {c: CODES[(i * 7 + 3 * k) % 4] if k else CODES[i % 3 if i % 5 else 3]
            for k, c in enumerate(CHEXPERT_COLUMNS[5:])}


def make_chexpert(parent: Path, n_patients: int = 24, release: str = "CheXpert-v1.0-small") -> Path:
    root = parent / release
    rows = []
    i = 0
    for p in range(1, n_patients + 1):
        for study in range(1, 2 + p % 2):
            for view, kind in ((1, "frontal"), (2, "lateral")):
                if kind == "lateral" and p % 3:
                    continue
                rel = f"train/patient{p:05d}/study{study}/view{view}_{kind}.jpg"
                codes = chexpert_codes(i)
                rows.append([f"{release}/{rel}", "Female", "68", kind.capitalize(), "AP" if kind == "frontal" else "",
                             *(codes[c] for c in CHEXPERT_COLUMNS[5:])])
                image(root / rel, i, size=(24, 28), mode="L")
                i += 1
    write_csv(root / "train.csv", CHEXPERT_COLUMNS, rows)
    valid = [[f"{release}/valid/patient64541/study1/view1_frontal.jpg", "Male", "73", "Frontal", "AP",
              *("0.0" for _ in CHEXPERT_COLUMNS[5:])]]
    write_csv(root / "valid.csv", CHEXPERT_COLUMNS, valid)
    image(root / "valid/patient64541/study1/view1_frontal.jpg", 999, size=(24, 28), mode="L")
    return root


def mimic_path(subject: str, study: str, dicom: str) -> str:
    return f"files/p{subject[:2]}/p{subject}/s{study}/{dicom}.jpg"


def make_mimic(root: Path, n_subjects: int = 30, images: bool = True) -> Path:
    """Subjects with 1-2 studies of a PA/AP and sometimes a LATERAL image; the official split
    by subject (train/validate/test); one study without a CheXpert row."""
    root.mkdir(parents=True, exist_ok=True)
    chex, meta, split = [], [], []
    k = 0
    for s in range(n_subjects):
        subject = f"1{s:07d}"
        which = ("train", "train", "train", "validate", "test", "test")[s % 6]
        for st in range(1 + s % 2):
            study = f"5{s:04d}{st:03d}"
            codes = chexpert_codes(k)
            if not (s == 1 and st == 0):
                chex.append([subject, study, *(codes.get(c, "") for c in MIMIC_FINDINGS)])
            views = ["PA" if s % 2 else "AP"] + (["LATERAL"] if s % 3 == 0 else [])
            for v, view in enumerate(views):
                dicom = f"{k:08x}-{v:08x}-{s:08x}-{st:08x}-00000000"
                meta.append([dicom, subject, study, "CHEST (PA AND LAT)", view, "28", "24", "21800506", "213014.531",
                             "CHEST (PA AND LAT)", "postero-anterior", "Erect"])
                split.append([dicom, study, subject, which])
                if images:
                    image(root / mimic_path(subject, study, dicom), k, size=(24, 28), mode="L")
            k += 1
    write_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", ["subject_id", "study_id", *MIMIC_FINDINGS], chex, gz=True)
    write_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz",
              ["dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition", "Rows",
               "Columns", "StudyDate", "StudyTime", "ProcedureCodeSequence_CodeMeaning",
               "ViewCodeSequence_CodeMeaning", "PatientOrientationCodeSequence_CodeMeaning"], meta, gz=True)
    write_csv(root / "mimic-cxr-2.0.0-split.csv.gz", ["dicom_id", "study_id", "subject_id", "split"], split, gz=True)
    return root


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    r = list(csv.reader(io.StringIO(data.decode())))
    return r[0], r[1:]
