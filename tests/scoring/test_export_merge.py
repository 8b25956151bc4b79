"""crs export and crs merge on the scoring tests' tiny store (tests/scoring/conftest.py's build_store)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from crs.foundations.config import Config
from crs.foundations.errors import UserError
from crs.stages import bundles, merge, score

SETTINGS = dataclasses.replace(Config().score, bootstrap=64, seed=3)
QUALITY = {"enc-a": 0.9, "enc-b": 0.6, "enc-c": 0.75}


def _site(folder: Path, build_store, save_records, rng_seed: int = 0, quality=QUALITY) -> Path:
    """A site's results folder: the tiny store, its run records naming it, and its own scores."""
    import json as _json

    from crs.foundations import records as run_records

    store, table = build_store(folder / "store.zarr", quality, rng_seed=rng_seed)
    save_records(folder / "results", table)
    for f in run_records.records_dir(folder / "results").glob("*.parquet"):  # name the store as crs probe does
        meta = run_records.metadata(f)
        frame = run_records.read_checked(f)
        run_records.write_parquet(f, frame, meta[run_records.GENERATION],
                                  {run_records.PROVENANCE: meta[run_records.PROVENANCE],
                                   run_records.STORE: "../store.zarr"})
    score.run(folder / "results", SETTINGS)
    assert _json.loads((folder / "results" / "scores" / "scores.json").read_text())["settings"]["crs_version"]
    return folder / "results"


@pytest.fixture(scope="module")
def site_a(tmp_path_factory, build_store_fn, save_records_fn) -> Path:
    return _site(tmp_path_factory.mktemp("site-a"), build_store_fn, save_records_fn)


