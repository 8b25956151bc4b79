"""`crs datasets check` on fake folders (every error, exit 0 usable / 2 not), `crs datasets`
listing, and `crs extract` + `crs probe` end to end on fake APTOS and CheXpert -> MIMIC-CXR."""

import json

import polars as pl
import pytest
from datasets_fakes import make_aptos, make_chexpert, make_isic, make_mimic, read_rows, write_csv
from typer.testing import CliRunner

from crs.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def check(name, root, *extra):
    return invoke("datasets", "check", name, "--root", root, *extra)


def test_datasets_lists_builtin_and_real(tmp_path):
    r = invoke("datasets", "--json")
    assert r.exit_code == 0, r.output
    names = [d["name"] for d in json.loads(r.output)]
    assert names[:2] == ["demo_derm", "demo_fundus"]
    assert {"isic2019", "aptos2019", "chexpert", "mimic-cxr"} <= set(names)


@pytest.mark.parametrize("make,name", [(make_aptos, "aptos2019"), (make_isic, "isic2019"),
                                       (lambda p: make_chexpert(p), "chexpert"), (make_mimic, "mimic-cxr")])
def test_clean_fake_folders_are_usable_with_counts(tmp_path, make, name):
    root = make(tmp_path / "d")
    # chexpert names mimic-cxr as its shift target: the check reads it too, as `crs extract` does
    shift = ["--root", f"mimic-cxr={make_mimic(tmp_path / 'm', n_subjects=12)}"] if name == "chexpert" else []
    r = check(name, root, "--all", "--json", *shift)
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["usable"] and rep["rows"] > 0 and rep["images_checked"] == rep["rows"]
    assert not [p for p in rep["problems"] if p["fatal"]]
    splits = {c["split"] for c in rep["counts"]}
    assert splits == {"train", "val", "test"}
    if name == "chexpert":
        assert rep["shift_target"]["dataset"] == "mimic-cxr" and rep["shift_target"]["usable"]
    else:
        assert rep["shift_target"] is None


def test_check_needs_the_shift_targets_folder_as_extract_does(tmp_path):
    cx = make_chexpert(tmp_path)
    r = check("chexpert", cx, "--sample", "0")
    assert r.exit_code == 2 and "mimic-cxr needs its folder: pass --root mimic-cxr=DIR" in r.output
    mm = make_mimic(tmp_path / "m", n_subjects=12)
    (mm / "mimic-cxr-2.0.0-split.csv.gz").unlink()
    r = check("chexpert", cx, "--root", f"mimic-cxr={mm}", "--sample", "0")
    assert r.exit_code == 2 and "shift target of chexpert: mimic-cxr" in r.output
    assert "mimic-cxr-2.0.0-split.csv.gz" in r.output and "NOT usable" in r.output


def test_missing_csv_file(tmp_path):
    root = make_aptos(tmp_path / "a")
    (root / "train.csv").unlink()
    r = check("aptos2019", root)
    assert r.exit_code == 2
    assert "train.csv: missing; expected" in r.output and "NOT usable" in r.output


def test_missing_column_names_file_and_expected_columns(tmp_path):
    root = make_mimic(tmp_path / "m", images=False)
    header, rows = read_rows(root / "mimic-cxr-2.0.0-metadata.csv.gz")
    i = header.index("ViewPosition")
    write_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", header[:i] + header[i + 1:],
              [r[:i] + r[i + 1:] for r in rows], gz=True)
    r = check("mimic-cxr", root)
    assert r.exit_code == 2
    assert "mimic-cxr-2.0.0-metadata.csv.gz:1: missing column(s) 'ViewPosition'" in r.output


def test_duplicate_id_names_the_line(tmp_path):
    root = make_aptos(tmp_path / "a", n=20)
    header, rows = read_rows(root / "train.csv")
    write_csv(root / "train.csv", header, rows + [rows[4]])
    r = check("aptos2019", root, "--json")
    assert r.exit_code == 2
    lines = [(p["file"], p["line"]) for p in json.loads(r.output)["problems"] if "duplicate id_code" in p["message"]]
    assert lines == [("train.csv", 6), ("train.csv", 22)]


