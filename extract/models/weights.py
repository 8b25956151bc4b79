"""Checkpoint files: reading tensors safely, mapping their keys onto an architecture, and recording
what was loaded (``weights_info``: the snapshot commit, or a --weights file's sha256)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from safetensors.torch import load_file

from crs.extract.encoders import EncoderSpec, is_commit
from crs.extract.models.hub import HUB_FILES, WeightsError, cached_file, commit_of, hub_repo, timm_hub_id


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors of a checkpoint file: safetensors as is, else ``torch.load(weights_only=True)``."""
    path = str(path)
    if path.endswith(".safetensors"):
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


def fill_model(model: torch.nn.Module, state: dict[str, torch.Tensor], spec: EncoderSpec, where: str) -> None:
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


def weights_file(weights: str) -> str:
    p = Path(weights)
    if p.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
            if (p / name).exists():
                return str(p / name)
        raise WeightsError(f"--weights {weights}: a folder without model.safetensors or pytorch_model.bin")
    if not p.exists():
        raise WeightsError(f"--weights {weights}: no such file")
    return str(p)


# ------------------------------------------------------------------------ what was loaded
def weights_info(source: str, requested: str | None = None, loaded: str | None = None,
                 sha256: str | None = None) -> dict:
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


def loaded_weights_info(spec: EncoderSpec, weights: str | None, model: torch.nn.Module | None = None) -> dict:
    """``Encoder.weights_info`` of a model just loaded from ``spec`` (and ``weights``, if given)."""
    if spec.source == "builtin" or spec.loader == "builtin":
        return weights_info("builtin: no learned weights")
    if not spec.pretrained:
        return weights_info(f"random init, torch seed {spec.init_seed} ({spec.model_id})")
    if weights is not None:
        return weights_info(f"local: {os.path.abspath(weights)}", spec.revision, None, weights_sha256(weights))
    if spec.loader == "timm" and timm_hub_id(spec) is None:  # timm's own download from a URL
        url = (getattr(model, "pretrained_cfg", None) or {}).get("url")
        return weights_info(f"timm: {spec.model_id} ({url or 'url'}; not a hub snapshot)", spec.revision)
    repo = hub_repo(spec)
    commit = getattr(getattr(model, "config", None), "_commit_hash", None) if spec.loader == "hf" else None
    if not is_commit(commit):
        files = (spec.checkpoint,) if spec.loader == "timm-checkpoint" else HUB_FILES.get(spec.loader, ())
        commit = commit_of(cached_file(repo, files, spec.revision))
    where = f"hub: {repo}" + (f"/{spec.checkpoint}" if spec.checkpoint else "")
    if commit is None:
        where += " (its snapshot was not found in the local cache: the commit loaded is unknown)"
    return weights_info(where, spec.revision, commit)
