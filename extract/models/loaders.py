"""The loaders: how a record's weights become a torch module (timm, a timm checkpoint, transformers,
a vision tower, the built-ins), with random weights for the tests (``build_random``), ``load`` and the
loader registry (``LOADERS``, ``register_loader``)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from crs.extract.encoders import ENCODERS, EncoderSpec
from crs.extract.models.encoder import Encoder, builtin_model, pick_device
from crs.extract.models.hub import WeightsError, hub_error, hub_errors, hub_file, timm_hub_id
from crs.extract.models.weights import fill_model, loaded_weights_info, map_keys, read_state_dict, weights_file


class ProjectedTrunk(torch.nn.Module):
    """An open_clip-style image tower: a timm trunk's pooled features times a projection."""

    def __init__(self, trunk: torch.nn.Module, width: int):
        super().__init__()
        self.trunk = trunk
        self.proj = torch.nn.Linear(trunk.num_features, width, bias=False)

    def forward(self, x):
        return self.proj(self.trunk(x))


def _timm_model(spec: EncoderSpec, weights: str | None) -> torch.nn.Module:
    import timm  # timm: only a timm encoder needs it

    if spec.init_seed is not None:
        torch.manual_seed(spec.init_seed)
    if weights is None:
        model_id, pin = spec.model_id, {}
        if spec.revision and spec.pretrained:  # timm reads 'REPO@REVISION' from the hub id
            if model_id.startswith("hf-hub:"):
                model_id = f"{model_id.split('@')[0]}@{spec.revision}"
            elif timm_hub_id(spec):
                pin = {"pretrained_cfg_overlay": {"hf_hub_id": f"{timm_hub_id(spec)}@{spec.revision}"}}
            else:
                raise WeightsError(f"encoder {spec.name!r}: timm does not take the weights of {spec.model_id} from "
                                   "the hub, so a revision cannot pin them; drop --revision for it")
        try:
            return timm.create_model(model_id, pretrained=spec.pretrained, num_classes=0, **pin, **spec.kwargs)
        except RuntimeError as exc:
            if "model" in str(exc).lower() and "unknown" in str(exc).lower():
                raise WeightsError(f"encoder {spec.name!r}: timm has no model {spec.model_id!r}") from exc
            raise
        except hub_errors() as exc:
            raise hub_error(spec, exc) from exc
    model = timm.create_model(spec.arch.get("timm", spec.model_id), pretrained=False, num_classes=0,
                              **_timm_arch_kwargs(spec))
    fill_model(model, read_state_dict(weights_file(weights)), spec, weights)
    return model


_NOT_TIMM_KWARGS = ("timm", "projection_dim", "hub")


def _timm_arch_kwargs(spec: EncoderSpec) -> dict:
    """create_model arguments beyond the architecture name: ``arch`` numbers, then ``kwargs``."""
    return {**{k: v for k, v in spec.arch.items() if k not in _NOT_TIMM_KWARGS}, **spec.kwargs}


def build_random(spec: EncoderSpec) -> tuple[torch.nn.Module, str]:
    """The record's architecture with random weights (on the current default device), and its kind.

    Built from ``spec.arch`` alone, with no download: the tests build every record at full
    size on the meta device to check its width, and tiny ones to run the loaders offline."""
    loader = LOADERS.get(spec.loader)
    if loader is None or loader.build_random is None:
        raise ValueError(f"encoder {spec.name!r}: no architecture to build for loader {spec.loader!r}")
    return loader.build_random(spec), loader.kind


def _random_timm(spec: EncoderSpec) -> torch.nn.Module:
    import timm  # timm: only a timm encoder needs it

    trunk = timm.create_model(spec.arch.get("timm", spec.model_id), pretrained=False, num_classes=0,
                              **_timm_arch_kwargs(spec))
    return ProjectedTrunk(trunk, spec.arch["projection_dim"]) if spec.keymap == "open_clip" else trunk


def _random_vision_tower(spec: EncoderSpec) -> torch.nn.Module:
    import transformers  # transformers: only a hugging face encoder needs it

    return transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**spec.arch, vision_use_head=False))


def _random_hf(spec: EncoderSpec) -> torch.nn.Module:
    import transformers  # transformers: only a hugging face encoder needs it

    if spec.hf_class not in _CONFIGS:
        raise ValueError(f"encoder {spec.name!r}: no architecture to build for loader {spec.loader!r}")
    config = getattr(transformers, _CONFIGS[spec.hf_class])(**spec.arch)
    return getattr(transformers, spec.hf_class)(config)


_CONFIGS = {"Dinov2Model": "Dinov2Config", "CLIPVisionModelWithProjection": "CLIPVisionConfig",
            "SiglipVisionModel": "SiglipVisionConfig"}