@pytest.fixture(scope="module")
def bundle_a(site_a, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "a"
    bundles.export(site_a, out, "site-a")
    return out


def _copy(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(bundle, target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def _edit_site_record(bundle: Path, edit) -> None:
    """Change site.json and re-seal the manifest, as a site with other settings would have exported."""
    record = json.loads((bundle / bundles.SITE_RECORD).read_text())
    edit(record)
    (bundle / bundles.SITE_RECORD).write_text(json.dumps(record))
    head = {k: v for k, v in json.loads((bundle / bundles.MANIFEST).read_text()).items() if k != "files"}
    bundles.write_manifest(bundle, head)


def test_a_bundle_holds_no_path_and_no_clear_id(site_a, bundle_a):
    text = "\n".join(p.read_text(errors="replace") for p in bundle_a.rglob("*.json"))
    assert str(site_a.parent) not in text and "store.zarr" not in text
    ids = np.load(bundle_a / "datasets" / "d1" / "id.npy")
    assert not any(i.startswith("d1-") for i in ids.tolist()) and len(ids[0]) == 64
    assert not list(bundle_a.rglob("embeddings"))
    manifest = json.loads((bundle_a / bundles.MANIFEST).read_text())
    assert set(manifest["files"]) == {p.relative_to(bundle_a).as_posix() for p in bundle_a.rglob("*")
                                      if p.is_file() and p.name != bundles.MANIFEST}


def test_a_dry_run_lists_the_arrays_and_writes_nothing(site_a, tmp_path):
    run = bundles.export(site_a, tmp_path / "b", "site-a", dry_run=True)
    assert not (tmp_path / "b").exists() and run.dry_run
    assert any(name.startswith("predictions/d1/enc-a/") and size > 0 for name, size in run.files)
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_a_folder_that_holds_something(site_a, tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("x")
    with pytest.raises(UserError, match="not an empty folder"):
        bundles.export(site_a, tmp_path / "b", "site-a")


def test_one_sites_bundle_merged_alone_scores_bit_for_bit_as_the_site(site_a, bundle_a, tmp_path):
    merged = merge.merge([bundle_a], tmp_path / "merged")
    assert merged.encoders == sorted(QUALITY) and merged.left_out == {}
    again = score.run(merged.out, SETTINGS)
    own = json.loads((site_a / "scores" / "scores.json").read_text())
    mine = again.to_json()
    differ = [(i, k) for i, (a, b) in enumerate(zip(mine["encoders"], own["encoders"], strict=True))
              for k in a if a[k] != b.get(k)]
    assert differ == []
    renamed = [{**r, "dataset": r["dataset"].removeprefix("site-a.")} for r in mine["per_dataset"]]
    assert renamed == own["per_dataset"]
    assert mine["settings"]["datasets"] == ["site-a.d1"]


def test_a_tampered_bundle_is_refused_naming_the_file(bundle_a, tmp_path):
    bundle = _copy(bundle_a, tmp_path)
    target = bundle / "predictions" / "d1" / "enc-a" / "clean.npy"
    values = np.load(target)
    values[0, 0, 0, 0] += 0.5
    np.save(target, values)
    with pytest.raises(merge.DamagedBundle, match=r"clean\.npy: its sha256"):
        merge.merge([bundle], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize(("edit", "named"), [
    (lambda r: r["score"].update(crs_version="1"), "the CRS versions differ"),
    (lambda r: r["encoders"]["enc-b"].update(revision="0" * 40), "the revisions of encoder 'enc-b' differ"),
])
def test_a_bundle_of_another_crs_version_or_encoder_revision_is_refused(bundle_a, tmp_path, edit, named):
    other = _copy(bundle_a, tmp_path)
    _edit_site_record(other, lambda r: (r.update(site="site-b"), edit(r)))
    with pytest.raises(merge.UnfairMerge, match=named) as caught:
        merge.merge([bundle_a, other], tmp_path / "merged")
    assert "site-a" in str(caught.value) and "site-b" in str(caught.value)


def test_two_sites_merge_into_strata_of_their_own_and_score(site_a, bundle_a, tmp_path):
    other = _copy(bundle_a, tmp_path)
    _edit_site_record(other, lambda r: r.update(site="site-b"))
    merged = merge.merge([bundle_a, other], tmp_path / "merged")
    scored = score.run(merged.out, SETTINGS)
    assert scored.settings["datasets"] == ["site-a.d1", "site-b.d1"]
    records = pl.read_parquet(merged.out / "run_records")
    assert "shift:site-b.d1_site2" in records["condition"].to_list()


@pytest.fixture(scope="module")
def site_b(tmp_path_factory, build_store_fn, save_records_fn) -> Path:
    return _site(tmp_path_factory.mktemp("site-b"), build_store_fn, save_records_fn, rng_seed=1,
                 quality={"enc-a": 0.7, "enc-b": 0.85, "enc-c": 0.75})


@pytest.fixture(scope="module")
def bundle_b(site_b, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "b"
    bundles.export(site_b, out, "site-b")
    return out


def _one_study(sites: dict[str, Path], folder: Path) -> Path:
    """One study holding every site's datasets as SITE.DS, built from the sites' own stores (clear ids, no bundle):
    the slow, obvious reference for the merge."""
    from crs.foundations import records as run_records
    from crs.store import DatasetTable, Store

    store = Store(str(folder / "store.zarr"), "a")
    for site, results in sites.items():
        own = Store(str(results.parent / "store.zarr"), "r")
        for dataset in own.datasets():
            t = own.dataset(dataset)
            attrs = {k: (f"{site}.{v}" if k == "shift_target" else v) for k, v in t.attrs.items()
                     if k not in bundles.PRIVATE_ATTRS}
            store.write_dataset(DatasetTable(t.ids, t.labels, t.split, t.group, name=f"{site}.{dataset}",
                                             attrs=attrs))
        for encoder in QUALITY:
            for condition in ("clean", "gaussian_noise@1", "shift:d1_site2", "validation"):
                values, attrs = own.read_predictions("d1", encoder, condition)
                renamed = condition.replace("shift:", f"shift:{site}.")
                store.write_predictions(f"{site}.d1", encoder, renamed, values,
                                        {k: v for k, v in attrs.items() if k not in ("condition", "commit", "written")})
        for f in run_records.records_dir(results).glob("*.parquet"):
            frame = run_records.read_checked(f).with_columns(
                pl.lit(f"{site}.d1").alias("dataset"),
                pl.col("condition").str.replace("shift:", f"shift:{site}."))
            meta = run_records.metadata(f)
            keep = {run_records.PROVENANCE: meta[run_records.PROVENANCE], run_records.STORE: "../store.zarr"}
            target = run_records.path(folder / "results", frame["encoder"][0], f"{site}.d1")
            run_records.write_parquet(target, frame, meta[run_records.GENERATION], keep)
    return folder / "results"


def _numbers_differ(mine: dict, theirs: dict) -> list[str]:
    """Where two scores.json differ, key by key (provenance, settings, the score run's random generation id and the
    merged score's own per-site section aside), so a failure prints quickly."""
    differ = []
    for key in sorted(set(mine) | set(theirs)):
        if key in ("provenance", "settings", "generation", "sites"):
            continue
        a, b = mine.get(key), theirs.get(key)
        if key == "verdict":
            a = {k: v for k, v in a.items() if k != "sites"}
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            differ += [f"{key}[{i}].{k}" for i, (x, y) in enumerate(zip(a, b, strict=True)) if isinstance(x, dict)
                       for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
            differ += [f"{key}[{i}]" for i, (x, y) in enumerate(zip(a, b, strict=True))
                       if not isinstance(x, dict) and x != y]
        elif a != b:
            differ.append(key)
    return differ


def test_two_sites_merged_score_bit_for_bit_as_one_study_of_both(site_a, site_b, bundle_a, bundle_b, tmp_path):
    merged = score.run(merge.merge([bundle_a, bundle_b], tmp_path / "merged").out, SETTINGS).to_json()
    study = score.run(_one_study({"site-a": site_a, "site-b": site_b}, tmp_path / "study"), SETTINGS).to_json()
    assert merged["settings"]["datasets"] == study["settings"]["datasets"] == ["site-a.d1", "site-b.d1"]
    assert _numbers_differ(merged, study) == []
    by_site = {r["dataset"]: r for r in merged["per_dataset"] if r["encoder"] == "enc-b"}
    assert by_site["site-a.d1"] != {**by_site["site-b.d1"], "dataset": "site-a.d1"}  # the sites' numbers differ

    def settings(scored: dict, folder: str) -> str:  # the folders' own paths aside
        return json.dumps({k: v for k, v in scored["settings"].items() if k != "results"}).replace(folder, "FOLDER")

    assert settings(merged, str(tmp_path / "merged")) == settings(study, str(tmp_path / "study"))


@pytest.fixture(scope="module")
def merged_ab_folder(bundle_a, bundle_b, tmp_path_factory) -> Path:
    out = merge.merge([bundle_a, bundle_b], tmp_path_factory.mktemp("merged") / "ab").out
    score.run(out, SETTINGS)
    return out


@pytest.fixture(scope="module")
def merged_ab(merged_ab_folder) -> dict:
    return json.loads((merged_ab_folder / "scores" / "scores.json").read_text())


def test_a_merged_score_shows_each_sites_profile_beside_the_pooled_one(merged_ab, site_a, site_b):
    sites = merged_ab["sites"]
    assert sites["pooled_leader"] == merged_ab["verdict"]["leader"]
    assert [p["site"] for p in sites["sites"]] == ["site-a", "site-b"]
    assert [p["datasets"] for p in sites["sites"]] == [["site-a.d1"], ["site-b.d1"]]
    for profile, results in zip(sites["sites"], (site_a, site_b), strict=True):
        own = {e["encoder"]: e for e in json.loads((results / "scores" / "scores.json").read_text())["encoders"]}
        for row in profile["encoders"]:
            assert row["crs_low"] <= row["crs"] <= row["crs_high"]
            # the image bootstrap draws the first stratum's images first, so site A's draws are its own and its
            # profile is its own score; site B's images are drawn after A's, other draws of the same images
            if profile["site"] == "site-a":
                assert (row["crs"], row["crs_low"]) == (own[row["encoder"]]["crs"], own[row["encoder"]]["crs_low"])
            assert row["crs"] == pytest.approx(own[row["encoder"]]["crs"], abs=1.0)
    leader = {r["encoder"]: r for r in sites["sites"][1]["encoders"]}[sites["pooled_leader"]]
    assert (leader["crs_diff"], leader["crs_diff_low"], leader["crs_diff_high"]) == (0.0, 0.0, 0.0)
    for profile in sites["sites"]:
        for row in profile["encoders"]:
            assert row["crs_diff_low"] <= row["crs_diff"] <= row["crs_diff_high"]


def test_leaving_one_of_two_sites_out_is_the_other_sites_profile(merged_ab):
    sites = merged_ab["sites"]
    profiles = {p["site"]: p for p in sites["sites"]}
    for left in sites["leave_one_site_out"]:
        other = profiles["site-b" if left["site"] == "site-a" else "site-a"]
        assert (left["leader"], left["tier"]) == (other["leader"], other["tier"])
        assert left["crs"] == {r["encoder"]: r["crs"] for r in other["encoders"]}[left["leader"]]
        assert left["leader_changes"] == (left["leader"] != sites["pooled_leader"])


def test_the_verdict_says_when_the_sites_disagree_about_the_leader(merged_ab):
    from crs.scoring import verdict

    leaders = {p["site"]: p["leader"] for p in merged_ab["sites"]["sites"]}
    assert leaders == {"site-a": "enc-c", "site-b": "enc-b"} and merged_ab["verdict"]["leader"] == "enc-c"
    assert merged_ab["sites"]["sites_disagree"] and merged_ab["verdict"]["sites"]["disagree"]
    said = " ".join(verdict.sentences(merged_ab["verdict"]))
    assert ("The sites disagree about the leader: enc-c leads the pooled score and at site-a; enc-b leads at "
            "site-b.") in said
    assert "Leaving out site-a makes enc-b the leader." in said


def test_the_sites_sentence_when_they_agree_and_when_the_pooled_leader_leads_nowhere():
    from crs.scoring.verdict import sites_sentence

    agree = {"sites": {"pooled_leader": "a", "disagree": False, "leaders": {"x": "a", "y": "a"},
                       "leave_one_site_out": {"x": "a", "y": "a"}}}
    assert sites_sentence(agree) is None
    nowhere = {"sites": {"pooled_leader": "a", "disagree": True, "leaders": {"x": "b", "y": "c", "z": "b"},
                         "leave_one_site_out": {"x": "a", "y": "a", "z": "a"}}}
    assert sites_sentence(nowhere) == ("The sites disagree about the leader: a leads the pooled score but at no "
                                       "site alone; b leads at x and z; c leads at y. Leaving out any one site keeps "
                                       "a the leader.")


def test_one_sites_own_scores_have_no_site_section(site_a):
    own = json.loads((site_a / "scores" / "scores.json").read_text())
    assert "sites" not in own and "sites" not in own["verdict"]


def test_the_report_of_a_merged_score_has_a_per_site_panel(merged_ab_folder, merged_ab, tmp_path):
    from crs.scoring import report
    from crs.scoring.report.sites import sites_html

    report.write_report(merged_ab_folder, tmp_path / "report", quiet=True)
    text = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert "<h2 id='sites'>Sites</h2>" in text and "href='#sites'" in text
    assert text.count("<table class='board sites'>") == 2 and "Without site-a: enc-b leads (the leader changes)" in text
    assert sites_html(None) == ""  # one site's own scores: no panel


def test_a_merged_score_shows_what_the_sites_recorded_of_each_encoder(bundle_a, bundle_b, tmp_path):
    """A merged store holds no embeddings, so the encoders' revision, licence and cost travel in the sites'
    records: a value the sites agree on is scored, one each site measures on its own machine is not."""
    from crs.scoring.metadata import METADATA

    record = json.loads((bundle_a / bundles.SITE_RECORD).read_text())
    assert set(record["encoders"]["enc-a"]["metadata"]) == set(METADATA)  # what the site's store recorded
    a, b = (_copy(bundle, tmp_path / name) for bundle, name in ((bundle_a, "a"), (bundle_b, "b")))
    same = {"parameters": 1_000, "gflops": 2.5, "licence": "MIT"}
    _edit_site_record(a, lambda r: r["encoders"]["enc-a"].update(
        metadata={**same, "images_per_s": 100.0, "device": "cpu"}))
    _edit_site_record(b, lambda r: r["encoders"]["enc-a"].update(
        metadata={**same, "images_per_s": 300.0, "device": "cpu", "gated": True}))
    merged = merge.merge([a, b], tmp_path / "merged")
    recorded = json.loads((merged.out / merge.MERGE_RECORD).read_text())["encoder_metadata"]
    assert recorded["enc-a"] == {**same, "images_per_s": None, "device": "cpu", "gated": True}
    assert recorded["enc-b"] == {}  # the tiny store records nothing
    board = {r["encoder"]: r for r in score.run(merged.out, SETTINGS).to_json()["encoders"]}
    assert {k: board["enc-a"][k] for k in (*same, "images_per_s", "device", "gated")} == {
        **same, "images_per_s": None, "device": "cpu", "gated": True}
    assert board["enc-b"]["parameters"] is None
