"""The encoder registry: every record's contract, and every loader run offline on a tiny model.

For each real record the test builds a tiny random-weight model of the same architecture
class, saves it the way its hub repo ships it (safetensors folder, PyTorch checkpoint,
open_clip checkpoint, sharded vision-language checkpoint), loads it back through the real
loader with ``weights=`` and checks the width and the pooling against the model's own
output. The full-size architecture is built on the meta device to check the width.
"""

import dataclasses
import json
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.extract import encoders, models
from crs.extract.models import WeightsError, build_random, load, map_keys
from crs.foundations.errors import UserError
from crs.store.keys import store_key

REAL = [s.name for s in encoders.ENCODERS.values() if s.pretrained and s.source != "builtin"]


def test_registry_has_fifteen_real_families_of_each_kind():
    specs = [encoders.get(n) for n in REAL]
    assert len(specs) >= 15
    kinds = {f: {s.name for s in specs if s.family == f} for f in ("general", "medical", "specialty")}
    assert {"dinov2", "clip", "siglip"} <= kinds["general"]
    assert {"medsiglip", "medgemma", "biomedclip"} <= kinds["medical"] and len(kinds["medical"]) >= 4
    assert {"panderm", "retfound", "rad-dino"} <= kinds["specialty"] and len(kinds["specialty"]) >= 4
    for s in specs:
        assert s.page and s.page.startswith("https://"), s.name  # the card it was checked against
        assert s.licence != "unknown", s.name
        assert s.name == s.name.lower() and store_key(s.name) == s.name


@pytest.mark.parametrize("name", encoders.names())
def test_every_record_passes_the_schema(name):
    assert encoders.check_spec(encoders.get(name)) is encoders.get(name)


def test_a_bad_record_names_the_bad_field():
    bad = dataclasses.replace(encoders.get("clip"), pooling="max", family="other")
    with pytest.raises(ValueError, match="pooling 'max'.*|family 'other'"):
        encoders.check_spec(bad)


# ------------------------------------------------------------- full-size widths
@pytest.mark.parametrize("name", REAL)
def test_full_size_architecture_gives_the_record_width(name):
    """Build the full architecture on the meta device (no memory, no weights) and pool it."""
    spec = encoders.get(name)
    with torch.device("meta"):
        model, kind = build_random(spec)
    from crs.extract.models import Encoder

    enc = Encoder(spec, model, torch.device("meta"), kind)
    out = enc(torch.empty(2, 3, 40, 40, device="meta"))  # resized to the record's input size
    assert tuple(out.shape) == (2, spec.width)


# ------------------------------------------------------------- tiny models, real loaders
TINY_TIMM = {
    "resnet50": {"layers": (1, 1, 1, 1)},
    "convnext_base": {"depths": (1, 1, 1, 1), "dims": (8, 16, 32, 64)},
    "vit_base_patch16_224": {"depth": 1, "embed_dim": 32, "num_heads": 2, "img_size": 32},
    "vit_large_patch16_224": {"depth": 1, "embed_dim": 32, "num_heads": 2, "img_size": 32},
}


def tiny(spec):
    """The record shrunk to a tiny model of the same architecture class."""
    if spec.loader in ("timm", "timm-checkpoint"):
        arch = {**spec.arch, **TINY_TIMM[spec.arch["timm"]]}
        if "projection_dim" in arch:
            arch["projection_dim"] = 16
        size = arch.get("img_size", 32)
    else:
        patch = spec.arch["patch_size"]
        arch = {**spec.arch, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                "intermediate_size": 64, "image_size": 2 * patch}
        if "projection_dim" in arch:
            arch["projection_dim"] = 16
        size = 2 * patch
    spec = dataclasses.replace(spec, arch=arch, input_size=size, width=1)
    model, _ = build_random(spec)
    width = model.proj.out_features if spec.keymap == "open_clip" else (
        model.num_features if spec.loader.startswith("timm") else
        arch.get("projection_dim") if spec.hf_class == "CLIPVisionModelWithProjection" else 32)
    return dataclasses.replace(spec, width=width), model.eval()


