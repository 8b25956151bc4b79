"""Load an encoder from its registry record and turn image batches into embeddings.

Every loader goes through its library's normal path (``crs.extract.encoders`` lists the
kinds). Safetensors are read where the repo has them; a PyTorch checkpoint is opened
with ``torch.load(..., weights_only=True)``, which refuses pickled code. Remote code is
never run unless the user passes ``--trust-remote-code``. ``HF_HOME``, ``HF_TOKEN`` and
``HF_HUB_OFFLINE`` are read by huggingface_hub itself. ``weights=`` points a record at a
local file or folder instead of the hub (an air-gapped server, or the tests' tiny models).

What was loaded is recorded on the Encoder (``weights_info``): for hub weights the commit
of the cache snapshot the files were read from (``HF_HOME/hub/models--ORG--NAME/snapshots/
<commit>/``), for a ``--weights`` file its sha256. ``weights_status`` says, without
downloading or loading anything, whether a record's weights are in the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from crs.errors import UserError
from crs.extract.encoders import EncoderSpec, is_commit


class WeightsError(UserError):
    """The weights cannot be had (gated, missing, offline, wrong file); the message says what to do."""


class ColourTextureStats(torch.nn.Module):
    """A non-deep baseline: 54 colour and texture statistics of an image in [0, 1].

    Per channel: mean, std and the 10/25/50/75/90% order statistics (21); mean and std of the
    gradient magnitude (6); mean |Laplacian| (3); a 16-bin grey-level histogram (16);
    centre-minus-border mean (3); mean std inside 4x4 blocks (3); mean and std of chroma
    (max - min over channels) (2).
    """

    width = 54

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [n, 3, H, W] in [0, 1]
        n, c, h, w = x.shape
        flat = x.reshape(n, c, -1)
        ordered = flat.sort(dim=2).values
        at = [min(int(round(f * (h * w - 1))), h * w - 1) for f in (0.1, 0.25, 0.5, 0.75, 0.9)]
        stats = [flat.mean(2), flat.std(2), *(ordered[..., i] for i in at)]  # 7 x [n, c]
        gx = x[..., :, 1:] - x[..., :, :-1]
        gy = x[..., 1:, :] - x[..., :-1, :]
        grad = torch.sqrt(gx[..., :-1, :] ** 2 + gy[..., :, :-1] ** 2 + 1e-12).reshape(n, c, -1)
        stats += [grad.mean(2), grad.std(2)]
        lap_kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=x.device)
        lap = F.conv2d(x.reshape(n * c, 1, h, w), lap_kernel.view(1, 1, 3, 3)).reshape(n, c, -1)
        stats.append(lap.abs().mean(2))
        grey = x.mean(1).reshape(n, -1)
        bins = torch.clamp((grey * 16).long(), 0, 15)
        hist = torch.zeros(n, 16, device=x.device).scatter_add_(1, bins, torch.ones_like(grey)) / grey.shape[1]
        ch, cw = h // 4, w // 4
        centre = x[..., ch : h - ch, cw : w - cw].reshape(n, c, -1).mean(2)
        stats.append(centre - flat.mean(2))
        m1 = F.avg_pool2d(x, 4)
        m2 = F.avg_pool2d(x * x, 4)
        local = (m2 - m1 * m1).clamp_min(0).sqrt()  # std inside each 4x4 block
        stats.append(local.reshape(n, c, -1).mean(2))
        chroma = (x.amax(1) - x.amin(1)).reshape(n, -1)
        out = torch.cat([torch.cat(stats, 1), hist, chroma.mean(1, keepdim=True), chroma.std(1, keepdim=True)], 1)
        return out


class NullModel(torch.nn.Module):
    """The pipeline's ceiling (``benchmarks/extract_bench.py --encoder null``): embeddings of the right
    width at next to no cost, each a function of its own image only (means of a 4 x 4 grid of its
    pixels, 48 values, repeated to ``width``), so a change in what an image became shows in them."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [n, 3, H, W]
        cells = F.adaptive_avg_pool2d(x, 4).flatten(1)  # [n, 48]
        return cells.repeat(1, -(-self.width // cells.shape[1]))[:, : self.width]


class ProjectedTrunk(torch.nn.Module):
    """An open_clip-style image tower: a timm trunk's pooled features times a projection."""

    def __init__(self, trunk: torch.nn.Module, width: int):
        super().__init__()
        self.trunk = trunk
        self.proj = torch.nn.Linear(trunk.num_features, width, bias=False)

    def forward(self, x):
        return self.proj(self.trunk(x))


# Token models: how many leading tokens are not patches (CLS, registers), per transformers class
_PREFIX_TOKENS = {"Dinov2Model": 1, "CLIPVisionModelWithProjection": 1, "SiglipVisionModel": 0}


class Encoder:
    """A loaded encoder: preprocessing plus model, mapping [n, 3, H, W] in [0, 1] to [n, width]."""

    def __init__(self, spec: EncoderSpec, model: torch.nn.Module, device: torch.device, kind: str = "timm",
                 precision: str = "auto"):
        self.spec = spec
        self.kind = kind  # "timm" | "hf" | "builtin": how the model is called
        self.device = torch.device(device)
        self.model = model.eval().to(self.device)
        # bf16 autocast on CUDA (the store keeps float16/float32 either way); exact float32 on the CPU
        self.autocast = self.device.type == "cuda" and precision in ("auto", "bf16")
        if self.device.type == "cuda" and kind == "timm" and _is_cnn(model):
            self.model = self.model.to(memory_format=torch.channels_last)
            self.channels_last = True
        else:
            self.channels_last = False
        self.mean = torch.tensor(spec.mean, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec.std, device=self.device).view(1, 3, 1, 1)
        # what was loaded: {"source", "revision_requested", "revision_loaded", "weights_sha256"} (set by load)
        self.weights_info: dict = _info(spec.weight_source, spec.revision)

    @property
    def width(self) -> int:
        return self.spec.width

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        size = self.spec.input_size
        if x.shape[-2:] != (size, size):
            mode = self.spec.interpolation
            x = F.interpolate(
                x, size=(size, size), mode=mode, antialias=mode in ("bilinear", "bicubic"),
                align_corners=False if mode != "nearest" else None,
            ).clamp(0, 1)
        return (x - self.mean) / self.std

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        pooling = self.spec.pooling
        if self.kind == "builtin":
            return self.model(x)
        if self.kind == "hf":
            out = self.model(pixel_values=x)
            cls = type(self.model).__name__
            if pooling == "model":
                pooled = getattr(out, "image_embeds", None)
                if pooled is None:
                    pooled = getattr(out, "pooler_output", None)
                if pooled is None:  # a model without a pooled output: mean of its tokens
                    pooled = out.last_hidden_state[:, _PREFIX_TOKENS.get(cls, 0):].mean(1)
                return pooled.flatten(1)
            tokens = out.last_hidden_state
            if pooling == "cls":
                return tokens[:, 0]
            return tokens[:, _PREFIX_TOKENS.get(cls, 0):].mean(1)
        if pooling == "model":
            return self.model(x)
        feats = self.model.forward_features(x)
        if feats.ndim == 4:  # CNN feature map [n, C, h, w]
            return feats.mean((2, 3))
        if pooling == "cls":
            return feats[:, 0]
        if pooling == "mean":
            return feats[:, getattr(self.model, "num_prefix_tokens", 0):].mean(1)
        raise ValueError(f"encoder {self.spec.name!r}: unknown pooling {pooling!r} (model, cls, mean)")

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self.preprocess(x.to(self.device, non_blocking=True))
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            out = self._forward(x)
        if out.ndim != 2 or out.shape[1] != self.spec.width:
            raise RuntimeError(
                f"encoder {self.spec.name!r} gave embeddings of shape {tuple(out.shape)}; its registry "
                f"record says width {self.spec.width}. Fix the record's width or pooling"
            )
        return out.float()


def _is_cnn(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules()) and not hasattr(model, "patch_embed")


def pick_device(name: str | None = None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ------------------------------------------------------------------------ weights
def _hub_error(spec: EncoderSpec, exc: Exception) -> WeightsError:
    """One clear message for the ways a hub download fails, by the hub's exception class."""
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError)

    page = spec.page or f"https://huggingface.co/{spec.model_id}"
    # GatedRepoError is a RepositoryNotFoundError, LocalEntryNotFoundError an EntryNotFoundError: checked first
    if isinstance(exc, GatedRepoError) or (spec.gated and "401" in str(exc)) or "403" in str(exc):
        return WeightsError(
            f"encoder {spec.name!r}: {spec.model_id} is gated. Accept its terms at {page} while logged in, "
            "then set HF_TOKEN to a token of that account (or run `hf auth login`) and run again"
        )
    offline = isinstance(exc, (LocalEntryNotFoundError, OfflineModeIsEnabled)) or _offline()
    if offline and spec.revision and cached_revisions(_hub_repo(spec)):
        have = cached_revisions(_hub_repo(spec))
        return WeightsError(
            f"encoder {spec.name!r}: revision {spec.revision} of {_hub_repo(spec)} is not in the local cache "
            f"({_cache_dir()} holds {', '.join(have)}) and "
            f"HF_HUB_OFFLINE is set. Download that revision once with network access (`hf download "
            f"{_hub_repo(spec)} --revision {spec.revision}`), or pin one the cache holds with "
            f"--revision {spec.name}=COMMIT"
        )
    if offline:
        return WeightsError(
            f"encoder {spec.name!r}: the weights of {spec.model_id}"
            + (f" (revision {spec.revision})" if spec.revision else "")
            + f" are not in the local cache ({_cache_dir()}, "
            "set by HF_HOME or HF_HUB_CACHE) and HF_HUB_OFFLINE is set. Download them once "
            "with network access, or pass --weights PATH to a local copy"
        )
    if isinstance(exc, RevisionNotFoundError):
        return WeightsError(f"encoder {spec.name!r}: {spec.model_id} has no revision {spec.revision!r}; pick a "
                            f"commit from {page}/commits/main and pass --revision {spec.name}=COMMIT (or drop it)")
    if isinstance(exc, (RepositoryNotFoundError, EntryNotFoundError)):
        return WeightsError(f"encoder {spec.name!r}: {spec.model_id} (revision {spec.revision or 'main'}) has no "
                            f"such repository or file ({exc.__class__.__name__}); check the record against {page}")
    return WeightsError(f"encoder {spec.name!r}: could not fetch the weights of {spec.model_id}: {exc}")


def hub_errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a failed hub download: huggingface_hub's own, and those of the HTTP
    libraries it reaches the network with (requests, urllib3) where they are installed."""
    from huggingface_hub import errors

    found = [getattr(errors, name) for name in ("HfHubHTTPError", "EntryNotFoundError", "OfflineModeIsEnabled",
                                                "HFValidationError", "LocalTokenNotFoundError")
             if hasattr(errors, name)]
    try:
        import requests

        found.append(requests.RequestException)
    except ImportError:  # pragma: no cover - huggingface_hub >= 1.0 reaches the network with httpx
        pass
    try:
        import urllib3

        found.append(urllib3.exceptions.HTTPError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(found)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _hub_repo(spec: EncoderSpec) -> str:
    """The hub repo a record's weights come from (timm ids through their pretrained config)."""
    if spec.loader == "timm":
        return _timm_hub_id(spec) or spec.model_id
    return spec.model_id


def _repo_cache(repo_id: str) -> Path:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")


def cached_revisions(repo_id: str) -> list[str]:
    """'REF (COMMIT)' for each ref and the bare commit of each other snapshot of ``repo_id`` in the local cache."""
    root = _repo_cache(repo_id)
    refs = {}
    if (root / "refs").is_dir():
        for ref in sorted(p for p in (root / "refs").rglob("*") if p.is_file()):
            refs[ref.read_text().strip()] = ref.relative_to(root / "refs").as_posix()
    snaps = sorted(p.name for p in (root / "snapshots").iterdir()) if (root / "snapshots").is_dir() else []
    return [f"{refs[c]} ({c})" if c in refs else c for c in snaps]


def _commit_of(path: str | os.PathLike | None) -> str | None:
    """The commit of a hub-cache path ``.../snapshots/<commit>/<file>``, else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    parts = Path(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", parts[i + 1]):
            return parts[i + 1]
    return None


def _cached_file(repo_id: str, filenames, revision: str | None) -> str | None:
    """The cache path of the first of ``filenames`` held for ``revision`` (refs resolved), else None.
    Looks only at the local cache: never downloads."""
    from huggingface_hub import try_to_load_from_cache

    for name in filenames:
        path = try_to_load_from_cache(repo_id, name, revision=revision)
        if isinstance(path, str):
            return path
    return None


def _hub_file(spec: EncoderSpec, filename: str) -> str:
    from huggingface_hub import hf_hub_download

    try:
        return hf_hub_download(spec.model_id, filename, revision=spec.revision)
    except Exception as exc:
        raise _hub_error(spec, exc) from exc


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors of a checkpoint file: safetensors as is, else ``torch.load(weights_only=True)``."""
    path = str(path)
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WeightsError(
            f"{path} cannot be read as a tensor-only PyTorch checkpoint ({type(exc).__name__}: {exc}); "
            "crs never unpickles code. Convert it to safetensors, or pass the right file with --weights"
        ) from exc
    for key in ("model", "state_dict", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    if not isinstance(state, dict):
        raise WeightsError(f"{path} holds a {type(state).__name__}, not a dict of tensors")
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def map_keys(state: dict[str, torch.Tensor], keymap: str | None) -> dict[str, torch.Tensor]:
    """Rename a checkpoint's tensors to timm's VisionTransformer names.

    * ``mae`` (RETFound): drop the MAE decoder and mask token; encoder names are timm's.
    * ``cae`` (PanDerm): strip ``encoder.``; per block, ``q_bias``/``v_bias`` become one
      qkv bias with a zero key bias (the key projection has none), ``gamma_1/2`` become
      timm's layer-scale ``ls1/ls2.gamma``; a patch-only position table gets a zero CLS row.
    * ``open_clip`` (BiomedCLIP): ``visual.trunk.*`` -> ``trunk.*``, ``visual.head.proj`` -> ``proj``.
    """
    if keymap is None:
        return dict(state)
    out: dict[str, torch.Tensor] = {}
    if keymap == "mae":
        for k, v in state.items():
            if k.startswith(("decoder", "mask_token")):
                continue
            out[k] = v
        return out
    if keymap == "open_clip":
        for k, v in state.items():
            if k.startswith("visual.trunk."):
                out["trunk." + k[len("visual.trunk."):]] = v
            elif k == "visual.head.proj.weight":
                out["proj.weight"] = v
        return out
    if keymap == "cae":
        q_bias: dict[str, torch.Tensor] = {}
        v_bias: dict[str, torch.Tensor] = {}
        for k, v in state.items():
            if k.startswith("encoder."):
                k = k[len("encoder."):]
            elif any(k.startswith(p) for p in ("regressor", "decoder", "teacher", "mask_token", "rel_pos")):
                continue
            if k.endswith(".attn.q_bias"):
                q_bias[k[: -len("q_bias")]] = v
            elif k.endswith(".attn.v_bias"):
                v_bias[k[: -len("v_bias")]] = v
            elif k.endswith(".gamma_1"):
                out[k[: -len("gamma_1")] + "ls1.gamma"] = v
            elif k.endswith(".gamma_2"):
                out[k[: -len("gamma_2")] + "ls2.gamma"] = v
            elif k.startswith(("head.", "fc_norm.", "rel_pos_bias")):
                continue
            else:
                out[k] = v
        for prefix, q in q_bias.items():
            out[prefix + "qkv.bias"] = torch.cat([q, torch.zeros_like(q), v_bias[prefix]])
        return out
    raise ValueError(f"unknown keymap {keymap!r}")


def _fill(model: torch.nn.Module, state: dict[str, torch.Tensor], spec: EncoderSpec, where: str) -> None:
    """Load ``state`` into ``model``; every tensor of the model must be given (heads aside)."""
    own = model.state_dict()
    if "pos_embed" in state and "pos_embed" in own and state["pos_embed"].shape[1] + 1 == own["pos_embed"].shape[1]:
        pe = state["pos_embed"]
        state = {**state, "pos_embed": torch.cat([pe.new_zeros(1, 1, pe.shape[2]), pe], 1)}
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith(("head.", "fc_norm."))]
    if missing:
        raise WeightsError(
            f"encoder {spec.name!r}: {where} lacks {len(missing)} tensors of the {spec.arch.get('timm', '')} "
            f"architecture (first: {missing[:3]}); it is not a checkpoint of this model. Check --weights"
        )


def _timm_model(spec: EncoderSpec, weights: str | None) -> torch.nn.Module:
    import timm

    if spec.init_seed is not None:
        torch.manual_seed(spec.init_seed)
    if weights is None:
        model_id, pin = spec.model_id, {}
        if spec.revision and spec.pretrained:  # timm reads 'REPO@REVISION' from the hub id
            if model_id.startswith("hf-hub:"):
                model_id = f"{model_id.split('@')[0]}@{spec.revision}"
            elif _timm_hub_id(spec):
                pin = {"pretrained_cfg_overlay": {"hf_hub_id": f"{_timm_hub_id(spec)}@{spec.revision}"}}
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
            raise _hub_error(spec, exc) from exc
    model = timm.create_model(spec.arch.get("timm", spec.model_id), pretrained=False, num_classes=0,
                              **_timm_arch_kwargs(spec))
    _fill(model, read_state_dict(_weights_file(weights)), spec, weights)
    return model


def _timm_hub_id(spec: EncoderSpec) -> str | None:
    """The hub repo timm reads a timm id's weights from (``hf-hub:ORG/NAME``, or the pretrained config's
    ``hf_hub_id``), without a revision; None when timm takes them from a URL or has no such model."""
    if spec.model_id.startswith("hf-hub:"):
        return spec.model_id[len("hf-hub:"):].split("@")[0]
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(spec.model_id)
    except Exception:  # timm raises for an unknown name; load() says so when it builds the model
        return None
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    return hub_id.split("@")[0] if hub_id else None


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
    import timm

    trunk = timm.create_model(spec.arch.get("timm", spec.model_id), pretrained=False, num_classes=0,
                              **_timm_arch_kwargs(spec))
    return ProjectedTrunk(trunk, spec.arch["projection_dim"]) if spec.keymap == "open_clip" else trunk


def _random_vision_tower(spec: EncoderSpec) -> torch.nn.Module:
    import transformers

    return transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**spec.arch, vision_use_head=False))


