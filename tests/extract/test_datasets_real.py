"""Adapters for the real datasets on tiny fake copies of their layouts: labels, masks, groups,
splits (seeded and official), shift targets, the generic CSV; and the split function itself."""

import numpy as np
import pytest
from datasets_fakes import (
    COMPETITION,
    MIMIC_FINDINGS,
    make_aptos,
    make_chexpert,
    make_isic,
    make_mimic,
    mimic_path,
    read_rows,
    write_csv,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.extract import datasets as dsreg
from crs.extract import real, splits
from crs.extract.real import DatasetError

CODE = {"1.0": 1, "0.0": 0, "-1.0": -1, "": 0}


def _no_group_straddles(table):
    for g in np.unique(table.group):
        assert len(set(table.split[table.group == g].tolist())) == 1, g


# ---------------------------------------------------------------- splits


def test_group_split_shares_strata_and_determinism():
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 4, 3000)
    groups = np.repeat(np.array([f"g{i}" for i in range(len(sizes))]), sizes)
    labels = np.repeat(rng.choice(5, len(sizes), p=[0.5, 0.2, 0.15, 0.1, 0.05]), sizes)
    s = splits.group_split(groups, labels, seed=3)
    share = np.bincount(s, minlength=3) / len(s)
    assert np.abs(share - [0.7, 0.1, 0.2]).max() < 0.01
    for c in range(5):  # stratified: every class split 70/10/20 up to a few groups
        sc = np.bincount(s[labels == c], minlength=3) / (labels == c).sum()
        assert np.abs(sc - [0.7, 0.1, 0.2]).max() < 0.04, (c, sc)
    for g in np.unique(groups)[:300]:
        assert len(set(s[groups == g].tolist())) == 1
    assert np.array_equal(s, splits.group_split(groups, labels, seed=3))
    perm = rng.permutation(len(groups))  # independent of the row order
    assert np.array_equal(splits.group_split(groups[perm], labels[perm], seed=3), s[perm])
    assert not np.array_equal(splits.group_split(groups, labels, seed=4), s)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=120),
       st.integers(0, 5))
def test_group_split_never_straddles(rows, seed):
    groups = np.array([f"g{g}" for g, _, _ in rows])
    labels = np.array([[a, b] for _, a, b in rows], dtype=np.int8) - 1  # multilabel in {-1, 0, 1}
    s = splits.group_split(groups, labels, seed)
    assert s.dtype == np.int8 and set(s.tolist()) <= {0, 1, 2}
    for g in set(groups.tolist()):
        assert len(set(s[groups == g].tolist())) == 1


# ---------------------------------------------------------------- APTOS, ISIC


def test_aptos_labels_groups_split_and_images(tmp_path):
    root = make_aptos(tmp_path / "aptos")
    ds = dsreg.get("aptos2019", roots={"aptos2019": root}, image_size=32)
    t = ds.table()
    _, rows = read_rows(root / "train.csv")
    assert t.ids.tolist() == [r[0] for r in rows]
    assert t.labels.tolist() == [int(r[1]) for r in rows] and t.labels.dtype == np.int64
    assert ds.task == "multiclass" and ds.ordinal and ds.modality == "ophthalmology"
    assert ds.classes == ("0", "1", "2", "3", "4") and ds.shift_target is None
    assert np.array_equal(t.group, t.ids)
    counts = np.bincount(t.split, minlength=3)
    assert counts.tolist() == [42, 6, 12]  # 70/10/20 of 60, stratified by grade
    for c in range(5):
        share = np.bincount(t.split[t.labels == c], minlength=3)  # 12 a grade: 8.4 / 1.2 / 2.4 expected
        assert np.abs(share - 12 * np.array([0.7, 0.1, 0.2])).max() < 2 and share.min() >= 1
    img = ds.load_image(0)
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert np.array_equal(ds.images([0, 3])[1], ds.load_image(3))
    again = dsreg.get("aptos2019", roots={"aptos2019": root}, image_size=32).table()
    assert np.array_equal(again.split, t.split)
    other = dsreg.get("aptos2019", 1.0, 7, roots={"aptos2019": root}).table()
    assert not np.array_equal(other.split, t.split)
    prov = ds.provenance
    assert prov["split_seed"] == 0 and prov["official_split"] is False
    assert prov["files"] == {"train.csv": (root / "train.csv").stat().st_size}


