"""Revisions: every pretrained record pins one or says why not; --revision pins one per run;
what was loaded (the hub snapshot's commit, or the sha256 of a --weights file) is recorded.

The hub tests run offline against a local cache laid out as huggingface_hub lays it out
(HUB/models--ORG--NAME/{refs/main, snapshots/<commit>/...}), filled with tiny random-weight
models, so that the real loaders (transformers' from_pretrained, timm's hub download) read it.
"""

import dataclasses
import hashlib

import pytest
import torch

from crs.extract import encoders
from crs.extract.models import WeightsError, load, weights_sha256, weights_status
from crs.foundations.errors import BadInput

PRETRAINED = [s.name for s in encoders.ENCODERS.values() if s.pretrained and s.source != "builtin"]
COMMIT_A, COMMIT_B, COMMIT_C = "a" * 40, "b" * 40, "c" * 40


@pytest.mark.parametrize("name", PRETRAINED)
def test_every_pretrained_record_pins_a_commit_or_says_why_not(name):
    spec = encoders.get(name)
    if spec.revision is not None:
        assert encoders.is_commit(spec.revision), f"{name}: {spec.revision!r} is not a full commit id"
        assert spec.revision_note is None
    else:
        assert spec.revision_note and len(spec.revision_note) > 20, f"{name}: no revision and no revision_note"


def test_demo_and_builtin_records_pin_nothing():
    for name in encoders.demo_names():
        assert encoders.get(name).revision is None


@pytest.mark.parametrize("rev", [COMMIT_A, "main", "v1.0", "refs/pr/3", "release_2024"])
def test_with_revision_accepts_a_commit_or_a_branch_or_tag(rev):
    spec = encoders.with_revision(encoders.get("clip"), rev)
    assert spec.revision == rev and spec.revision_note is None
    assert encoders.with_revision(spec, None) is spec


@pytest.mark.parametrize("rev, why", [
    ("57c2164", "abbreviated"), ("A" * 40, "abbreviated or upper-case"), ("a b", "branch/tag name"),
    ("../main", "branch/tag name"), ("-x", "branch/tag name"), ("", "branch/tag name"), ("main/", "branch/tag name"),
])
def test_with_revision_refuses_what_the_hub_cannot_resolve(rev, why):
    with pytest.raises(BadInput, match=f"--revision clip=.*{why}"):
        encoders.with_revision(encoders.get("clip"), rev)


def test_with_revision_refuses_records_without_hub_weights():
    for name, why in (("demo-stats", "loads no hub weights"), ("demo-vit", "loads no hub weights"),
                      ("panderm", "not on a model hub")):
        with pytest.raises(BadInput, match=why):
            encoders.with_revision(encoders.get(name), COMMIT_A)


def test_an_encoder_file_keeps_its_revision_and_refuses_a_bad_one(tmp_path):
    f = tmp_path / "spec.toml"
    record = ('[[encoder]]\nname = "my-dino"\nfamily = "general"\nsource = "hf"\nmodel_id = "org/dino"\n'
              'width = 32\ninput_size = 28\nhf_class = "Dinov2Model"\nrevision = "{rev}"\n')
    f.write_text(record.format(rev=COMMIT_A))
    (spec,) = encoders.from_toml(str(f))
    assert spec.revision == COMMIT_A
    f.write_text(record.format(rev="abc1234"))
    with pytest.raises(BadInput, match="'my-dino'.*abbreviated"):
        encoders.from_toml(str(f))


# ------------------------------------------------------------------ a local hub cache
@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty offline hub cache; huggingface_hub (and transformers, timm through it) read it."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def snapshot(cache, repo, commit, main=False):
    """The folder of one snapshot of ``repo`` (refs/main pointing at it if ``main``)."""
    root = cache / ("models--" + repo.replace("/", "--"))
    folder = root / "snapshots" / commit
    folder.mkdir(parents=True)
    if main:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(commit)
    return folder


def tiny_dino(seed):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(seed)
    return Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64, patch_size=14, image_size=28)).eval()


DINO = dataclasses.replace(encoders.get("dinov2"), name="tiny-dino", model_id="org/tiny-dino", width=32,
                           input_size=28, revision=None, revision_note="test")


@pytest.fixture
def dino_hub(hub):
    """org/tiny-dino with two commits in the cache: A (main) and B, different weights."""
    models = {}
    for commit, seed, main in ((COMMIT_A, 0, True), (COMMIT_B, 1, False)):
        models[commit] = tiny_dino(seed)
        models[commit].save_pretrained(snapshot(hub, DINO.model_id, commit, main=main))
    return models


