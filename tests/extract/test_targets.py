"""A shift target is a target wherever it comes from: test rows only, embedded clean, never probed."""

import numpy as np
import pytest
from datasets_fakes import make_aptos, write_csv
from typer.testing import CliRunner

from crs.cli import app
from crs.extract import datasets as dsreg
from crs.extract import targets
from crs.probe.run import pairs_in_store
from crs.store import Store


def _csvs(tmp_path, target_split: bool, n: int = 30):
    root = make_aptos(tmp_path / "imgs", n=n)
    paths = [f"train_images/{p.name}" for p in sorted((root / "train_images").iterdir())]
    write_csv(tmp_path / "a.csv", ["path", "label"], [[p, "ab"[i % 2]] for i, p in enumerate(paths[:20])])
    header, rows = ["path", "label"], [[p, "ab"[i % 2]] for i, p in enumerate(paths[20:])]
    if target_split:  # the target's own split: only its 4 test rows are the shift condition
        header, rows = header + ["split"], [r + [("train", "test")[i < 4]] for i, r in enumerate(rows)]
    write_csv(tmp_path / "b.csv", header, rows)
    return root


@pytest.mark.parametrize("target_split", [False, True])
def test_a_csv_target_keeps_its_test_rows_all_marked_test(tmp_path, target_split):
    root = _csvs(tmp_path, target_split)
    ds = dsreg.get(f"csv:{tmp_path / 'a.csv'}", image_root=str(root), modality="radiology",
                   shift_target=f"csv:{tmp_path / 'b.csv'}", image_size=16)
    t = dsreg.shift_target_of(ds, image_root=str(root), modality="radiology", image_size=16)
    full = dsreg.get(f"csv:{tmp_path / 'b.csv'}", image_root=str(root), modality="radiology", image_size=16)
    rows = np.arange(4) if target_split else np.arange(10)  # the csv's given split, else every row
    table = t.table()
    assert (table.split == 2).all() and list(table.ids) == list(full.table().ids[rows])
    assert t.shift_target is None and t.provenance["role"] == "shift_target" and t.provenance["target_of"] == "a"
    assert t.name == "b" and t.task == full.task and t.classes == full.classes
    assert np.array_equal(t.load_image(1), full.load_image(int(rows[1])))
    assert np.array_equal(t.images([2, 0]), full.images(rows[[2, 0]]))
    assert t.paths[1] == full.paths[int(rows[1])] and len(t.paths) == len(rows)


def test_a_builtin_target_is_itself():
    src = dsreg.get("demo_cxr", size=0.05)
    target = dsreg.shift_target_of(src)
    assert type(target).__name__ == "SyntheticDataset" and (target.table().split == 2).all()


def test_target_rows_rule():
    split = np.array([0, 2, 1, 2, 0])
    assert list(targets.target_rows(split, given=True)) == [1, 3]
    assert list(targets.target_rows(split, given=False)) == [0, 1, 2, 3, 4]


def test_extract_embeds_a_csv_target_clean_only_and_probe_never_trains_on_it(tmp_path):
    root = _csvs(tmp_path, target_split=False)
    store = tmp_path / "s.zarr"
    r = CliRunner().invoke(app, [
        "extract", "--encoder", "demo-stats", "--dataset", f"csv:{tmp_path / 'a.csv'}", "--image-root", str(root),
        "--modality", "radiology", "--shift-target", f"csv:{tmp_path / 'b.csv'}", "--severities", "2",
        "--store", str(store), "--quiet"])
    assert r.exit_code == 0, r.output
    st = Store(str(store), mode="r")
    conds = {(d, c) for d, e, c, done in st.embeddings() if done}
    assert {c for d, c in conds if d == "b"} == {"clean"}  # the target: clean, no perturbation suite
    assert len({c for d, c in conds if d == "a"}) > 1  # the dataset: clean and its suite
    assert st.dataset("b").n_test == 10 and st.dataset("b").attrs["role"] == "shift_target"
    assert pairs_in_store(st) == [("demo-stats", "a")]


def test_a_target_the_store_holds_as_a_dataset_stays_one_and_the_other_way_round_is_refused(tmp_path):
    root = _csvs(tmp_path, target_split=False, n=60)  # b of its own: both classes in its seeded test split
    a, b = f"csv:{tmp_path / 'a.csv'}", f"csv:{tmp_path / 'b.csv'}"
    common = ["extract", "--encoder", "demo-stats", "--image-root", str(root), "--modality", "radiology",
              "--no-perturb", "--quiet"]
    both = CliRunner().invoke(app, [*common, "--dataset", a, "--dataset", b, "--shift-target", b,
                                    "--store", str(tmp_path / "s.zarr")])
    assert both.exit_code == 0, both.output
    assert "role" not in Store(str(tmp_path / "s.zarr"), mode="r").dataset("b").attrs  # named: a dataset
    again = CliRunner().invoke(app, [*common, "--dataset", a, "--shift-target", b, "--store", str(tmp_path / "s.zarr")])
    assert again.exit_code == 0, again.output  # b stays the dataset the store holds
    first = CliRunner().invoke(app, [*common, "--dataset", a, "--shift-target", b, "--store", str(tmp_path / "t.zarr")])
    assert first.exit_code == 0, first.output
    r = CliRunner().invoke(app, [*common, "--dataset", b, "--store", str(tmp_path / "t.zarr")])
    assert r.exit_code == 2 and "stored in" in r.output and "as the shift target of 'a'" in r.output
    assert "pass --store with a new path" in r.output