def _timm_checkpoint_model(spec: EncoderSpec, weights: str | None) -> torch.nn.Module:
    import timm  # timm: only a timm encoder needs it

    if weights is None:
        if spec.arch.get("hub", True) is False:
            raise WeightsError(
                f"encoder {spec.name!r}: its weights are not on a model hub. Download {spec.checkpoint} from the "
                f"link on {spec.page} and pass --weights PATH"
            )
        weights = hub_file(spec, spec.checkpoint)
    trunk = timm.create_model(spec.arch["timm"], pretrained=False, num_classes=0, **_timm_arch_kwargs(spec))
    model = ProjectedTrunk(trunk, spec.arch["projection_dim"]) if spec.keymap == "open_clip" else trunk
    state = map_keys(read_state_dict(weights_file(weights)), spec.keymap)
    fill_model(model, state, spec, weights)
    return model


def _hf_model(spec: EncoderSpec, weights: str | None, trust_remote_code: bool) -> torch.nn.Module:
    import transformers  # transformers: only a hugging face encoder needs it

    cls = getattr(transformers, spec.hf_class or "AutoModel")
    source = weights or spec.model_id
    kwargs = {} if weights else {"revision": spec.revision}
    try:
        model = cls.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
    except OSError as exc:  # transformers wraps hub errors (gated, offline, missing) in OSError
        cause = exc.__cause__ or exc
        raise hub_error(spec, cause if isinstance(cause, hub_errors()) else exc) from exc
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise WeightsError(
                f"encoder {spec.name!r}: {spec.model_id} ships its own model code; crs runs it only with "
                "--trust-remote-code (read the code on the model page first)"
            ) from exc
        raise
    if hasattr(model, "vision_model") and not isinstance(model, tuple(
            getattr(transformers, c) for c in ("CLIPVisionModelWithProjection", "SiglipVisionModel")
            if hasattr(transformers, c))) and spec.hf_class == "AutoModel":
        model = model.vision_model  # a two-tower hf: id: keep the image tower
    return model


def _vision_tower_files(spec: EncoderSpec, weights: str | None) -> tuple[str, list[str]]:
    """(config.json, the safetensors shards holding vision-tower tensors): only those are fetched."""
    if weights:
        root = Path(weights)
        config = root / "config.json"
        index = root / "model.safetensors.index.json"
        fetch = lambda name: str(root / name)  # noqa: E731
        if not config.exists():
            raise WeightsError(f"--weights {weights}: no config.json in that folder")
        index_path = str(index) if index.exists() else None
    else:
        fetch = lambda name: hub_file(spec, name)  # noqa: E731
        config = fetch("config.json")
        try:
            index_path = fetch("model.safetensors.index.json")
        except WeightsError:
            index_path = None
    if index_path is None:
        return str(config), [fetch("model.safetensors")]
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    shards = sorted({shard for key, shard in weight_map.items() if "vision_tower." in key})
    if not shards:
        raise WeightsError(f"encoder {spec.name!r}: {spec.model_id} has no tensors named '*vision_tower.*'")
    return str(config), [fetch(s) for s in shards]


def _vision_tower_model(spec: EncoderSpec, weights: str | None) -> torch.nn.Module:
    import transformers  # transformers: only a hugging face encoder needs it

    config_path, shards = _vision_tower_files(spec, weights)
    with open(config_path) as f:
        vision_cfg = json.load(f).get("vision_config")
    if not vision_cfg or vision_cfg.get("model_type") != "siglip_vision_model":
        raise WeightsError(f"encoder {spec.name!r}: {config_path} has no SigLIP vision_config")
    cfg = transformers.SiglipVisionConfig(**{k: v for k, v in vision_cfg.items() if k != "model_type"})
    model = transformers.SiglipVisionModel(cfg)
    state = {}
    for shard in shards:
        with safe_open(shard, framework="pt") as f:
            for key in f.keys():
                at = key.find("vision_tower.")
                if at >= 0:  # 'vision_tower.vision_model.x' or 'model.vision_tower.vision_model.x'
                    state[key[at + len("vision_tower."):]] = f.get_tensor(key)
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if ".head." not in k]
    if missing or not state:
        raise WeightsError(f"encoder {spec.name!r}: the vision tower lacks {len(missing)} tensors "
                           f"(first: {missing[:3]}) in {shards}")
    return model


def load(spec: EncoderSpec, device: torch.device | str | None = None, *, weights: str | None = None,
         trust_remote_code: bool = False, precision: str = "auto") -> Encoder:
    """Build the model through its library's normal path and wrap it with its preprocessing."""
    device = torch.device(device) if device is not None else pick_device()
    loader = LOADERS.get("builtin" if spec.source == "builtin" else spec.loader)
    if loader is None:
        raise ValueError(f"encoder {spec.name!r}: loader {spec.loader!r} is not supported")
    model = loader.load(spec, weights, trust_remote_code)
    info = loaded_weights_info(spec, weights, model)
    # a width the user declared: a record of an --encoder-file (their names are not the registry's); a timm:/hf:
    # id's width (0) comes from the model
    user_record = spec.width != 0 and spec.name not in ENCODERS
    if spec.width == 0 and loader.kind != "builtin":  # a timm:/hf: id: width, size and normalisation from the model
        spec = _complete_user_spec(spec, model, loader.kind)
        if loader.kind == "hf":
            spec = _with_processor(spec, _processor_config(spec, weights))
    encoder = Encoder(spec, model, device, loader.kind, precision)
    encoder.weights_info = info
    encoder.user_record = user_record
    return encoder