def _random_hf(spec: EncoderSpec) -> torch.nn.Module:
    import transformers

    if spec.hf_class not in _CONFIGS:
        raise ValueError(f"encoder {spec.name!r}: no architecture to build for loader {spec.loader!r}")
    config = getattr(transformers, _CONFIGS[spec.hf_class])(**spec.arch)
    return getattr(transformers, spec.hf_class)(config)


_CONFIGS = {"Dinov2Model": "Dinov2Config", "CLIPVisionModelWithProjection": "CLIPVisionConfig",
            "SiglipVisionModel": "SiglipVisionConfig"}


def _weights_file(weights: str) -> str:
    p = Path(weights)
    if p.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
            if (p / name).exists():
                return str(p / name)
        raise WeightsError(f"--weights {weights}: a folder without model.safetensors or pytorch_model.bin")
    if not p.exists():
        raise WeightsError(f"--weights {weights}: no such file")
    return str(p)


def _timm_checkpoint_model(spec: EncoderSpec, weights: str | None) -> torch.nn.Module:
    import timm

    if weights is None:
        if spec.arch.get("hub", True) is False:
            raise WeightsError(
                f"encoder {spec.name!r}: its weights are not on a model hub. Download {spec.checkpoint} from the "
                f"link on {spec.page} and pass --weights PATH"
            )
        weights = _hub_file(spec, spec.checkpoint)
    trunk = timm.create_model(spec.arch["timm"], pretrained=False, num_classes=0, **_timm_arch_kwargs(spec))
    model = ProjectedTrunk(trunk, spec.arch["projection_dim"]) if spec.keymap == "open_clip" else trunk
    state = map_keys(read_state_dict(_weights_file(weights)), spec.keymap)
    _fill(model, state, spec, weights)
    return model