def cls_of(model, x, spec):
    mean = torch.tensor(spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(spec.std).view(1, 3, 1, 1)
    with torch.no_grad():
        return model(pixel_values=(x - mean) / std).last_hidden_state[:, 0]


def test_the_hub_commit_loaded_is_recorded_and_a_revision_pins_it(dino_hub):
    x = torch.rand(2, 3, 28, 28)
    enc = load(DINO, "cpu")
    assert enc.weights_info == {"source": "hub: org/tiny-dino", "revision_requested": None,
                                "revision_loaded": COMMIT_A, "weights_sha256": None}
    torch.testing.assert_close(enc(x), cls_of(dino_hub[COMMIT_A], x, DINO))
    pinned = load(encoders.with_revision(DINO, COMMIT_B), "cpu")
    assert pinned.weights_info["revision_requested"] == COMMIT_B
    assert pinned.weights_info["revision_loaded"] == COMMIT_B
    torch.testing.assert_close(pinned(x), cls_of(dino_hub[COMMIT_B], x, DINO))  # B's weights, not main's
    assert load(encoders.with_revision(DINO, "main"), "cpu").weights_info["revision_loaded"] == COMMIT_A


@pytest.mark.parametrize("rev", [COMMIT_C, "v2"])
def test_a_revision_not_in_the_cache_is_refused_offline_naming_it_and_the_fix(dino_hub, rev):
    with pytest.raises(WeightsError) as info:
        load(encoders.with_revision(DINO, rev), "cpu")
    msg = str(info.value)
    assert rev in msg and "not in the local cache" in msg and "HF_HUB_OFFLINE" in msg
    assert "--revision tiny-dino=" in msg and COMMIT_A in msg and COMMIT_B in msg  # what the cache holds


def test_weights_status_reads_the_cache_only(dino_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    assert weights_status(DINO) == {"in_cache": True, "gated": False, "token": True, "problem": None}
    assert weights_status(encoders.with_revision(DINO, COMMIT_B))["in_cache"] is True
    missing = weights_status(encoders.with_revision(DINO, COMMIT_C))
    assert missing["in_cache"] is False and COMMIT_C in missing["problem"] and "HF_HUB_OFFLINE" in missing["problem"]
    other = dataclasses.replace(DINO, model_id="org/absent", gated=True)
    status = weights_status(other)
    assert status["in_cache"] is False and status["gated"] is True and "org/absent" in status["problem"]
    assert weights_status(encoders.get("demo-stats"))["in_cache"] is None


def test_weights_status_flags_a_gated_repo_without_a_token(hub, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    status = weights_status(encoders.get("medsiglip"))
    assert status["token"] is False and status["in_cache"] is False
    assert "gated" in status["problem"] and "HF_TOKEN" in status["problem"]
    assert "https://huggingface.co/google/medsiglip-448" in status["problem"]


def test_a_timm_record_is_pinned_through_its_hub_id(hub):
    """A registry-style timm record (arch.tag, weights on the hub under timm/...) loaded from the cache."""
    import timm
    from safetensors.torch import save_file

    kwargs = {"depth": 1, "embed_dim": 32, "num_heads": 2, "img_size": 32}
    spec = encoders.EncoderSpec(name="tiny-vit", family="general", source="timm",
                                model_id="vit_tiny_patch16_224.augreg_in21k", width=32, input_size=32,
                                pooling="cls", kwargs=kwargs, licence="test", revision_note="test")
    for commit, seed in ((COMMIT_A, 0), (COMMIT_B, 1)):
        torch.manual_seed(seed)
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **kwargs)
        folder = snapshot(hub, "timm/vit_tiny_patch16_224.augreg_in21k", commit, main=commit == COMMIT_A)
        save_file(model.state_dict(), str(folder / "model.safetensors"))
    x = torch.rand(1, 3, 32, 32)
    main, pinned = load(spec, "cpu"), load(encoders.with_revision(spec, COMMIT_B), "cpu")
    assert main.weights_info["revision_loaded"] == COMMIT_A
    assert main.weights_info["source"] == "hub: timm/vit_tiny_patch16_224.augreg_in21k"
    assert pinned.weights_info["revision_loaded"] == COMMIT_B
    assert not torch.allclose(main(x), pinned(x))  # the pinned snapshot's weights were read
    with pytest.raises(WeightsError, match=f"{COMMIT_C}.*not in the local cache"):
        load(encoders.with_revision(spec, COMMIT_C), "cpu")


# ------------------------------------------------------------------ local --weights
def test_a_weights_file_is_recorded_by_its_sha256(tmp_path):
    model = tiny_dino(0)
    model.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / ".cache").mkdir()
    (tmp_path / "m" / ".cache" / "download.lock").write_text("bookkeeping")  # left out of the digest
    enc = load(DINO, "cpu", weights=str(tmp_path / "m"))
    files = sorted(p.name for p in (tmp_path / "m").iterdir() if p.is_file())
    assert files == ["config.json", "model.safetensors"]
    lines = "".join(f"{n}\0{hashlib.sha256((tmp_path / 'm' / n).read_bytes()).hexdigest()}\n" for n in files)
    assert enc.weights_info["weights_sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert enc.weights_info["revision_loaded"] is None and enc.weights_info["source"].startswith("local: ")
    one = tmp_path / "m" / "model.safetensors"
    assert weights_sha256(one) == hashlib.sha256(one.read_bytes()).hexdigest()
    before = weights_sha256(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text((tmp_path / "m" / "config.json").read_text() + " ")
    assert weights_sha256(tmp_path / "m") != before


def test_builtin_and_random_init_record_no_revision():
    stats = load(encoders.get("demo-stats"), "cpu").weights_info
    assert stats["source"].startswith("builtin") and stats["revision_loaded"] is None
    vit = load(encoders.get("demo-vit"), "cpu").weights_info
    assert vit["source"].startswith("random init, torch seed 0") and vit["weights_sha256"] is None


@pytest.mark.parametrize("name", ["retfound", "biomedclip", "medgemma"])
def test_checkpoint_and_vision_tower_loaders_record_the_snapshot_read(hub, name):
    """A tiny model of the record's class saved as its hub repo ships it, in the snapshot the record pins
    (or main's); the loader fetches its files from the cache, and weights_status sees them there."""
    from test_encoders import save_like_the_hub, tiny

    small, model = tiny(encoders.get(name))
    commit = small.revision or COMMIT_A
    folder = snapshot(hub, small.model_id, commit, main=small.revision is None)
    save_like_the_hub(small, model, folder)
    assert weights_status(small)["in_cache"] is True
    enc = load(small, "cpu")
    assert enc.weights_info["revision_loaded"] == commit
    assert enc.weights_info["source"].startswith(f"hub: {small.model_id}")
    assert enc(torch.rand(1, 3, small.input_size, small.input_size)).shape == (1, small.width)
    if name == "medgemma":  # the vision shard gone: not in the cache, though the config and index are
        (folder / "model-00002-of-00002.safetensors").unlink()
        assert weights_status(small)["in_cache"] is False


def test_a_timm_hf_hub_id_is_pinned_with_at_revision(hub):
    """``timm:hf-hub:ORG/NAME``: timm reads config.json and the weights of 'ORG/NAME@REVISION'."""
    import json

    import timm
    from safetensors.torch import save_file

    args = {"depth": 1, "embed_dim": 32, "num_heads": 2, "img_size": 32}
    config = {"architecture": "vit_tiny_patch16_224", "num_classes": 0, "num_features": 32, "model_args": args,
              "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.5] * 3, "std": [0.5] * 3,
                                 "interpolation": "bicubic", "num_classes": 0}}
    for commit, seed in ((COMMIT_A, 0), (COMMIT_B, 1)):
        torch.manual_seed(seed)
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **args)
        folder = snapshot(hub, "org/tiny-vit", commit, main=commit == COMMIT_A)
        save_file(model.state_dict(), str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(config))
    spec = encoders.from_id("timm:hf-hub:org/tiny-vit")
    main, pinned = load(spec, "cpu"), load(encoders.with_revision(spec, COMMIT_B), "cpu")
    assert main.weights_info["revision_loaded"] == COMMIT_A and main.spec.width == 32
    assert pinned.weights_info == {"source": "hub: org/tiny-vit", "revision_requested": COMMIT_B,
                                   "revision_loaded": COMMIT_B, "weights_sha256": None}
    x = torch.rand(1, 3, 32, 32)
    assert not torch.allclose(main(x), pinned(x))
    assert weights_status(spec)["in_cache"] is True
    (hub / "models--org--tiny-vit" / "snapshots" / COMMIT_A / "config.json").unlink()
    assert weights_status(spec)["in_cache"] is False and weights_status(spec)["problem"]