# PIL's resampling codes, as image processors record them
_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def processor_settings(cfg: dict) -> dict:
    """EncoderSpec fields from a transformers ``preprocessor_config.json``: mean, std, input size and
    interpolation, each only where the file states it (the size a centre crop keeps, else the resize)."""
    out: dict = {}
    for key, field_ in (("image_mean", "mean"), ("image_std", "std")):
        v = cfg.get(key)
        if isinstance(v, (int, float)):
            v = [v] * 3
        if isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v):
            out[field_] = tuple(float(x) for x in v)
    sizes = [cfg.get("crop_size")] if cfg.get("do_center_crop") else []
    sizes.append(cfg.get("size"))
    for size in sizes:
        if isinstance(size, int):
            out["input_size"] = size
        elif isinstance(size, dict):
            side = size.get("height") or size.get("shortest_edge") or size.get("width")
            if isinstance(side, int):
                out["input_size"] = side
        if "input_size" in out:
            break
    if cfg.get("resample") in _RESAMPLE:
        out["interpolation"] = _RESAMPLE[cfg["resample"]]
    return out


def _processor_config(spec: EncoderSpec, weights: str | None) -> dict:
    """The model's preprocessor_config.json (local folder, else the hub cache/hub), or {} if it has none."""
    name = "preprocessor_config.json"
    if weights:
        path = os.path.join(weights, name) if os.path.isdir(weights) else None
    else:
        from huggingface_hub import hf_hub_download  # huggingface_hub: only hub lookups need it

        try:
            path = hf_hub_download(spec.model_id, name, revision=spec.revision)
        except Exception:  # no such file (or offline without it): the model's config and ImageNet stats stand
            path = None
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _with_processor(spec: EncoderSpec, cfg: dict) -> EncoderSpec:
    # without the file, ImageNet mean/std and the model config's image size stand (recorded with the embeddings)
    return dataclasses.replace(spec, **processor_settings(cfg)) if cfg else spec


def _complete_user_spec(spec: EncoderSpec, model: torch.nn.Module, kind: str) -> EncoderSpec:
    if kind == "timm":
        cfg = getattr(model, "pretrained_cfg", {}) or {}
        size = int((cfg.get("input_size") or (3, 224, 224))[-1])
        fixed = getattr(getattr(model, "patch_embed", None), "img_size", None)  # a ViT built for another size
        if fixed and not getattr(model.patch_embed, "dynamic_img_size", False):
            size = int(fixed[-1])
        return dataclasses.replace(
            spec, width=int(model.num_features), input_size=size,
            mean=tuple(cfg.get("mean", spec.mean)), std=tuple(cfg.get("std", spec.std)),
            interpolation=cfg.get("interpolation", "bicubic") if cfg.get("interpolation") in
            ("bilinear", "bicubic", "nearest") else "bicubic",
        )
    cfg = model.config
    width = getattr(cfg, "projection_dim", None) if hasattr(model, "visual_projection") else None
    width = width or getattr(cfg, "hidden_size", None) or getattr(cfg, "hidden_sizes", [0])[-1]
    size = getattr(cfg, "image_size", 224)
    size = size if isinstance(size, int) else int(size[0])
    return dataclasses.replace(spec, width=int(width), input_size=int(size))


# ------------------------------------------------------------------------ loaders
@dataclass(frozen=True)
class Loader:
    """How the weights of a record with ``EncoderSpec.loader == name`` become a torch module.

    ``kind`` says how ``Encoder`` calls the module ("timm" | "hf" | "builtin"); ``load(spec,
    weights, trust_remote_code)`` builds it with its weights (``weights``: a local file or
    folder, else the hub); ``build_random(spec)`` builds the architecture with random weights
    and no download (None: there is none to build)."""

    name: str
    kind: str
    load: Callable[[EncoderSpec, str | None, bool], torch.nn.Module]
    build_random: Callable[[EncoderSpec], torch.nn.Module] | None = None


LOADERS: dict[str, Loader] = {}


def register_loader(loader: Loader) -> Loader:
    """Add ``loader`` to ``LOADERS``; a name registered already is refused."""
    if loader.name in LOADERS:
        raise ValueError(f"loader {loader.name!r} is registered already; give the new one another name")
    LOADERS[loader.name] = loader
    return loader


for _loader in (
    Loader("timm", "timm", lambda spec, weights, trust: _timm_model(spec, weights), _random_timm),
    Loader("timm-checkpoint", "timm", lambda spec, weights, trust: _timm_checkpoint_model(spec, weights),
           _random_timm),
    Loader("hf", "hf", _hf_model, _random_hf),
    Loader("hf-vision-tower", "hf", lambda spec, weights, trust: _vision_tower_model(spec, weights),
           _random_vision_tower),
    Loader("builtin", "builtin", lambda spec, weights, trust: builtin_model(spec)),
):
    register_loader(_loader)
