"""The extraction commands through typer's CliRunner: encoders, user-given encoders, errors (exit 2)."""

import json

from typer.testing import CliRunner

from crs.cli import app
from crs.extract import encoders
from crs.store import Store


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_encoders_table_and_json():
    r = invoke("encoders", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert [row["name"] for row in rows] == encoders.names()
    for row in rows:
        for key in ("name", "family", "source", "model_id", "revision", "width", "input_size", "mean", "std",
                    "interpolation", "pooling", "licence", "gated", "page"):
            assert key in row
    r = invoke("encoders")
    assert r.exit_code == 0 and "medgemma" in r.output and "gated" in r.output and "1152" in r.output


def test_encoder_file_and_its_store_key(tmp_path):
    f = tmp_path / "spec.toml"
    f.write_text('[[encoder]]\nname = "my-vit"\nfamily = "general"\nsource = "timm"\n'
                 'model_id = "vit_tiny_patch16_224"\nwidth = 192\ninput_size = 32\npretrained = false\n'
                 'init_seed = 0\npooling = "mean"\nkwargs = { img_size = 32 }\n')
    store = tmp_path / "s.zarr"
    r = invoke("extract", "--encoder-file", f, "-e", "my-vit", "-d", "demo_fundus", "--size", "0.05",
               "--severities", "1", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    run = json.loads(r.output)["runs"][0]
    assert run["encoder"] == "my-vit" and run["complete"]
    assert ("demo_fundus", "my-vit", "pixelate@1", True) in set(Store(str(store), mode="r").embeddings())
    r = invoke("encoders", "--encoder-file", f)
    assert r.exit_code == 0 and "my-vit" in r.output


def test_perturbation_families_keep_part_of_the_suite_and_are_recorded(tmp_path):
    store = tmp_path / "s.zarr"
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_fundus", "--size", "0.05", "--severities", "2",
               "--perturbation-families", "jpeg,ink_marks,gaussian_noise", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    s = Store(str(store), mode="r")
    held = {c for d, e, c, done in s.embeddings() if done}
    assert held == {"clean", "jpeg@2", "gaussian_noise@2"}  # ink_marks is not in the ophthalmology suite
    settings = s.root["datasets/demo_fundus/embeddings/demo-stats/jpeg@2"].attrs["tool"]["settings"]["extract"]
    assert settings["families"] == ["jpeg", "ink_marks", "gaussian_noise"]
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_fundus", "--size", "0.05", "--severities", "2",
               "--perturbation-families", "ink_marks", "--store", tmp_path / "t.zarr")
    assert r.exit_code == 2 and "keeps none of the ophthalmology suite" in r.output, r.output


def test_bad_encoders_exit_2_with_advice(tmp_path):
    store = tmp_path / "s.zarr"
    cases = [
        (("-e", "nope"), "unknown encoder 'nope'"),
        (("-e", "hf:noslash"), "hf:ORG/NAME"),
        (("-e", "demo-stats", "-e", "demo-vit", "--weights", tmp_path), "exactly one --encoder"),
        (("-e", "panderm"), "--weights PATH"),
        (("-e", "demo-stats", "--severities", "0,9"), "--severities"),
        (("-e", "demo-stats", "--workers", "-1"), "--workers"),
    ]
    for args, message in cases:
        r = invoke("extract", *args, "-d", "demo_fundus", "--size", "0.05", "--store", store)
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output, (args, r.output)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[encoder]]\nname = 3\n")
    r = invoke("extract", "--encoder-file", bad, "-e", "x", "-d", "demo_fundus", "--store", store)
    assert r.exit_code == 2 and "lacks" in r.output


def test_a_hub_model_offline_without_cache_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    r = invoke("extract", "-e", "hf:org/model", "-d", "demo_fundus", "--size", "0.05", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2, r.output
    assert "HF_HUB_OFFLINE" in r.output


def test_an_encoder_file_width_the_model_does_not_give_exits_2_naming_both_widths(tmp_path):
    """A user's record that declares the wrong width is bad input (exit 2), not our bug: the message names the
    encoder, the width declared, the width measured and the fix."""
    f = tmp_path / "spec.toml"
    f.write_text('[[encoder]]\nname = "my-vit"\nfamily = "general"\nsource = "timm"\n'
                 'model_id = "vit_tiny_patch16_224"\nwidth = 200\ninput_size = 32\npretrained = false\n'
                 'init_seed = 0\npooling = "mean"\nkwargs = { img_size = 32 }\n')  # vit_tiny gives 192
    r = invoke("extract", "--encoder-file", f, "-e", "my-vit", "-d", "demo_fundus", "--size", "0.05",
               "--no-perturb", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "'my-vit'" in text and "200" in text and "192" in text and "width" in text and "encoder file" in text