def test_isic_labels_unk_left_out_and_lesions_stay_together(tmp_path):
    root = make_isic(tmp_path / "isic")
    ds = dsreg.get("isic2019", roots={"isic2019": root}, image_size=16)
    t = ds.table()
    header, rows = read_rows(root / "ISIC_2019_Training_GroundTruth.csv")
    kept = [r for r in rows if r[header.index("UNK")] != "1.0"]
    assert len(kept) == len(rows) - 1 and t.ids.tolist() == [r[0] for r in kept]
    assert t.labels.tolist() == [[v for v in r[1:9]].index("1.0") for r in kept]
    assert ds.classes == ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC")
    assert any("UNK" in n and n.startswith("1 ") for n in ds.index.notes)
    _, meta = read_rows(root / "ISIC_2019_Training_Metadata.csv")
    lesion = {r[0]: r[3] for r in meta}
    assert t.group.tolist() == [lesion[i] or i for i in t.ids.tolist()]  # blank lesion id: its own group
    assert len(set(t.group.tolist())) < len(t.ids)
    _no_group_straddles(t)
    assert ds.load_image(5).shape == (16, 16, 3)


# ---------------------------------------------------------------- chest X-rays


@pytest.mark.parametrize("policy,uncertain", [("ignore", -1), ("ones", 1), ("zeros", 0)])
def test_chexpert_frontal_findings_policy_groups(tmp_path, policy, uncertain):
    root = make_chexpert(tmp_path)
    ds = dsreg.get("chexpert", roots={"chexpert": root}, uncertain=policy, image_size=16)
    t = ds.table()
    header, rows = read_rows(root / "train.csv")
    frontal = [r for r in rows if r[3] == "Frontal"]
    assert len(frontal) < len(rows)
    assert t.ids.tolist() == [r[0].split("/", 1)[1] for r in frontal]
    assert ds.classes == tuple(COMPETITION) and t.labels.dtype == np.int8
    expect = [[{**CODE, "-1.0": uncertain}[r[header.index(c)]] for c in COMPETITION] for r in frontal]
    assert t.labels.tolist() == expect
    assert (t.labels == -1).any() == (policy == "ignore")
    assert t.group.tolist() == [r[0].split("/")[2] for r in frontal]
    _no_group_straddles(t)
    assert ds.shift_target == "mimic-cxr" and ds.modality == "radiology"
    assert ds.load_image(0).shape == (16, 16, 3)
    assert ds.provenance["uncertain"] == policy


def test_findings_all_or_a_list_and_the_target_follows(tmp_path):
    cx, mm = make_chexpert(tmp_path), make_mimic(tmp_path / "mimic")
    roots = {"chexpert": cx, "mimic-cxr": mm}
    ds = dsreg.get("chexpert", roots=roots, findings="all")
    assert len(ds.classes) == 14 and ds.table().labels.shape[1] == 14
    header, rows = read_rows(cx / "train.csv")
    frontal = [r for r in rows if r[3] == "Frontal"]
    k = ds.classes.index("Support Devices")
    assert ds.table().labels[:, k].tolist() == [
        {**CODE, "-1.0": -1}[r[header.index("Support Devices")]] for r in frontal]
    assert dsreg.shift_target_of(ds, roots=roots, findings="all").classes == ds.classes
    two = dsreg.get("mimic-cxr", roots=roots, findings="Edema, Fracture")
    assert two.classes == ("Edema", "Fracture") and two.table().labels.shape[1] == 2
    with pytest.raises(DatasetError, match="findings"):
        dsreg.get("chexpert", roots=roots, findings="Edema,Headache")
    aptos = dsreg.get("aptos2019", roots={"aptos2019": make_aptos(tmp_path / "a", n=10)}, findings="all")
    assert aptos.classes[0] == "0"