def inverse_cae(state):
    """timm names -> PanDerm's CAE checkpoint names (the inverse of the 'cae' key map)."""
    out = {}
    for k, v in state.items():
        if k.endswith("attn.qkv.bias"):
            q, _, vb = v.chunk(3)
            out["encoder." + k.replace("qkv.bias", "q_bias")] = q
            out["encoder." + k.replace("qkv.bias", "v_bias")] = vb
        elif k.endswith("ls1.gamma"):
            out["encoder." + k.replace("ls1.gamma", "gamma_1")] = v
        elif k.endswith("ls2.gamma"):
            out["encoder." + k.replace("ls2.gamma", "gamma_2")] = v
        else:
            out["encoder." + k] = v
    out["regressor.blocks.0.weight"] = torch.zeros(3)  # pretraining-only parts are dropped
    return out


def save_like_the_hub(spec, model, folder):
    """Write the tiny model as the record's hub repo ships it; returns the --weights path."""
    from safetensors.torch import save_file

    if spec.loader == "timm":
        path = folder / "model.safetensors"
        save_file(model.state_dict(), str(path))
        return str(path)
    if spec.keymap == "mae":
        state = {**model.state_dict(), "decoder_embed.weight": torch.zeros(2, 2), "mask_token": torch.zeros(1, 1, 32)}
        path = folder / spec.checkpoint
        torch.save({"model": state, "epoch": 1}, path)
        return str(path)
    if spec.keymap == "cae":
        with torch.no_grad():  # CAE has no key bias: make the tiny model's zero so both agree
            for blk in model.blocks:
                d = blk.attn.qkv.bias.shape[0] // 3
                blk.attn.qkv.bias[d : 2 * d] = 0
        path = folder / spec.checkpoint
        torch.save({"model": inverse_cae(model.state_dict())}, path)
        return str(path)
    if spec.keymap == "open_clip":
        state = {"visual.trunk." + k: v for k, v in model.trunk.state_dict().items()}
        state["visual.head.proj.weight"] = model.proj.weight.detach().clone()
        state["text.transformer.embeddings.word_embeddings.weight"] = torch.zeros(4, 4)  # the text tower is ignored
        path = folder / spec.checkpoint
        torch.save(state, path)
        return str(path)
    if spec.loader == "hf":
        model.save_pretrained(folder)
        return str(folder)
    if spec.loader == "hf-vision-tower":
        # a Gemma-3-style repo: config with a vision_config, index, two shards; the language
        # model's shard is garbage, so loading it (or building the LM) would fail the test
        vision = {"model_type": "siglip_vision_model", **{k: getattr(model.config, k) for k in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "patch_size",
            "image_size")}, "vision_use_head": False}
        (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "vision_config": vision,
                                                        "text_config": {"model_type": "gemma3_text"}}))
        state = {"vision_tower." + k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / "model-00002-of-00002.safetensors"))
        (folder / "model-00001-of-00002.safetensors").write_bytes(b"not a safetensors file")
        weight_map = {k: "model-00002-of-00002.safetensors" for k in state}
        weight_map["language_model.model.embed_tokens.weight"] = "model-00001-of-00002.safetensors"
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        return str(folder)
    raise AssertionError(spec.loader)


def reference_pooling(spec, model, x):
    """What the record's pooling means, computed straight from the model."""
    with torch.no_grad():
        if spec.loader.startswith("timm"):
            if spec.pooling == "model":
                return model(x)
            feats = model.forward_features(x)
            if feats.ndim == 4:
                return feats.mean((2, 3))
            return feats[:, 0] if spec.pooling == "cls" else feats[:, model.num_prefix_tokens:].mean(1)
        out = model(pixel_values=x)
        if spec.pooling == "model":
            return out.image_embeds if hasattr(out, "image_embeds") else out.pooler_output
        prefix = 0 if "Siglip" in type(model).__name__ else 1
        return out.last_hidden_state[:, 0] if spec.pooling == "cls" else out.last_hidden_state[:, prefix:].mean(1)


@pytest.mark.parametrize("name", REAL)
def test_every_loader_runs_offline_on_a_tiny_model_of_its_class(name, tmp_path):
    spec = encoders.get(name)
    torch.manual_seed(0)
    small, model = tiny(spec)
    weights = save_like_the_hub(small, model, tmp_path)
    enc = load(small, torch.device("cpu"), weights=weights)
    x = torch.rand(3, 3, small.input_size, small.input_size)
    got = enc(x)
    assert got.shape == (3, small.width)
    expected = reference_pooling(small, model, (x - enc.mean) / enc.std)
    torch.testing.assert_close(got, expected.float(), atol=1e-4, rtol=1e-4)


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path):
    spec = encoders.get("retfound")
    small, _ = tiny(spec)
    torch.save({"model": {"foo.weight": torch.zeros(2)}}, tmp_path / "x.pth")
    with pytest.raises(WeightsError, match="lacks .* tensors"):
        load(small, "cpu", weights=str(tmp_path / "x.pth"))