def _hf_model(spec: EncoderSpec, weights: str | None, trust_remote_code: bool) -> torch.nn.Module:
    import transformers

    cls = getattr(transformers, spec.hf_class or "AutoModel")
    source = weights or spec.model_id
    kwargs = {} if weights else {"revision": spec.revision}
    try:
        model = cls.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
    except OSError as exc:  # transformers wraps hub errors (gated, offline, missing) in OSError
        cause = exc.__cause__ or exc
        raise _hub_error(spec, cause if isinstance(cause, hub_errors()) else exc) from exc
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
        fetch = lambda name: _hub_file(spec, name)  # noqa: E731
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
    import transformers
    from safetensors import safe_open

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
    if spec.width == 0 and loader.kind != "builtin":  # a timm:/hf: id: width, size and normalisation from the model
        spec = _complete_user_spec(spec, model, loader.kind)
        if loader.kind == "hf":
            spec = _with_processor(spec, _processor_config(spec, weights))
    encoder = Encoder(spec, model, device, loader.kind, precision)
    encoder.weights_info = info
    return encoder


# ------------------------------------------------------------------------ what was loaded
def _info(source: str, requested: str | None = None, loaded: str | None = None, sha256: str | None = None) -> dict:
    return {"source": source, "revision_requested": requested, "revision_loaded": loaded, "weights_sha256": sha256}


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(path: str | os.PathLike) -> str:
    r"""sha256 of a --weights file; of a folder: sha256 over its sorted ``"relative/path\0<file sha256>\n"`` lines
    (every file below it, hidden ones such as ``.cache/`` left out: they are download bookkeeping)."""
    root = Path(path)
    if not root.is_dir():
        return file_sha256(root)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    digest = hashlib.sha256()
    for rel in files:
        digest.update(f"{rel}\0{file_sha256(root / rel)}\n".encode())
    return digest.hexdigest()