def test_chexpert_full_release_prefix_and_codes_in_fixture(tmp_path):
    root = make_chexpert(tmp_path, n_patients=6, release="CheXpert-v1.0")
    ds = dsreg.get("chexpert", roots={"chexpert": root})
    assert ds.path(0).startswith(str(root / "train" / "patient00001"))
    _, rows = read_rows(root / "train.csv")
    values = {v for r in rows for v in r[5:]}
    assert {"1.0", "0.0", "-1.0", ""} <= values  # the fixture holds every coding


def test_mimic_official_split_frontal_and_paths(tmp_path):
    root = make_mimic(tmp_path / "mimic")
    ds = dsreg.get("mimic-cxr", roots={"mimic-cxr": root}, image_size=16)
    t = ds.table()
    _, split = read_rows(root / "mimic-cxr-2.0.0-split.csv.gz")
    _, meta = read_rows(root / "mimic-cxr-2.0.0-metadata.csv.gz")
    view = {r[0]: r[4] for r in meta}
    _, chex = read_rows(root / "mimic-cxr-2.0.0-chexpert.csv.gz")
    labelled = {(r[0], r[1]): r[2:] for r in chex}
    expect = [r for r in split if view[r[0]] in ("PA", "AP") and (r[2], r[1]) in labelled]
    assert t.ids.tolist() == [r[0] for r in expect]
    assert t.split.tolist() == [{"train": 0, "validate": 1, "test": 2}[r[3]] for r in expect]
    assert t.group.tolist() == ["p" + r[2] for r in expect]
    ignore = {**CODE, "-1.0": -1}  # the default policy, U-Ignore
    want = [[ignore[labelled[(r[2], r[1])][MIMIC_FINDINGS.index(c)]] for c in COMPETITION] for r in expect]
    assert t.labels.tolist() == want and (t.labels == -1).any()
    assert ds.path(0) == str(root / mimic_path(expect[0][2], expect[0][1], expect[0][0]))
    assert ds.load_image(0).shape == (16, 16, 3)
    assert ds.provenance["official_split"] is True
    notes = " ".join(ds.index.notes)
    assert "not frontal" in notes and "without a row" in notes


def test_chexpert_shift_target_is_mimic_with_the_same_findings(tmp_path):
    cx = make_chexpert(tmp_path)
    mm = make_mimic(tmp_path / "mimic")
    ds = dsreg.get("chexpert", roots={"chexpert": cx, "mimic-cxr": mm}, uncertain="ones")
    target = dsreg.shift_target_of(ds, roots={"chexpert": cx, "mimic-cxr": mm}, uncertain="ones")
    assert target.name == "mimic-cxr" and target.classes == ds.classes and target.task == ds.task
    assert (target.table().split == 2).any() and not (target.table().labels == -1).any()
    with pytest.raises(DatasetError, match="--root mimic-cxr=DIR"):
        dsreg.shift_target_of(ds, roots={"chexpert": cx})


# ---------------------------------------------------------------- csv:PATH