@pytest.mark.parametrize("value", ["2.0", "x", "-2"])
def test_bad_label_value_in_chexpert(tmp_path, value):
    root = make_chexpert(tmp_path)
    header, rows = read_rows(root / "train.csv")
    rows[3][header.index("Edema")] = value
    write_csv(root / "train.csv", header, rows)
    r = check("chexpert", root)
    assert r.exit_code == 2
    assert f"train.csv:5: column 'Edema' holds '{value}'; expected 1, 0, -1 or blank" in r.output


def test_bad_grade_and_isic_rows_without_one_diagnosis(tmp_path):
    root = make_aptos(tmp_path / "a", n=20)
    header, rows = read_rows(root / "train.csv")
    rows[0][1] = "5"
    write_csv(root / "train.csv", header, rows)
    r = check("aptos2019", root)
    assert r.exit_code == 2 and "train.csv:2: diagnosis '5'; expected an integer grade 0-4" in r.output
    root = make_isic(tmp_path / "i", n=20)
    header, rows = read_rows(root / "ISIC_2019_Training_GroundTruth.csv")
    rows[2][1] = "1.0" if rows[2][1] == "0.0" else "0.0"
    write_csv(root / "ISIC_2019_Training_GroundTruth.csv", header, rows)
    r = check("isic2019", root)
    assert r.exit_code == 2 and "ISIC_2019_Training_GroundTruth.csv:4: image 'ISIC_0000002' has" in r.output


def test_missing_and_unreadable_images_and_extra_files(tmp_path):
    root = make_isic(tmp_path / "i", n=48)  # enough lesions that train holds every class
    images = root / "ISIC_2019_Training_Input"
    (images / "ISIC_0000003.jpg").unlink()
    (images / "ISIC_0000005.jpg").write_bytes(b"")
    (images / "ISIC_9999999.jpg").write_bytes(b"not named by any row")
    (images / "LICENSE.txt").write_text("not an image")
    r = check("isic2019", root, "--all")
    assert r.exit_code == 2
    assert "ISIC_2019_Training_GroundTruth.csv:5: image ISIC_2019_Training_Input/ISIC_0000003.jpg not found" in r.output
    assert ("ISIC_2019_Training_GroundTruth.csv:7: image ISIC_2019_Training_Input/ISIC_0000005.jpg cannot be read "
            "(the file is empty (0 bytes))") in r.output
    assert "warning" in r.output and "1 image files are named by no row" in r.output
    (images / "ISIC_0000005.jpg").unlink()
    (images / "ISIC_0000003.jpg").write_bytes((images / "ISIC_0000004.jpg").read_bytes())
    (images / "ISIC_0000005.jpg").write_bytes((images / "ISIC_0000004.jpg").read_bytes())
    r = check("isic2019", root)
    assert r.exit_code == 0, r.output  # the extra file is a warning only
    assert "usable" in r.output and "warning" in r.output


def test_sampled_check_decodes_a_sample(tmp_path):
    root = make_aptos(tmp_path / "a", n=30)
    r = check("aptos2019", root, "--sample", "5", "--json")
    rep = json.loads(r.output)
    assert r.exit_code == 0 and rep["images_checked"] == 5
    assert any("--all" in n for n in rep["notes"])


def test_official_split_with_a_patient_in_two_splits_is_refused(tmp_path):
    root = make_mimic(tmp_path / "m", n_subjects=8)
    header, rows = read_rows(root / "mimic-cxr-2.0.0-split.csv.gz")
    subject = "10000003"  # two studies, each with a PA image, official split train
    last_study = max(r[1] for r in rows if r[2] == subject)
    rows = [r[:3] + ["test"] if r[1] == last_study else r for r in rows]
    write_csv(root / "mimic-cxr-2.0.0-split.csv.gz", header, rows, gz=True)
    r = check("mimic-cxr", root, "--sample", "0")
    assert r.exit_code == 2 and f"group 'p{subject}' has images in more than one split" in r.output