# the files each loader reads from the hub, the first one found in the cache naming the snapshot used
_HUB_FILES = {"timm": ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"),
              "hf": ("config.json",), "hf-vision-tower": ("config.json",)}


def loaded_weights_info(spec: EncoderSpec, weights: str | None, model: torch.nn.Module | None = None) -> dict:
    """``Encoder.weights_info`` of a model just loaded from ``spec`` (and ``weights``, if given)."""
    if spec.source == "builtin" or spec.loader == "builtin":
        return _info("builtin: no learned weights")
    if not spec.pretrained:
        return _info(f"random init, torch seed {spec.init_seed} ({spec.model_id})")
    if weights is not None:
        return _info(f"local: {os.path.abspath(weights)}", spec.revision, None, weights_sha256(weights))
    if spec.loader == "timm" and _timm_hub_id(spec) is None:  # timm's own download from a URL
        url = (getattr(model, "pretrained_cfg", None) or {}).get("url")
        return _info(f"timm: {spec.model_id} ({url or 'url'}; not a hub snapshot)", spec.revision)
    repo = _hub_repo(spec)
    commit = getattr(getattr(model, "config", None), "_commit_hash", None) if spec.loader == "hf" else None
    if not is_commit(commit):
        files = (spec.checkpoint,) if spec.loader == "timm-checkpoint" else _HUB_FILES.get(spec.loader, ())
        commit = _commit_of(_cached_file(repo, files, spec.revision))
    where = f"hub: {repo}" + (f"/{spec.checkpoint}" if spec.checkpoint else "")
    if commit is None:
        where += " (its snapshot was not found in the local cache: the commit loaded is unknown)"
    return _info(where, spec.revision, commit)


