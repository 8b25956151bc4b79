"""`crs extract --plan`, the encoder sets, --revision, reference auto and `crs --version`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from crs import stages
from crs.cli import app
from crs.extract import datasets as dsreg
from crs.extract import encoders as encreg
from crs.extract import perturb
from crs.extract import plan as planmod
from crs.foundations import config as C


def invoke(*args, **env):
    return CliRunner().invoke(app, [str(a) for a in args], env=env or None)


# ---------------------------------------------------------------- the pure part
def test_a_pair_counts_forward_passes_bytes_and_time_by_hand():
    p = planmod.pair("e", "d", width=768, macs=1e9, rows=planmod.Rows(100, 20, 5), itemsize=2,
                     speed=planmod.Speed(peak_tflops=1.0, utilisation=0.5))
    assert (p.conditions, p.forward_passes) == (6, 100 + 20 * 5)
    assert p.store_bytes == 768 * 2 * 200
    assert p.gpu_seconds == pytest.approx(200 * 2e9 / 0.5e12)  # 2 FLOPs a multiply-add, at half of 1 TFLOP/s
    unknown = planmod.pair("e", "x", width=768, macs=None, rows=planmod.Rows(None, None), itemsize=2)
    t = planmod.totals([p, unknown])
    assert t["pairs"] == 2 and t["forward_passes"] is None and t["gpu_seconds"] is None  # never understated


def test_vit_base_multiply_adds_match_the_published_figure():
    # ViT-B/16 at 224: 17.6 G multiply-adds (Dosovitskiy et al. 2021; timm's model table)
    assert planmod.macs_per_image(encreg.get("vit-base")) == pytest.approx(17.6e9, rel=0.01)
    assert planmod.macs_per_image(encreg.get("resnet50")) == pytest.approx(4.1e9)
    assert planmod.macs_per_image(encreg.get("demo-stats")) is None


# ---------------------------------------------------------------- sets
def test_sets_take_their_registry_members():
    pretrained = set(stages.set_members("pretrained"))
    assert pretrained == {s.name for s in encreg.ENCODERS.values() if s.pretrained and s.source != "builtin"}
    assert not pretrained & set(encreg.demo_names())
    for family in ("general", "medical", "specialty"):
        members = stages.set_members(family)
        assert members and all(encreg.get(m).family == family for m in members)
    assert stages.set_members("demo") == encreg.demo_names()


def test_a_toml_set_alone_means_its_encoders_and_names_add_to_it():
    cfg = stages.with_sets(C.parse('[encoders]\nset = "medical"\n'))
    assert list(cfg.encoders.names) == stages.set_members("medical")
    cfg = stages.with_sets(C.parse('[encoders]\nnames = ["demo-stats"]\nset = ["specialty", "medical"]\n'))
    assert cfg.encoders.names == ("demo-stats", *stages.set_members("specialty"), *stages.set_members("medical"))
    with pytest.raises(C.ConfigError, match="encoders.set"):
        C.parse('[encoders]\nset = ["medic"]\n')


def test_extract_all_is_refused_naming_the_sets():
    r = invoke("extract", "--all", "--plan")
    assert r.exit_code == 2
    assert "--demo" in r.output and "--pretrained" in r.output and "--family" in r.output


# ---------------------------------------------------------------- the plan through the command line
def test_the_demo_plan_counts_what_extraction_would_embed(tmp_path):
    r = invoke("extract", "--demo", "-d", "demo_derm", "-d", "demo_cxr", "--size", "0.2", "--severities", "2,4",
               "--store", tmp_path / "s.zarr", "--plan", "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)
    assert p["complete"] and not p["missing"]
    assert not (tmp_path / "s.zarr").exists()  # nothing written
    by = {(x["encoder"], x["dataset"]): x for x in p["pairs"]}
    assert {e for e, _ in by} == set(encreg.demo_names())
    assert {d for _, d in by} == {"demo_derm", "demo_cxr", "demo_cxr_site2"}  # the shift target comes along
    for name in ("demo_derm", "demo_cxr_site2"):
        ds = dsreg.get(name, size=0.2)
        split = np.asarray(ds.table().split)
        n, test = split.size, int((split == 2).sum())
        perturbed = len(perturb.suite(ds.modality)) * 2 if (split == 0).any() else 0
        row = by[("demo-resnet", name)]
        assert (row["images"], row["test_images"], row["conditions"]) == (n, test, 1 + perturbed)
        assert row["forward_passes"] == n + test * perturbed
        assert row["store_bytes"] == encreg.get("demo-resnet").width * 2 * row["forward_passes"]
    assert p["totals"]["forward_passes"] == sum(x["forward_passes"] for x in p["pairs"])


def test_the_plan_loads_no_model_and_decodes_no_image(tmp_path):
    code = ("import sys; from crs.cli import main; sys.argv = ['crs', 'extract', '--demo', '-d', 'demo_fundus', "
            "'--size', '0.2', '--plan', '--quiet']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e\n"
            "assert 'torch' not in sys.modules and 'timm' not in sys.modules, 'the plan imported torch'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_missing_dataset_folder_and_a_gated_model_without_token_exit_2(tmp_path):
    env = {"HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "", "HF_HOME": str(tmp_path / "hf")}
    r = invoke("extract", "-e", "medsiglip", "-d", "isic2019", "--root", tmp_path / "nowhere", "--plan", "--json",
               **env)
    assert r.exit_code == 2, r.output
    p = json.loads(r.stdout)
    assert not p["complete"]
    assert any(m.startswith("medsiglip:") for m in p["missing"]), p["missing"]
    assert any(m.startswith("isic2019:") and "nowhere" in m for m in p["missing"]), p["missing"]
    text = invoke("extract", "-e", "medsiglip", "-d", "isic2019", "--root", tmp_path / "nowhere", "--plan", **env)
    assert text.exit_code == 2 and "not complete" in text.output and "HF_TOKEN" in text.output


# ---------------------------------------------------------------- --revision
def test_revision_pins_an_encoder_of_the_run_and_refuses_others(tmp_path):
    r = invoke("extract", "-e", "resnet50", "-d", "demo_derm", "--size", "0.2", "--revision",
               "resnet50=0123456789abcdef0123456789abcdef01234567", "--plan", "--json")
    p = json.loads(r.stdout)
    assert p["encoders"][0]["revision"] == "0123456789abcdef0123456789abcdef01234567"
    r = invoke("extract", "-e", "resnet50", "-d", "demo_derm", "--revision", "vit-base=main", "--plan")
    assert r.exit_code == 2 and "'vit-base' is not an encoder of this run" in r.output
    r = invoke("extract", "-e", "demo-resnet", "-d", "demo_derm", "--revision", "demo-resnet=main", "--plan")
    assert r.exit_code == 2 and "no revision to pin" in r.output
    r = invoke("extract", "-e", "resnet50", "-d", "demo_derm", "--revision", "resnet50", "--plan")
    assert r.exit_code == 2 and "ENCODER=REV" in r.output
    cfg = C.parse('[encoders]\nnames = ["resnet50"]\n[encoders.revisions]\nresnet50 = "main"\n')
    assert [s.revision for s in stages.names.encoder_specs(cfg, {})] == ["main"]


# ---------------------------------------------------------------- reference auto, --version
def test_reference_auto_takes_the_registry_reference_or_says_what_it_fell_back_to():
    assert stages.resolve_reference("auto", ["demo-resnet", "demo-stats"]) == ("demo-resnet", None)
    assert stages.resolve_reference("auto", ["demo-resnet+mlp", "demo-stats+mlp"]) == ("demo-resnet+mlp", None)
    assert stages.resolve_reference("median", ["demo-resnet"]) == ("median", None)
    ref, note = stages.resolve_reference("auto", ["demo-stats", "demo-vit"])
    assert ref == "median" and "fell back to 'median'" in note and "--reference" in note


def test_run_check_says_the_fallback_of_reference_auto(tmp_path):
    cfg = tmp_path / "b.toml"
    cfg.write_text('[encoders]\nnames = ["demo-stats", "demo-vit"]\n')
    r = invoke("run", cfg, "--check")
    assert r.exit_code == 0 and "reference median" in r.output and "fell back to 'median'" in r.output
    r = invoke("run", cfg, "--check", "--json")
    assert json.loads(r.stdout)["warnings"][0].startswith("reference 'auto'")


def test_version_prints_the_provenance_line():
    from crs.foundations import provenance

    r = invoke("--version")
    assert r.exit_code == 0 and r.output.strip() == provenance.version_line()


def test_run_check_expands_a_set_and_names_a_bad_one_by_line(tmp_path):
    cfg = tmp_path / "b.toml"
    cfg.write_text('store = "s.zarr"\n\n[encoders]\nset = "specialty"\n')
    r = invoke("run", cfg, "--check", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["settings"]["encoders"]["names"] == stages.set_members("specialty")
    cfg.write_text('store = "s.zarr"\n\n[encoders]\nset = ["general", "medicine"]\n')
    r = invoke("run", cfg, "--check")
    assert r.exit_code == 2 and "b.toml line 4: encoders.set" in r.output and "'medicine'" in r.output