def test_csv_multiclass_with_split_group_and_image_root(tmp_path):
    aptos = make_aptos(tmp_path / "imgs", n=20)
    _, rows = read_rows(aptos / "train.csv")
    grades = ["none", "mild", "severe"]
    write_csv(tmp_path / "meta" / "site_a.csv", ["path", "label", "group", "split", "age"],
              [[f"train_images/{r[0]}.png", grades[i % 3], f"P{i // 2}", ("train", "val", "test")[(i // 2) % 3], 50]
               for i, r in enumerate(rows)])
    ds = dsreg.get(f"csv:{tmp_path / 'meta' / 'site_a.csv'}", image_root=str(aptos), modality="ophthalmology")
    t = ds.table()
    assert ds.name == "site_a" and ds.task == "multiclass" and ds.classes == ("mild", "none", "severe")
    assert t.labels.tolist() == [("mild", "none", "severe").index(grades[i % 3]) for i in range(20)]
    assert t.split.tolist() == [(i // 2) % 3 for i in range(20)]
    assert t.group.tolist() == [f"P{i // 2}" for i in range(20)]
    assert ds.load_image(0).shape == (512, 512, 3)


def test_csv_multilabel_blank_is_unknown_and_shift_target(tmp_path):
    make_aptos(tmp_path, n=12)
    _, rows = read_rows(tmp_path / "train.csv")
    codes = ["1", "0", "-1", ""]
    header = ["path", "label:Edema", "label:Effusion"]
    write_csv(tmp_path / "a.csv", header, [[f"train_images/{r[0]}.png", codes[i % 4], codes[(i + 1) % 4]]
                                           for i, r in enumerate(rows)])
    write_csv(tmp_path / "b.csv", [*header, "split"], [[f"train_images/{r[0]}.png", "1", "0", "test"]
                                                      for r in rows[:4]])
    ds = dsreg.get(f"csv:{tmp_path / 'a.csv'}", modality="radiology", shift_target=f"csv:{tmp_path / 'b.csv'}")
    t = ds.table()
    assert ds.task == "multilabel" and ds.classes == ("Edema", "Effusion")
    assert t.labels[:4].tolist() == [[1, 0], [0, -1], [-1, -1], [-1, 1]]
    assert ds.shift_target == "b"
    target = dsreg.shift_target_of(ds, modality="radiology")
    assert target.name == "b" and (target.table().split == 2).all()


def test_csv_split_column_with_a_group_in_two_splits_is_refused(tmp_path):
    write_csv(tmp_path / "x.csv", ["path", "label", "group", "split"],
              [["a.png", "1", "P1", "train"], ["b.png", "0", "P2", "train"], ["c.png", "1", "P1", "test"]])
    ds = dsreg.get(f"csv:{tmp_path / 'x.csv'}", modality="dermatology")
    with pytest.raises(DatasetError, match="x.csv:2: group 'P1' has images in more than one split"):
        ds.table()


def test_csv_without_modality_or_label_columns_says_what_to_do(tmp_path):
    write_csv(tmp_path / "x.csv", ["path", "diagnosis"], [["a.png", "1"]])
    with pytest.raises(DatasetError, match="--modality"):
        dsreg.get(f"csv:{tmp_path / 'x.csv'}")
    ds = dsreg.get(f"csv:{tmp_path / 'x.csv'}", modality="dermatology")
    with pytest.raises(DatasetError, match="'label' column"):
        ds.table()


def test_real_dataset_without_root_or_with_size_is_refused(tmp_path):
    write_csv(tmp_path / "chexpert.csv", ["path", "label"], [["a.png", "x"]])
    with pytest.raises(DatasetError, match="rename the CSV"):
        dsreg.get(f"csv:{tmp_path / 'chexpert.csv'}", modality="radiology")
    with pytest.raises(DatasetError, match="--root isic2019=DIR"):
        dsreg.get("isic2019")
    with pytest.raises(DatasetError, match="--size"):
        dsreg.get("aptos2019", size=0.5, roots={"aptos2019": tmp_path})
    with pytest.raises(DatasetError, match="not a folder"):
        dsreg.get("aptos2019", roots={"aptos2019": tmp_path / "nope"})


def test_index_scales_vectorised(tmp_path):
    """A 20,000-image MIMIC index builds (the full-size timing is benchmarks/index_mimic.py)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from index_mimic import write_fake_mimic

    root = write_fake_mimic(tmp_path, 20_000)
    ds = dsreg.get("mimic-cxr", roots={"mimic-cxr": root})
    t = ds.table()
    assert len(t.ids) > 10_000 and set(np.unique(t.split).tolist()) == {0, 1, 2}
    assert real.counts(t, ds.task, ds.classes).height == 15


# ---------------------------------------------------------------- csv:PATH: labels, ids and files named, not guessed


def _csv(tmp_path, rows, header=("path", "label"), name="x.csv"):
    return dsreg.get(f"csv:{write_csv(tmp_path / name, list(header), rows)}", modality="dermatology")


def _fatal(ds):
    return {(p.line, p.message.split(";")[0]) for p in ds.index.fatal}


def test_csv_missing_labels_are_refused_with_their_lines_and_padding_is_stripped(tmp_path):
    ds = _csv(tmp_path, [["a.png", "cat"], ["b.png", "NaN"], ["c.png", ""], ["d.png", " dog "], ["e.png", "NA"],
                         ["f.png", "dog"], ["g.png", " n/a"]])
    assert _fatal(ds) == {(3, "label 'NaN' is missing"), (4, "label '' is missing"), (6, "label 'NA' is missing"),
                          (8, "label ' n/a' is missing")}
    with pytest.raises(DatasetError, match=r"x.csv:3: label 'NaN' is missing"):
        ds.table()
    ok = _csv(tmp_path, [["a.png", "cat"], ["d.png", " dog "], ["f.png", "dog"], ["g.png", "cat\t"]])
    assert ok.classes == ("cat", "dog") and ok.table().labels.tolist() == [0, 1, 1, 0]
    warned = [(p.line, p.fatal) for p in ok.index.problems]
    assert warned == [(3, False), (5, False)]  # named as warnings, read with the spaces removed


def test_csv_class_order_does_not_depend_on_row_order(tmp_path):
    rows = [[f"{i}.png", g] for i, g in enumerate(["10", "2", "1.0", "2", "10", "1.0"])]
    a = _csv(tmp_path, rows, name="a.csv")
    b = _csv(tmp_path, rows[::-1], name="b.csv")
    assert a.classes == b.classes == ("1.0", "2", "10")  # numeric order for grades
    words = [[f"{i}.png", w] for i, w in enumerate(["b", "a", "B", "nan-ish", "a"])]
    assert _csv(tmp_path, words, name="c.csv").classes == _csv(tmp_path, words[::-1], name="d.csv").classes \
        == ("B", "a", "b", "nan-ish")


def test_csv_multilabel_missing_marks_are_unknown(tmp_path):
    ds = _csv(tmp_path, [["a.png", "1", "NA"], ["b.png", "nan", "0"], ["c.png", "0", " 1 "]],
              header=("path", "label:Edema", "label:Effusion"))
    assert ds.table().labels.tolist() == [[1, -1], [-1, 0], [0, 1]]


def test_csv_one_class_blank_and_duplicate_ids_are_refused(tmp_path):
    one = _csv(tmp_path, [["a.png", "cat"], ["b.png", " cat"]], name="one.csv")
    with pytest.raises(DatasetError, match="one class only \\('cat'\\)"):
        one.table()
    ids = _csv(tmp_path, [["a.png", "cat", "x"], ["b.png", "dog", ""], ["c.png", "cat", "  "], ["d.png", "dog", " x"]],
               header=("path", "label", "id"), name="ids.csv")
    assert _fatal(ids) == {(3, "blank id"), (4, "blank id"), (2, "duplicate id 'x'"), (5, "duplicate id 'x'")}


def test_csv_paths_outside_the_image_root_are_refused_unless_allowed(tmp_path):
    outside = str(write_csv(tmp_path / "elsewhere" / "y.csv", ["q"], []).parent / "img.png")
    rows = [["in/a.png", "cat"], ["../b.png", "dog"], [outside, "cat"], ["in/../../c.png", "dog"]]
    ds = _csv(tmp_path, rows)
    assert {line for line, _ in _fatal(ds)} == {3, 4, 5}
    assert all("outside the image root" in p.message and "allow_absolute_paths" in p.message for p in ds.index.fatal)
    allowed = dsreg.get(f"csv:{tmp_path / 'x.csv'}", modality="dermatology", allow_absolute_paths=True)
    assert allowed.table().ids.tolist() == [r[0] for r in rows] and allowed.paths[2] == outside
    assert allowed.identity["allow_absolute_paths"] and not ds.identity["allow_absolute_paths"]


def test_a_fifo_is_named_not_waited_on(tmp_path):
    import os

    make_aptos(tmp_path, n=60)
    _, rows = read_rows(tmp_path / "train.csv")
    fifo = tmp_path / "train_images" / f"{rows[0][0]}.png"
    fifo.unlink()
    os.mkfifo(fifo)
    ds = dsreg.get("aptos2019", roots={"aptos2019": tmp_path}, image_size=16)
    report = real.check(ds, all_images=True)
    assert [str(p) for p in report.problems if p.fatal] == [
        f"train.csv:2: image train_images/{rows[0][0]}.png is not a regular file (a FIFO, device or folder); "
        "expected an image file"]
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(DatasetError, match="not a regular file"):
        dsreg.get(f"csv:{tmp_path / 'pipe.csv'}", modality="dermatology")


def test_check_refuses_a_split_without_a_class_the_probe_needs():
    from crs.extract.table import Table

    def table(labels, split):
        n = len(labels)
        return Table(ids=np.arange(n).astype(str), labels=np.asarray(labels), split=np.asarray(split, np.int8),
                     group=np.arange(n).astype(str))

    def found(t, task="multiclass", classes=("a", "b", "c")):
        return [(p.fatal, p.message.split(";")[0]) for p in real.check_classes(t, task, classes, "x.csv")]

    assert found(table([0, 1, 2, 0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1, 2, 2, 2])) == []
    assert found(table([0, 1, 0, 0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1, 2, 2, 2])) == [
        (True, "the train split has no image of class(es) 'c'")]
    assert found(table([0, 1, 2, 0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1, 2, 2, 2])) == [
        (False, "the val split has no image of class(es) 'b', 'c'"), (False, "the test split has no image of "
                                                                             "class(es) 'c'")]
    assert found(table([0, 1, 2, 0, 1, 2, 0, 0, 0], [0, 0, 0, 1, 1, 1, 2, 2, 2])) == [
        (True, "the test split holds one class only")]
    assert found(table([0, 1, 2], [0, 0, 0])) == [(True, "no val rows"), (True, "no test rows")]
    assert found(table([1, 2], [2, 2])) == [(False, "the test split has no image of class(es) 'a'")]  # shift target
    assert found(table([0, 0], [2, 2])) == [(True, "one class only (a)")]
    multi = table(np.array([[1, 0], [0, 0], [1, -1], [0, 1], [1, 1], [0, 0]]), [0, 0, 1, 1, 2, 2])
    assert found(multi, "multilabel", ("Edema", "Effusion")) == [
        (True, "the train split has no positive image for finding 'Effusion'"),
        (False, "the val split has no negative image for finding 'Effusion'")]


def test_identity_is_the_image_root_and_the_csv_contents(tmp_path):
    import hashlib

    rows = [["a.png", "cat"], ["b.png", "dog"]]
    ds = _csv(tmp_path, rows)
    ident = ds.provenance["identity"]
    assert ident["image_root"] == str(tmp_path.resolve())
    assert ident["csv_sha256"] == {"x.csv": hashlib.sha256((tmp_path / "x.csv").read_bytes()).hexdigest()}
    (tmp_path / "sub").mkdir()
    other_root = dsreg.get(f"csv:{tmp_path / 'x.csv'}", modality="dermatology", image_root=str(tmp_path / "sub"))
    assert other_root.identity["image_root"] != ident["image_root"]
    write_csv(tmp_path / "x.csv", ["path", "label"], rows[::-1])
    assert _csv(tmp_path, rows[::-1]).identity["csv_sha256"] != ident["csv_sha256"]
    aptos = dsreg.get("aptos2019", roots={"aptos2019": make_aptos(tmp_path / "ap", n=10)}, image_size=16)
    assert aptos.provenance["identity"]["image_size"] == 16 and set(aptos.identity["csv_sha256"]) == {"train.csv"}


def test_csv_names_that_sanitise_alike_do_not_collide(tmp_path):
    names = {real.csv_name(tmp_path / f) for f in ("a b.csv", "a_b.csv", "a:b.csv", "a~b.csv")}
    assert len(names) == 4 and "a_b" in names
    assert real.csv_name("site_a.csv") == "site_a" and dsreg.store_name("csv:dir/a b.csv") == real.csv_name("a b.csv")
    assert not real.csv_name(".hidden.csv").startswith(".")