def _builtin_model(spec: EncoderSpec) -> torch.nn.Module:
    if spec.model_id == "null":  # not a registry record: a benchmark's and the tests' stand-in
        return NullModel(spec.width)
    if spec.model_id != "colour_texture_stats":
        raise ValueError(f"unknown builtin encoder {spec.model_id!r}")
    return ColourTextureStats()


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
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(spec.model_id, name, revision=spec.revision)
        except Exception:  # no such file (or offline without it): the model's config and ImageNet stats stand
            path = None
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _with_processor(spec: EncoderSpec, cfg: dict) -> EncoderSpec:
    import dataclasses

    # without the file, ImageNet mean/std and the model config's image size stand (recorded with the embeddings)
    return dataclasses.replace(spec, **processor_settings(cfg)) if cfg else spec


def _complete_user_spec(spec: EncoderSpec, model: torch.nn.Module, kind: str) -> EncoderSpec:
    import dataclasses

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
    Loader("builtin", "builtin", lambda spec, weights, trust: _builtin_model(spec)),
):
    register_loader(_loader)


# ------------------------------------------------------------------------ before a run (crs extract --plan)
def _has_token() -> bool:
    from huggingface_hub import get_token

    return bool(os.environ.get("HF_TOKEN")) or get_token() is not None