def test_csv_check_and_unknown_columns(tmp_path):
    make_aptos(tmp_path, n=60)  # every grade in train
    _, rows = read_rows(tmp_path / "train.csv")
    write_csv(tmp_path / "mine.csv", ["path", "label"], [[f"train_images/{r[0]}.png", r[1]] for r in rows])
    r = invoke("datasets", "check", f"csv:{tmp_path / 'mine.csv'}", "--all", "--modality", "ophthalmology")
    assert r.exit_code == 0, r.output
    write_csv(tmp_path / "bad.csv", ["file", "label"], [["x.png", "1"]])
    r = invoke("datasets", "check", f"csv:{tmp_path / 'bad.csv'}", "--modality", "ophthalmology")
    assert r.exit_code == 2 and "bad.csv:1: missing column(s) 'path'" in r.output


def test_csv_check_takes_extracts_dataset_options_with_its_requirements(tmp_path):
    """--modality is required for csv: as by `crs extract`; --shift-target is read and checked too."""
    make_aptos(tmp_path, n=20)
    _, rows = read_rows(tmp_path / "train.csv")
    write_csv(tmp_path / "mine.csv", ["path", "label"], [[f"train_images/{r[0]}.png", r[1]] for r in rows])
    r = invoke("datasets", "check", f"csv:{tmp_path / 'mine.csv'}", "--sample", "0")
    assert r.exit_code == 2 and "pass --modality" in r.output
    # a shift target made of the same images, all of them test rows
    write_csv(tmp_path / "site2.csv", ["path", "label", "split"],
              [[f"train_images/{r[0]}.png", r[1], "test"] for r in rows])
    args = ["datasets", "check", f"csv:{tmp_path / 'mine.csv'}", "--modality", "ophthalmology", "--sample", "3",
            "--shift-target", f"csv:{tmp_path / 'site2.csv'}", "--json"]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["usable"] and rep["shift_target"]["dataset"] == "site2" and rep["shift_target"]["usable"]
    assert rep["shift_target"]["images_checked"] == 3
    # a target whose classes differ from the dataset's is refused, naming both (two classes: one alone is
    # refused before the comparison)
    write_csv(tmp_path / "site2.csv", ["path", "label", "split"],
              [[f"train_images/{r[0]}.png", str(8 + i % 2), "test"] for i, r in enumerate(rows)])
    r = invoke(*args[:-1])
    assert r.exit_code == 2 and "shift target" in r.output and "site2" in r.output
    r = invoke(*args)
    rep = json.loads(r.stdout)
    assert r.exit_code == 2 and not rep["usable"] and "site2" in rep["shift_target"]["error"]


