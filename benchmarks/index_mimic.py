"""Index build time and memory for MIMIC-CXR-JPG at full size (~377,000 images), CSVs only.

Writes fake ``mimic-cxr-2.0.0-{chexpert,metadata,split}.csv.gz`` with the real column names
and codings at the real scale (about 65,000 subjects, 227,000 studies, 377,000 images, 2/3
of them frontal), then times ``crs.extract.datasets.get('mimic-cxr', ...).table()`` (read,
validate, join, label policy, official split) against a plain pandas-free baseline that
only reads the three files with ``polars.read_csv`` (the floor for any index). No image
files: the index never touches them.

    .venv/bin/python benchmarks/index_mimic.py [--images 377110]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

FINDINGS = [
    "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Enlarged Cardiomediastinum", "Fracture", "Lung Lesion",
    "Lung Opacity", "No Finding", "Pleural Effusion", "Pleural Other", "Pneumonia", "Pneumothorax", "Support Devices",
]


def _write_gz(df: pl.DataFrame, path: Path) -> None:
    path.write_bytes(gzip.compress(df.write_csv().encode(), compresslevel=1))


def write_fake_mimic(folder: Path, n_images: int = 377_110, seed: int = 0) -> Path:
    """The three CSV files at the scale of ``n_images`` (vectorised; a few seconds at full size)."""
    rng = np.random.default_rng(seed)
    root = Path(folder) / "mimic-cxr-jpg-2.0.0"
    root.mkdir(parents=True, exist_ok=True)
    n_studies = max(3, int(n_images * 0.6))
    n_subjects = max(3, int(n_studies * 0.29))
    study_subject = np.sort(rng.integers(0, n_subjects, n_studies))
    subject_ids = (10_000_000 + np.arange(n_subjects) * 137).astype(str)
    study_ids = (50_000_000 + rng.permutation(n_studies * 3)[:n_studies]).astype(str)
    image_study = np.sort(rng.integers(0, n_studies, n_images))
    dicom = np.char.add(np.char.add(rng.integers(10**7, 10**8, n_images).astype(str), "-"),
                        np.arange(n_images).astype(str))
    view = rng.choice(np.array(["PA", "AP", "LATERAL", "LL", ""]), n_images, p=[0.25, 0.42, 0.28, 0.04, 0.01])
    subject_split = rng.choice(np.array(["train", "validate", "test"]), n_subjects, p=[0.976, 0.008, 0.016])
    subj = study_subject[image_study]
    _write_gz(pl.DataFrame({"dicom_id": dicom, "study_id": study_ids[image_study], "subject_id": subject_ids[subj],
                            "split": subject_split[subj]}), root / "mimic-cxr-2.0.0-split.csv.gz")
    _write_gz(pl.DataFrame({"dicom_id": dicom, "subject_id": subject_ids[subj], "study_id": study_ids[image_study],
                            "PerformedProcedureStepDescription": "CHEST (PA AND LAT)", "ViewPosition": view,
                            "Rows": "3056", "Columns": "2544", "StudyDate": "21800506", "StudyTime": "213014.531",
                            "ProcedureCodeSequence_CodeMeaning": "CHEST (PA AND LAT)",
                            "ViewCodeSequence_CodeMeaning": "postero-anterior",
                            "PatientOrientationCodeSequence_CodeMeaning": "Erect"}),
              root / "mimic-cxr-2.0.0-metadata.csv.gz")
    codes = np.array(["1.0", "0.0", "-1.0", ""])
    labelled = rng.random(n_studies) > 0.005  # a few studies without a labeller row
    cols = {"subject_id": subject_ids[study_subject][labelled], "study_id": study_ids[labelled]}
    for f in FINDINGS:
        cols[f] = rng.choice(codes, int(labelled.sum()), p=[0.12, 0.08, 0.03, 0.77])
    _write_gz(pl.DataFrame(cols), root / "mimic-cxr-2.0.0-chexpert.csv.gz")
    return root


_MEASURE = """
import sys, time
import polars as pl
from crs.extract import datasets
root = sys.argv[1]
def peak_kib():  # VmHWM: this process's peak resident set (ru_maxrss would include the parent's at fork)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
before = peak_kib()
t0 = time.perf_counter()
table = datasets.get("mimic-cxr", roots={"mimic-cxr": root}).table()
index = time.perf_counter() - t0
after = peak_kib()  # before the baseline below, which reads every column
t0 = time.perf_counter()
for name in ("chexpert", "metadata", "split"):
    pl.read_csv(f"{root}/mimic-cxr-2.0.0-{name}.csv.gz", infer_schema=False)
floor = time.perf_counter() - t0
print(len(table.ids), index, floor, before, after)
"""


def main() -> None:
    import subprocess
    import sys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=377_110)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        root = write_fake_mimic(Path(tmp), args.images)
        made = time.perf_counter() - t0
        # a fresh process, so that its peak memory is the index's and not the writer's
        res = subprocess.run([sys.executable, "-c", _MEASURE, str(root)], capture_output=True, text=True, check=True)
    n, index, floor, before, after = res.stdout.split()
    index, floor = float(index), float(floor)
    print(f"fake MIMIC-CXR-JPG: {args.images} images in the split file (written in {made:.1f} s)")
    print(f"index: {n} frontal labelled images in {index:.2f} s; reading the three files alone: "
          f"{floor:.2f} s (index / read = {index / floor:.1f}x)")
    print(f"peak resident memory of the process: {int(after) / 1024:.0f} MiB "
          f"(after imports: {int(before) / 1024:.0f} MiB; Linux VmHWM)")


if __name__ == "__main__":
    main()
