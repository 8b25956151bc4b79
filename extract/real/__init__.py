"""The real datasets as they ship: ISIC 2019, APTOS 2019, CheXpert, MIMIC-CXR-JPG, and ``csv:PATH``.

Each layout is one ``Layout`` record (registry as data) with a reader that turns the
dataset's own CSV files into an ``Index``: one polars row an image (id, image path
relative to ``--root``, group, official split or null, labels, and the CSV file and line it
came from) plus every problem found, each naming the file and line and saying what was
expected. Readers never open an image and never stat the image files, so that indexing
MIMIC-CXR-JPG's ~377,000 images stays cheap (benchmarks/index_mimic.py measures it);
``check`` is where files are listed and images decoded.

Modules: ``index`` (the ``Index`` a reader returns, the ``Layout`` record and the helpers
readers share), ``layouts`` (the registry and one reader per dataset), ``csv_file``
(``csv:PATH``), ``dataset`` (``FileDataset``, a dataset read from files) and ``check``
(``crs datasets check``).

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

from crs.extract.options import DEFAULT_IMAGE_SIZE
from crs.extract.real.check import (
    CheckReport,
    check,
    check_classes,
    counts,
    files_found,
    refuse_unmeasurable,
    require_measurable,
)
from crs.extract.real.csv_file import CSV_LAYOUT, csv_name, open_csv, read_csv_dataset
from crs.extract.real.dataset import FileDataset, ReadOptions, open_layout
from crs.extract.real.index import (
    CHEXPERT_FINDINGS,
    COMPETITION,
    MISSING,
    UNCERTAIN,
    DatasetError,
    Index,
    Layout,
    Problem,
)
from crs.extract.real.layouts import ISIC_CLASSES, LAYOUTS, NAMES, read_aptos, read_chexpert, read_isic, read_mimic

__all__ = [
    "CHEXPERT_FINDINGS", "COMPETITION", "CSV_LAYOUT", "DEFAULT_IMAGE_SIZE", "ISIC_CLASSES", "LAYOUTS", "MISSING",
    "NAMES", "UNCERTAIN", "CheckReport", "DatasetError", "FileDataset", "Index", "Layout", "Problem", "ReadOptions",
    "check", "check_classes", "counts", "csv_name", "files_found", "open_csv", "open_layout", "read_aptos",
    "read_chexpert", "read_csv_dataset", "read_isic", "read_mimic", "refuse_unmeasurable", "require_measurable",
]
