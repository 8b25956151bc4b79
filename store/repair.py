"""The commands that repair a damaged node of a store: ``crs extract`` and ``crs probe`` as the data was first
written (its dataset, encoders and settings read from the attributes the writers recorded), and ``crs store
verify --repair``. Every reader's refusal names one of these; they read what they can and never raise, since
a damaged store must still get its message."""

from __future__ import annotations

import os
import shlex

from crs.foundations.config import flag_words
from crs.store.layout import plain_group
from crs.store.location import local_path, open_below_root, open_root


def _node_or_none(path: str, key: str):
    """The node at ``key`` of the store at ``path``, read only, or None where it cannot be read."""
    for opened in (open_root, open_below_root):  # the root's own metadata may be what is damaged
        try:
            return opened(path, "r")[key] if opened is open_root else opened(path)[key]
        except Exception:  # noqa: BLE001 - only a message is at stake
            continue
    return None


def _child_names(path: str, key: str) -> list[str]:
    """The names of the nodes right under ``key``, whether or not their metadata reads."""
    here = local_path(path)
    if here is not None:
        folder = os.path.join(here, key)
        return sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n))) \
            if os.path.isdir(folder) else []
    try:
        group = open_root(path, "r")[key]
        return sorted([*group.group_keys(), *group.array_keys()])
    except Exception:  # noqa: BLE001 - only a message is at stake
        return []


def _encoders_of(path: str, dataset: str) -> list[str]:
    """The encoders with embeddings of ``dataset`` in the store at ``path`` ([] when that cannot be read)."""
    g = _node_or_none(path, f"datasets/{dataset}/embeddings")
    return sorted(g.group_keys()) if g is not None else []


def _attrs_of(path: str, key: str) -> dict:
    node = _node_or_none(path, key)
    return dict(node.attrs) if node is not None else {}


def _dataset_words(path: str, dataset: str) -> list[str]:
    """How the command line names ``dataset`` and the settings its table was made with, from its attributes:
    csv:FILE with its image root, modality and shift target; a real dataset with its folder and split seed;
    a built-in one with its size. The bare name where the attributes cannot be read."""
    attrs = _attrs_of(path, f"datasets/{dataset}") or _identity_copy(path, dataset)
    identity = attrs.get("identity") or {}
    reads = {k: bool(identity.get(k)) for k in ("allow_absolute_paths", "follow_symlinks")}  # paths out of the root
    if attrs.get("csv"):
        target = attrs.get("shift_spec") or attrs.get("shift_target")  # csv:PATH where the target is a CSV
        return ["--dataset", f"csv:{attrs['csv']}"] + flag_words("datasets", {
            "image_root": _image_root(path, attrs), "modality": attrs.get("modality"),
            "shift_target": target, "split_seed": attrs.get("split_seed"), **reads})
    if attrs.get("root"):
        return ["--dataset", dataset] + flag_words("datasets", {
            "roots": {dataset: attrs["root"]}, "split_seed": attrs.get("split_seed"),
            "uncertain": attrs.get("uncertain"), **reads})
    return ["--dataset", dataset] + flag_words("datasets", {"size": attrs.get("size")})


def _image_root(path: str, attrs: dict) -> str | None:
    """The --image-root a csv: dataset's command names: its root, except where that is the CSV's own folder
    (the default) and a csv: shift target was read from its own folder, which --image-root would replace
    (both CSVs are read relative to one --image-root when it is given)."""
    root, target = attrs.get("root"), attrs.get("shift_spec")
    if not target or root != os.path.dirname(str(attrs["csv"])):
        return root
    target_root = _attrs_of(path, f"datasets/{attrs.get('shift_target')}").get("root")
    return None if target_root in (None, os.path.dirname(target[len("csv:"):])) else root


def _identity_copy(path: str, dataset: str) -> dict:
    """The copy of the dataset's naming attributes that extract keeps with each embedding array (``dataset``),
    for when the dataset's own metadata is what is damaged."""
    base = f"datasets/{dataset}/embeddings"
    for enc in _encoders_of(path, dataset):
        group = _node_or_none(path, f"{base}/{enc}")
        for cond in sorted(group.group_keys()) if group is not None else []:
            found = _attrs_of(path, f"{base}/{enc}/{cond}").get("dataset")
            if found:
                return found
    return {}


# the extract settings recorded with each embedding array (``tool.settings.extract``) that shape what it holds
_EXTRACT_KEYS = {"chunk": "chunk", "severities": "severities", "families": "families", "perturbations": "perturb",
                 "dtype": "dtype", "precision": "precision"}


def _extract_words(path: str, dataset: str, encoders: list[str]) -> list[str]:
    """The extract settings the dataset's embeddings were made with (of the first encoder that records them)."""
    base = f"datasets/{dataset}/embeddings"
    for enc in encoders + _encoders_of(path, dataset):
        group = _node_or_none(path, f"{base}/{enc}")
        for cond in sorted(group.group_keys()) if group is not None else []:
            tool = _attrs_of(path, f"{base}/{enc}/{cond}").get("tool") or {}
            settings = (tool.get("settings") or {}).get("extract")
            if settings:
                return flag_words("extract", {flag: settings[key] for key, flag in _EXTRACT_KEYS.items()
                                              if key in settings})
    return []


