"""The model hub: what a failed download means (``WeightsError``, mapped by the hub's exception
classes), the local cache (which revisions and files it holds) and ``weights_status``, which says
without downloading whether a record's weights can be had."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from crs.extract.encoders import EncoderSpec
from crs.foundations.errors import UserError


class WeightsError(UserError):
    """The weights cannot be had (gated, missing, offline, wrong file); the message says what to do."""


def hub_error(spec: EncoderSpec, exc: Exception) -> WeightsError:
    """One clear message for the ways a hub download fails, by the hub's exception class."""
    from huggingface_hub.errors import (  # huggingface_hub: only hub lookups need it
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    page = spec.page or f"https://huggingface.co/{spec.model_id}"
    # GatedRepoError is a RepositoryNotFoundError, LocalEntryNotFoundError an EntryNotFoundError: checked first
    if isinstance(exc, GatedRepoError) or (spec.gated and "401" in str(exc)) or "403" in str(exc):
        return WeightsError(
            f"encoder {spec.name!r}: {spec.model_id} is gated. Accept its terms at {page} while logged in, "
            "then set HF_TOKEN to a token of that account (or run `hf auth login`) and run again"
        )
    offline = _offline() or isinstance(exc, OfflineModeIsEnabled)
    if not offline and isinstance(exc, LocalEntryNotFoundError):  # the hub did not answer: no connection
        return WeightsError(_unreachable(spec, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    if offline and spec.revision and cached_revisions(hub_repo(spec)):
        have = cached_revisions(hub_repo(spec))
        return WeightsError(
            f"encoder {spec.name!r}: revision {spec.revision} of {hub_repo(spec)} is not in the local cache "
            f"({_cache_dir()} holds {', '.join(have)}) and "
            f"HF_HUB_OFFLINE is set. Download that revision once with network access (`hf download "
            f"{hub_repo(spec)} --revision {spec.revision}`), or pin one the cache holds with "
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


def _unreachable(spec: EncoderSpec, why: str) -> str:
    """The message for weights that are not in the cache while the hub cannot be reached."""
    from huggingface_hub import constants  # huggingface_hub: only hub lookups need it

    gated = (f"; it is also gated: accept its terms at {spec.page or 'its model page'} and set HF_TOKEN"
             if spec.gated and not _has_token() else "")
    return (f"encoder {spec.name!r}: the weights of {hub_repo(spec)}"
            + (f" (revision {spec.revision})" if spec.revision else "")
            + f" are not in the local cache ({_cache_dir()}) and the hub at {constants.ENDPOINT} cannot be reached "
            f"({why}): no connection to it. Connect (behind a proxy, set HTTPS_PROXY), or download them once "
            f"where there is one ({_download(spec)}) into HF_HOME, or pass --weights PATH{gated}")


def _download(spec: EncoderSpec) -> str:
    words = ["hf", "download", hub_repo(spec)] + (["--revision", spec.revision] if spec.revision else [])
    return f"`{shlex.join(words)}`"


def hub_errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a failed hub download: every one huggingface_hub.errors defines or brings
    in (its own, and the HTTP client's error it builds on), and those of the HTTP libraries older versions
    reach the network with (requests, urllib3) where they are installed. Taken from the module, not
    listed, so that an error class a new huggingface_hub adds is still the user's to repair (exit 2)."""
    from huggingface_hub import errors  # huggingface_hub: only hub lookups need it

    found = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    try:
        import requests  # optional: huggingface_hub >= 1.0 does without requests

        found.append(requests.RequestException)
    except ImportError:  # pragma: no cover - huggingface_hub >= 1.0 reaches the network with httpx
        pass
    try:
        import urllib3  # optional: huggingface_hub >= 1.0 does without urllib3

        found.append(urllib3.exceptions.HTTPError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(found)


def _offline() -> bool:
    from huggingface_hub import constants  # huggingface_hub: only hub lookups need it

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _cache_dir() -> str:
    from huggingface_hub import constants  # huggingface_hub: only hub lookups need it

    return str(constants.HF_HUB_CACHE)


def hub_repo(spec: EncoderSpec) -> str:
    """The hub repo a record's weights come from (timm ids through their pretrained config)."""
    if spec.loader == "timm":
        return timm_hub_id(spec) or spec.model_id
    return spec.model_id


def _repo_cache(repo_id: str) -> Path:
    from huggingface_hub import constants  # huggingface_hub: only hub lookups need it
    from huggingface_hub.file_download import repo_folder_name  # huggingface_hub: only hub lookups need it

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


def commit_of(path: str | os.PathLike | None) -> str | None:
    """The commit of a hub-cache path ``.../snapshots/<commit>/<file>``, else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    parts = Path(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", parts[i + 1]):
            return parts[i + 1]
    return None


def cached_file(repo_id: str, filenames, revision: str | None) -> str | None:
    """The cache path of the first of ``filenames`` held for ``revision`` (refs resolved), else None.
    Looks only at the local cache: never downloads."""
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub: only hub lookups need it

    for name in filenames:
        path = try_to_load_from_cache(repo_id, name, revision=revision)
        if isinstance(path, str):
            return path
    return None


def hub_file(spec: EncoderSpec, filename: str) -> str:
    from huggingface_hub import hf_hub_download  # huggingface_hub: only hub lookups need it

    try:
        return hf_hub_download(spec.model_id, filename, revision=spec.revision)
    except Exception as exc:
        raise hub_error(spec, exc) from exc


def timm_hub_id(spec: EncoderSpec) -> str | None:
    """The hub repo timm reads a timm id's weights from (``hf-hub:ORG/NAME``, or the pretrained config's
    ``hf_hub_id``), without a revision; None when timm takes them from a URL or has no such model."""
    if spec.model_id.startswith("hf-hub:"):
        return spec.model_id[len("hf-hub:"):].split("@")[0]
    import timm  # timm: only a timm encoder needs it

    try:
        cfg = timm.models.get_pretrained_cfg(spec.model_id)
    except Exception:  # timm raises for an unknown name; load() says so when it builds the model
        return None
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    return hub_id.split("@")[0] if hub_id else None


# the files each loader reads from the hub, the first one found in the cache naming the snapshot used
HUB_FILES = {"timm": ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"),
              "hf": ("config.json",), "hf-vision-tower": ("config.json",)}


# ------------------------------------------------------------------------ before a run (crs extract --plan)
def _has_token() -> bool:
    from huggingface_hub import get_token  # huggingface_hub: only hub lookups need it

    return bool(os.environ.get("HF_TOKEN")) or get_token() is not None


def _hub_files_cached(spec: EncoderSpec) -> bool:
    """Whether the local cache holds, for the record's revision, every file its loader will read."""
    repo, rev = hub_repo(spec), spec.revision
    if spec.loader == "timm":  # an hf-hub: id also reads the repo's config.json
        config_ok = not spec.model_id.startswith("hf-hub:") or cached_file(repo, ("config.json",), rev) is not None
        return config_ok and cached_file(repo, HUB_FILES["timm"], rev) is not None
    if spec.loader == "timm-checkpoint":
        return cached_file(repo, (spec.checkpoint,), rev) is not None
    if cached_file(repo, ("config.json",), rev) is None:
        return False
    index = cached_file(repo, ("model.safetensors.index.json",), rev)
    if index is None:
        return cached_file(repo, ("model.safetensors", "pytorch_model.bin"), rev) is not None
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    shards = {shard for key, shard in weight_map.items()
              if spec.loader != "hf-vision-tower" or "vision_tower." in key}
    return bool(shards) and all(cached_file(repo, (shard,), rev) is not None for shard in shards)


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
    what = f"{hub_repo(spec)}" + (f" (revision {spec.revision})" if spec.revision else "")
    problems = []
    if _offline():
        problems.append(f"encoder {spec.name!r}: {what} is not in the local cache and HF_HUB_OFFLINE is set; "
                        "download it once with network access, or pass --weights PATH")
    if spec.gated and not token:  # said offline too: the download it needs will want the token
        problems.append(("it" if problems else f"encoder {spec.name!r}: {spec.model_id}") + " is gated and no token "
                        f"is set; accept its terms at {page}, then set HF_TOKEN (or run `hf auth login`)")
    out["problem"] = "; ".join(problems) or None
    return out


# ------------------------------------------------------------------------ before loading (crs extract)
HUB_TIMEOUT_S = 5.0  # a connection to the hub (or the proxy in front of it) must open within this


def reachable(url: str, timeout: float = HUB_TIMEOUT_S) -> str | None:
    """None where a TCP connection to ``url``'s host (or to the proxy the environment names for it) opens within
    ``timeout`` seconds; else why not. The name lookup counts too: it runs in a thread, since a resolver without
    a network can block for longer than any socket timeout."""
    import socket  # only a run that must download needs it
    import threading
    import urllib.parse
    import urllib.request

    u = urllib.parse.urlsplit(url)
    host, port = u.hostname or "", u.port or (443 if u.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(u.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or "", p.port or 80
    found: dict = {}

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            found["ok"] = True
        except OSError as exc:
            found["error"] = exc

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    if found.get("ok"):
        return None
    exc = found.get("error")
    return f"{host}:{port}: " + (getattr(exc, "strerror", None) or str(exc) if exc is not None
                                 else f"no answer within {timeout:g} s")


def preflight(spec: EncoderSpec, weights: str | None = None) -> None:
    """WeightsError at once where ``spec``'s weights cannot be had, before anything is loaded or written: what
    ``weights_status`` finds (a --weights path that does not exist, weights on no hub, HF_HUB_OFFLINE without
    them in the cache, a gated repo without a token), or a hub that cannot be reached for weights the cache
    lacks (``reachable``), instead of the hub client's retries and a message that blames HF_HUB_OFFLINE."""
    status = weights_status(spec, weights)
    if status["problem"]:
        raise WeightsError(status["problem"])
    if status["in_cache"] is not False or (spec.loader == "timm" and timm_hub_id(spec) is None):
        return  # nothing to download, or timm downloads from a URL of its own
    from huggingface_hub import constants  # huggingface_hub: only hub lookups need it

    why = reachable(constants.ENDPOINT)
    if why is not None:
        raise WeightsError(_unreachable(spec, why))