def test_extract_refuses_a_bare_root_for_two_real_datasets_and_missing_shift_root(tmp_path):
    cx = make_chexpert(tmp_path)
    r = invoke("extract", "-e", "demo-stats", "-d", "chexpert", "-d", "aptos2019", "--root", cx,
               "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2 and "--root NAME=DIR" in r.output
    r = invoke("extract", "-e", "demo-stats", "-d", "chexpert", "--root", cx, "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2 and "mimic-cxr needs its folder: pass --root mimic-cxr=DIR" in r.output
    r = invoke("extract", "-e", "demo-stats", "-d", "chexpert", "--root", "chexpert=" + str(tmp_path / "nowhere"),
               "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2 and "is not a folder" in r.output


def test_extract_of_a_broken_folder_exits_2_and_points_to_check(tmp_path):
    root = make_aptos(tmp_path / "a", n=10)
    header, rows = read_rows(root / "train.csv")
    write_csv(root / "train.csv", header, rows + [rows[0]])
    r = invoke("extract", "-e", "demo-stats", "-d", "aptos2019", "--root", root, "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2 and "crs datasets check aptos2019" in r.output


@pytest.mark.slow  # started first (tests/conftest.py)
def test_extract_and_probe_end_to_end_on_fake_aptos(tmp_path):
    root = make_aptos(tmp_path / "aptos", n=60)
    store, results = tmp_path / "s.zarr", tmp_path / "res"
    # --no-perturb: the perturbation suite at 512 px costs minutes on a CPU (tests/extract covers it)
    r = invoke("extract", "-e", "demo-stats", "-d", "aptos2019", "--root", root, "--store", store, "--json",
               "--no-perturb")
    assert r.exit_code == 0, r.output
    r = invoke("probe", "-e", "demo-stats", "-d", "aptos2019", "--store", store, "--results", results,
               "--seeds", "2", "--fractions", "0.5,1", "--json")
    assert r.exit_code == 0, r.output
    recs = pl.read_parquet(results / "run_records")
    assert set(recs["dataset"]) == {"aptos2019"} and recs.height > 0
    assert recs.filter(pl.col("condition") == "clean")["auroc"].is_finite().all()
    from crs.store import Store
    attrs = Store(str(store), mode="r").dataset("aptos2019").attrs
    assert attrs["split_seed"] == 0 and attrs["official_split"] is False and attrs["root"] == str(root.resolve())
    assert attrs["modality"] == "ophthalmology" and "train.csv" in attrs["files"]


def test_extract_and_probe_chexpert_with_mimic_shift(tmp_path):
    cx = make_chexpert(tmp_path, n_patients=40)
    mm = make_mimic(tmp_path / "mimic", n_subjects=36)
    store, results = tmp_path / "s.zarr", tmp_path / "res"
    r = invoke("extract", "-e", "demo-stats", "-d", "chexpert", "--root", f"chexpert={cx}",
               "--root", f"mimic-cxr={mm}", "--uncertain", "zeros", "--no-perturb", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    assert [run["dataset"] for run in json.loads(r.output)["runs"]] == ["chexpert", "mimic-cxr"]
    r = invoke("probe", "-e", "demo-stats", "-d", "chexpert", "--store", store, "--results", results,
               "--seeds", "1", "--fractions", "1", "--json")
    assert r.exit_code == 0, r.output
    recs = pl.read_parquet(results / "run_records")
    assert set(recs["condition"]) == {"clean", "shift:mimic-cxr"}


def test_perturbations_draws_a_real_dataset_read_from_its_root(tmp_path, monkeypatch):
    """`crs datasets` lists isic2019; `crs perturbations` draws it from --root as extraction reads it (the
    drawing itself, perturb.grid, is the perturbation tests' business: here it records what it was given)."""
    from PIL import Image

    from crs.extract import perturb

    drawn = []

    def grid(x, label, modality):
        drawn.append((tuple(x.shape), label, modality))
        return Image.new("RGB", (4, 4))
    monkeypatch.setattr(perturb, "grid", grid)
    root = make_isic(tmp_path / "isic", n=9)
    r = invoke("perturbations", "-d", "isic2019", "--root", root, "--out", tmp_path / "grid.png", "--row", "2",
               "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["modality"] == "dermatology" and (tmp_path / "grid.png").stat().st_size > 0
    (shape, label, modality), = drawn
    assert shape[0] == 3 and label.startswith("ISIC_") and modality == "dermatology"
    r = invoke("perturbations", "-d", "isic2019", "--out", tmp_path / "grid.png")  # no folder: says which to pass
    assert r.exit_code == 2 and "--root" in r.output
    r = invoke("perturbations", "-d", "isic", "--out", tmp_path / "grid.png")
    assert r.exit_code == 2 and "unknown dataset 'isic'" in r.output and "isic2019" in r.output