def test_pickled_code_is_never_unpickled(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"model": Evil()}, tmp_path / "evil.pth")
    small, _ = tiny(encoders.get("retfound"))
    with pytest.raises(WeightsError, match="tensor-only"):
        load(small, "cpu", weights=str(tmp_path / "evil.pth"))


def test_panderm_without_weights_says_where_to_get_them():
    with pytest.raises(WeightsError, match="not on a model hub.*--weights"):
        load(encoders.get("panderm"), "cpu")


def test_a_gated_model_names_its_page_and_hf_token(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    def refuse(*a, **k):
        exc = GatedRepoError.__new__(GatedRepoError)  # as the hub raises it, without a live HTTP response
        Exception.__init__(exc, "401 Client Error: access to model YukunZhou/RETFound_mae_natureCFP is restricted")
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    with pytest.raises(WeightsError) as info:
        load(encoders.get("retfound"), "cpu")
    msg = str(info.value)
    assert "https://huggingface.co/YukunZhou/RETFound_mae_natureCFP" in msg and "HF_TOKEN" in msg


def test_offline_without_cache_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(WeightsError, match="not in the local cache.*HF_HUB_OFFLINE|HF_HUB_OFFLINE"):
        load(encoders.get("dinov2"), "cpu")


def test_no_connection_is_said_as_such_not_blamed_on_hf_hub_offline(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    def refuse(*a, **k):  # what the hub client raises once its retries found no connection
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    with pytest.raises(WeightsError) as info:
        load(encoders.get("retfound"), "cpu")
    msg = str(info.value)
    assert "cannot be reached" in msg and "HF_HUB_OFFLINE" not in msg and "--weights PATH" in msg, msg


def test_map_keys_cae_builds_the_qkv_bias_with_a_zero_key_bias():
    q, v = torch.ones(4), 2 * torch.ones(4)
    out = map_keys({"encoder.blocks.0.attn.q_bias": q, "encoder.blocks.0.attn.v_bias": v,
                    "encoder.blocks.0.gamma_1": q, "teacher.x": q}, "cae")
    assert set(out) == {"blocks.0.attn.qkv.bias", "blocks.0.ls1.gamma"}
    torch.testing.assert_close(out["blocks.0.attn.qkv.bias"], torch.tensor([1.0] * 4 + [0.0] * 4 + [2.0] * 4))


# ------------------------------------------------------------- demo records (kept)
@pytest.mark.parametrize("name", encoders.demo_names())
def test_demo_records_give_their_width(name):
    spec = encoders.get(name)
    out = load(spec, torch.device("cpu"))(torch.rand(3, 3, 48, 40))
    assert out.shape == (3, spec.width) and torch.isfinite(out).all()


def test_random_weights_are_reproducible():
    spec = encoders.get("demo-vit")
    x = torch.rand(2, 3, 64, 64)
    assert torch.equal(load(spec, "cpu")(x), load(spec, "cpu")(x))


def test_unknown_encoder_lists_valid_names():
    with pytest.raises(KeyError, match="valid encoders: demo-resnet.*timm:NAME"):
        encoders.get("nope")


def test_one_reference_for_real_runs_and_one_for_the_demo():
    demo = set(encoders.demo_names())
    real_refs = [s.name for s in encoders.ENCODERS.values() if s.reference and s.name not in demo]
    demo_refs = [s.name for s in encoders.ENCODERS.values() if s.reference and s.name in demo]
    assert real_refs == ["resnet50"] and demo_refs == ["demo-resnet"]
    assert encoders.get("resnet50").family == "general" and encoders.get("resnet50").pretrained
    assert encoders.default_reference(["demo-stats", "demo-resnet"]) == "demo-resnet"
    assert encoders.default_reference(["demo-stats"]) == "median"


def test_reference_for_names_the_reference_or_says_there_is_none():
    assert encoders.reference_for(["clip", "resnet50", "dinov2"])[0] == "resnet50"
    assert encoders.reference_for(["demo-vit", "demo-resnet"])[0] == "demo-resnet"
    assert encoders.reference_for(["demo-resnet", "resnet50"])[0] == "resnet50"  # a real run's reference first
    ref, note = encoders.reference_for(["clip", "dinov2"])
    assert ref is None and "clip, dinov2" in note and "resnet50" in note and "--reference" in note
    assert encoders.default_reference(["clip", "dinov2"]) == "median"


# ------------------------------------------------------------- user-given encoders
def test_store_keys_are_path_safe():
    for text in ("hf:org/Name", "timm:../../etc/passwd", "hf:a/b\x00c", "..", ".hidden", "a\nb", "x~y"):
        key = store_key(text)
        assert "/" not in key and "\\" not in key and not key.startswith(".") and key.isprintable()
        assert all(ord(c) >= 32 for c in key) and ":" not in key


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_store_keys_are_injective(a, b):
    if a != b:
        assert store_key(a) != store_key(b)


def test_long_ids_stay_short_and_distinct():
    a, b = "hf:" + "a" * 300 + "/x", "hf:" + "a" * 300 + "/y"
    assert len(store_key(a)) <= 200 and store_key(a) != store_key(b)


def test_timm_and_hf_ids(tmp_path):
    spec = encoders.from_id("timm:vit_tiny_patch16_224")
    assert spec.name == "timm~003avit_tiny_patch16_224" and spec.source == "timm" and spec.width == 0
    enc = load(dataclasses.replace(spec, pretrained=False, kwargs={"img_size": 32}), "cpu")
    assert enc.spec.width == 192 and enc(torch.rand(2, 3, 50, 50)).shape == (2, 192)
    assert encoders.resolve("hf:org/Model").model_id == "org/Model"
    for bad in ("hf:noslash", "hf:a/b/c", "pip:x", "timm:", "hf:a/b\x07"):
        with pytest.raises(ValueError, match="encoder id"):
            encoders.from_id(bad)


def test_encoder_file(tmp_path):
    f = tmp_path / "spec.toml"
    f.write_text('[[encoder]]\nname = "my-vit"\nfamily = "general"\nsource = "timm"\n'
                 'model_id = "vit_tiny_patch16_224"\nwidth = 192\ninput_size = 32\npretrained = false\n'
                 'init_seed = 0\npooling = "mean"\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n'
                 'kwargs = { img_size = 32 }\n')
    (spec,) = encoders.from_toml(str(f))
    assert spec.mean == (0.5, 0.5, 0.5) and spec.loader == "timm"
    assert load(spec, "cpu")(torch.rand(1, 3, 32, 32)).shape == (1, 192)
    f.write_text('[[encoder]]\nname = "clip"\nfamily = "general"\nsource = "timm"\nmodel_id = "x"\nwidth = 1\n'
                 'input_size = 1\n')
    with pytest.raises(ValueError, match="taken by the built-in registry"):
        encoders.from_toml(str(f))
    f.write_text('[[encoder]]\nname = "Bad Name"\nfamily = "general"\nsource = "timm"\nmodel_id = "x"\nwidth = 1\n'
                 'input_size = 1\ncolour = 3\n')
    with pytest.raises(ValueError, match="unknown keys"):
        encoders.from_toml(str(f))


def test_a_name_twice_in_an_encoder_file_is_refused(tmp_path):
    record = ('[[encoder]]\nname = "my-vit"\nfamily = "general"\nsource = "timm"\nmodel_id = "x"\nwidth = 1\n'
              'input_size = 1\n')
    f = tmp_path / "spec.toml"
    f.write_text(record + record.replace('model_id = "x"', 'model_id = "y"'))
    with pytest.raises(UserError, match="'my-vit' is given twice"):
        encoders.from_toml(str(f))


def test_a_duplicate_encoder_name_in_the_registry_is_refused():
    clip = encoders.get("clip")
    with pytest.raises(ValueError, match="the built-in registry: encoder name 'clip' is given twice"):
        encoders.index([clip, dataclasses.replace(clip, width=1)])
    assert encoders.index([clip])["clip"] is clip


# ------------------------------------------------------------------ the loader registry
def test_every_loader_name_a_record_may_give_has_one_loader():
    assert set(models.LOADERS) == set(encoders.LOADERS)
    assert {s.loader for s in encoders.ENCODERS.values()} <= set(models.LOADERS)
    assert all(name == loader.name for name, loader in models.LOADERS.items())


def test_a_duplicate_loader_name_is_refused():
    before = dict(models.LOADERS)
    with pytest.raises(ValueError, match="loader 'timm' is registered already"):
        models.register_loader(models.Loader("timm", "timm", lambda spec, weights, trust: None))
    assert models.LOADERS == before


def test_an_unknown_loader_is_refused_by_name():
    spec = dataclasses.replace(encoders.get("demo-vit"), loader="onnx")
    with pytest.raises(ValueError, match="loader 'onnx' is not supported"):
        load(spec, "cpu")
    with pytest.raises(ValueError, match="no architecture to build for loader 'onnx'"):
        build_random(spec)


def test_weights_and_record_errors_are_user_errors():
    assert issubclass(WeightsError, UserError)
    with pytest.raises(UserError, match="encoder id"):
        encoders.from_id("pip:x")


# ------------------------------------------------------------- real weights (network)
@pytest.mark.network
@pytest.mark.parametrize("name", [n for n in REAL if not encoders.get(n).gated and n != "panderm"])
def test_real_weights_load_and_give_the_record_width(name):
    spec = encoders.get(name)
    enc = load(spec, "cpu")
    out = enc(torch.rand(2, 3, 64, 64))
    assert out.shape == (2, spec.width) and torch.isfinite(out).all()


def test_processor_settings_read_what_the_file_states():
    from crs.extract.models import processor_settings

    siglip = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "size": {"height": 448, "width": 448},
              "resample": 2, "do_resize": True}
    assert processor_settings(siglip) == {"mean": (0.5,) * 3, "std": (0.5,) * 3, "input_size": 448,
                                          "interpolation": "bilinear"}
    dino = {"crop_size": {"height": 224, "width": 224}, "do_center_crop": True, "size": {"shortest_edge": 256},
            "resample": 3, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    assert processor_settings(dino)["input_size"] == 224 and processor_settings(dino)["interpolation"] == "bicubic"
    assert processor_settings({"size": {"shortest_edge": 256}, "crop_size": 200})["input_size"] == 256  # no crop
    assert processor_settings({"image_mean": 0.5, "resample": 1}) == {"mean": (0.5,) * 3}  # lanczos: not ours
    assert processor_settings({}) == {}


def test_an_hf_id_takes_its_normalisation_from_its_processor_config(tmp_path):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    cfg = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                             image_size=32, patch_size=8)
    SiglipVisionModel(cfg).save_pretrained(tmp_path / "m")
    spec = encoders.from_id("hf:org/tiny-siglip")
    plain = load(spec, "cpu", weights=str(tmp_path / "m"))
    assert plain.spec.mean == encoders.IMAGENET_MEAN and plain.spec.input_size == 32  # no processor file
    (tmp_path / "m" / "preprocessor_config.json").write_text(json.dumps(
        {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "size": {"height": 32, "width": 32},
         "resample": 2}))
    enc = load(spec, "cpu", weights=str(tmp_path / "m"))
    assert enc.spec.mean == (0.5, 0.5, 0.5) and enc.spec.std == (0.5, 0.5, 0.5)
    assert enc.spec.interpolation == "bilinear" and enc.spec.width == 32
    assert torch.allclose(enc.mean.flatten().cpu(), torch.full((3,), 0.5))


@pytest.mark.parametrize("name", ["XetDownloadError", "FileMetadataError", "RevisionResolutionError"])
def test_every_hub_error_class_is_the_users_to_repair(monkeypatch, name):
    """A download failing with any error huggingface_hub defines, not only the ones named in our code, is a
    weights problem (exit 2) with the encoder named, never "our bug"."""
    import timm
    from huggingface_hub import errors

    cls = getattr(errors, name, None)
    if cls is None:
        pytest.skip(f"this huggingface_hub has no {name}")

    def fail(*a, pretrained=False, **k):
        exc = cls.__new__(cls)  # as the hub raises it, without a live HTTP response
        Exception.__init__(exc, "download failed")
        raise exc

    monkeypatch.setattr(timm, "create_model", fail)
    spec = encoders.get("vit-base")
    assert spec.loader == "timm" and spec.pretrained
    with pytest.raises(WeightsError, match="vit-base"):
        load(spec, "cpu")