def _hub_files_cached(spec: EncoderSpec) -> bool:
    """Whether the local cache holds, for the record's revision, every file its loader will read."""
    repo, rev = _hub_repo(spec), spec.revision
    if spec.loader == "timm":  # an hf-hub: id also reads the repo's config.json
        config_ok = not spec.model_id.startswith("hf-hub:") or _cached_file(repo, ("config.json",), rev) is not None
        return config_ok and _cached_file(repo, _HUB_FILES["timm"], rev) is not None
    if spec.loader == "timm-checkpoint":
        return _cached_file(repo, (spec.checkpoint,), rev) is not None
    if _cached_file(repo, ("config.json",), rev) is None:
        return False
    index = _cached_file(repo, ("model.safetensors.index.json",), rev)
    if index is None:
        return _cached_file(repo, ("model.safetensors", "pytorch_model.bin"), rev) is not None
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    shards = {shard for key, shard in weight_map.items()
              if spec.loader != "hf-vision-tower" or "vision_tower." in key}
    return bool(shards) and all(_cached_file(repo, (shard,), rev) is not None for shard in shards)


def weights_status(spec: EncoderSpec, weights: str | None = None) -> dict:
    """Whether ``spec``'s weights can be had, looking only at local files (no download, no model built).

    {"in_cache": True/False (None: nothing to fetch, a builtin, random init or --weights),
    "gated": the repo needs accepted terms, "token": HF_TOKEN or a saved huggingface token is set,
    "problem": None, or one line saying what will stop the load and how to fix it}."""
    token = _has_token()
    out = {"in_cache": None, "gated": bool(spec.gated), "token": token, "problem": None}
    if spec.source == "builtin" or spec.loader == "builtin" or not spec.pretrained:
        return out
    if weights is not None:
        if not os.path.exists(weights):
            out["problem"] = f"encoder {spec.name!r}: --weights {weights}: no such file or folder"
        return out
    page = spec.page or f"https://huggingface.co/{spec.model_id}"
    if spec.arch.get("hub", True) is False:
        out["in_cache"] = False
        out["problem"] = (f"encoder {spec.name!r}: its weights are not on a model hub; download {spec.checkpoint} "
                          f"from the link on {page} and pass --weights PATH")
        return out
    out["in_cache"] = _hub_files_cached(spec)
    if out["in_cache"]:
        return out
    what = f"{_hub_repo(spec)}" + (f" (revision {spec.revision})" if spec.revision else "")
    problems = []
    if _offline():
        problems.append(f"encoder {spec.name!r}: {what} is not in the local cache and HF_HUB_OFFLINE is set; "
                        "download it once with network access, or pass --weights PATH")
    if spec.gated and not token:  # said offline too: the download it needs will want the token
        problems.append(("it" if problems else f"encoder {spec.name!r}: {spec.model_id}") + " is gated and no token "
                        f"is set; accept its terms at {page}, then set HF_TOKEN (or run `hf auth login`)")
    out["problem"] = "; ".join(problems) or None
    return out