def extract_command(path: str, dataset: str, encoders: list[str], *, dataset_first: bool = False) -> str:
    """`crs extract` that writes ``dataset``'s embeddings of ``encoders`` as they were first written (placeholder
    ENCODER when none is known)."""
    named = [w for e in encoders or ["ENCODER"] for w in ("--encoder", e)]
    given = _dataset_words(path, dataset)
    words = ["crs", "extract", *(given + named if dataset_first else named + given)]
    return f"`{shlex.join(words + _extract_words(path, dataset, list(encoders)) + ['--store', path])}`"


def probe_command(path: str, dataset: str, name: str) -> str:
    """`crs probe` that writes the predictions stored under result name ``name`` (ENCODER or ENCODER+HEAD) anew,
    with the results folder and probe settings their run recorded (``provenance``, written by
    ``crs.probe.run``), read from any of the name's prediction arrays; predictions written otherwise (through
    ``Store.write_predictions`` with other attributes) get the head their name says."""
    base = f"datasets/{dataset}/predictions/{name}"
    recorded: dict = {}
    for cond in _child_names(path, base):
        recorded = _attrs_of(path, f"{base}/{cond}").get("provenance") or {}
        if recorded:
            break
    words = ["crs", "probe", "--encoder", name.partition("+")[0], "--dataset", dataset, "--store", path]
    results, here = recorded.get("results"), local_path(path)
    if results:  # recorded relative to a local store, so that a store moved with its results still finds them
        words += ["--results", os.path.normpath(os.path.join(here, results)) if here and not os.path.isabs(results)
                  else results]
    words += flag_words("probe", recorded.get("probe") or {"head": name.partition("+")[2] or None})
    return f"`{shlex.join(words)}`"


def _extract_every(path: str, d: str) -> str:
    """`crs extract` of every encoder of dataset ``d`` in the store."""
    return extract_command(path, d, _encoders_of(path, d), dataset_first=True)


def _extract_any(path: str, d: str) -> str:
    """`crs extract` of one encoder of dataset ``d`` in the store (its dataset arrays are rewritten by any)."""
    return extract_command(path, d, _encoders_of(path, d)[:1], dataset_first=True)


def _rebuild(path: str, d: str) -> str:
    """The commands that write dataset ``d`` anew: its embeddings of every encoder, then each probe whose
    predictions it held."""
    group = _node_or_none(path, f"datasets/{d}/predictions")
    names = sorted(group.group_keys()) if group is not None else []
    return ", then ".join([_extract_every(path, d)] + [probe_command(path, d, n) for n in names])


def repair_hint(path: str, key: str, *, decoded: bool = False) -> str:
    """The command that recomputes the node at store key ``key`` (``datasets/D/...``). ``decoded``: the damage
    was found by decoding or in metadata, which ``crs extract``'s cheap resume check does not see."""
    parts = key.strip("/").split("/") if key.strip("/") else []
    verify = f"`{shlex.join(['crs', 'store', 'verify', '--repair', path])}`"
    if len(parts) < 2 or parts[0] != "datasets":
        return (f"run {verify}; if it is the store's root metadata that is damaged, extract into a new store "
                "(pass --store with a new path)")
    d = parts[1]
    if plain_group(key):
        return f"run {verify} (it rewrites that group's metadata, which holds nothing else)"
    if len(parts) == 2:
        return f"run {verify} (it removes dataset {d}), then {_rebuild(path, d)}"
    if parts[2] == "embeddings":
        extract = extract_command(path, d, [parts[3]])
        return f"run {verify}, then {extract}" if decoded or len(parts) < 6 else f"run {extract} (or {verify})"
    if parts[2] == "predictions":
        return f"run {probe_command(path, d, parts[3])} (it writes them anew), or {verify}"
    if parts[2] == "failures":
        return f"run {verify} (it resets {d}'s chunks), then {_extract_every(path, d)}"
    return f"run {_extract_any(path, d)} (it rewrites the dataset's arrays), or {verify}"


def next_step(path: str, key: str) -> str:
    """The command that recomputes node ``key`` once ``crs store verify --repair`` has removed or reset it."""
    parts = key.strip("/").split("/")
    d = parts[1] if len(parts) > 1 else "..."
    if len(parts) >= 4 and parts[2] == "embeddings":
        return f"run {extract_command(path, d, [parts[3]])}"
    if len(parts) >= 4 and parts[2] == "predictions":
        return f"run {probe_command(path, d, parts[3])}"
    if len(parts) == 2:
        return f"run {_rebuild(path, d)}"
    if len(parts) >= 3 and parts[2] == "embeddings":
        return f"run {_extract_every(path, d)}"
    return f"run {_extract_any(path, d)} (it rewrites the dataset's arrays)"
