"""The embedding store: a Zarr v3 hierarchy every stage reads and writes.

Layout (schema version 1)::

    /                                 attrs: crs_store = {schema_version, created, crs_version}
    datasets/<dataset>/               attrs: task, classes, ordinal, shift_target, split_seed, ...
        image_id   [image]            str
        label      [image] int64      (multiclass)   or  [image, label] int8 in {1, 0, -1} (multilabel)
        split      [image] int8       0 train, 1 val, 2 test
        group      [image] str        patient or lesion id
        embeddings/<encoder>/<condition>/
            x      [row, feature]     float16 by default, chunked along rows
            done   [chunk] bool       one flag per chunk of x, set after that chunk is written
            commit [chunk, 2] uint64  per chunk: bytes of its stored file, CRC-32 of its values
                                      attrs: rows ('all' | 'test'), complete, chunk_bytes (the
                                      commit record's bytes, copied once complete), provenance
        predictions/<encoder>/<condition key>
                   [seed, fraction, image, class] float32 test probabilities of the chosen probes,
                                      one chunk up to 64 MB (``prediction_chunks``); attrs: commit
                                      (per chunk: bytes of its stored file, CRC-32 of its values)

Rows are ordered test first (then val, then train), so that chunk j of a test-only
(perturbed) array and chunk j of the clean array cover the same images, and
extraction decodes each image once for all conditions.

Writes go chunk by chunk. ``done[j]`` is set only after chunk ``j`` of ``x`` is on
disk (Zarr's local store writes each chunk atomically), so a killed run loses at most
the chunks in flight, and a re-run finishes only what is missing. ``complete`` is set
once every flag is; readers refuse incomplete arrays and say how to resume.

Integrity: every array is created with a checksum in each chunk (Zarr's zstd codec with
its content checksum on: zstd checks it at every decode) and with every chunk written
(also one equal to the fill value), so a truncated or altered chunk fails its checksum
and a missing chunk file is a missing file, never a silent block of zeros. (Zarr's crc32c
codec does the same job; benchmarks/store_verify_bench.py measured it at about +8 % of a
read's CPU time, against about +4 % for zstd's own checksum with the presence check, and the
checks may cost 5 %.)
Before ``done[j]`` the writer records ``commit[j]`` = (stored bytes of chunk j, CRC-32 of
its values): ``pending()`` re-does done chunks whose file is missing or of another size,
``read_embedding`` refuses them (against ``chunk_bytes``, the record's sizes copied into the
attributes once complete), ``crs store verify`` decodes each and compares the CRC. A prediction
array keeps the same record per chunk in its ``commit`` attribute, compared in full on every read. Readers name the array, the chunk
and the command that repairs it. Stores written before this (no checksum, no ``commit``)
are read as before, best effort: a missing chunk of a done embedding chunk is still found.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import os
import re
import shlex
import uuid
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from crs import __version__ as CRS_VERSION
from crs.config import flag_words
from crs.errors import CrsError, UserError, writing_to
from crs.names import SPLIT_CODE

SCHEMA_VERSION = 1
_WHEN = frozenset({"written", "created", "completed"})  # when a thing was written, not what it holds
DEFAULT_STORE = "./crs-store.zarr"

# zarr writes each metadata file through a temporary "<name>.<hex>.partial" beside it (also to check
# that a parent group exists, on every array it creates), so a listing of that folder by another
# thread (``crs.stages.steps.probe`` runs small pairs side by side) can meet one and warns that it is
# not part of the hierarchy; it never is, and the listing is right without it. Other strays still warn.
warnings.filterwarnings("ignore", message=r"Object at .*\.partial is not recognized as a component",
                        category=zarr.errors.ZarrUserWarning)


class StoreError(UserError):
    """A store problem the user can act on (bad path, other schema, missing or incomplete data)."""


def _writes(method):
    """``method`` of a Store (or of an object holding one as ``store``) that writes into it: a full disk, a
    quota, a read-only file system or a refused permission met without a file name is named by the store's
    path (``crs.errors.writing_to``)."""
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        with writing_to(getattr(self, "store", self).path):
            return method(self, *args, **kwargs)
    return wrapped


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def condition_key(condition: str) -> str:
    """Node name for a condition: ':' is not portable in file names, so 'shift:x' -> 'shift~x'."""
    return condition.replace(":", "~")


def key_condition(key: str) -> str:
    return key.replace("~", ":")


@dataclass(frozen=True)
class DatasetTable:
    """Per-image metadata of one dataset, in store row order (test, val, train)."""

    name: str
    ids: np.ndarray  # [image] str
    labels: np.ndarray  # [image] int64 or [image, label] int8
    split: np.ndarray  # [image] int8
    group: np.ndarray  # [image] str
    attrs: dict[str, Any]

    @property
    def task(self) -> str:
        return self.attrs["task"]

    @property
    def classes(self) -> list[str]:
        return list(self.attrs["classes"])

    def rows(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == SPLIT_CODE[split])

    @property
    def n_test(self) -> int:
        return int((self.split == SPLIT_CODE["test"]).sum())


def _fully_created(g: zarr.Group) -> bool:
    return "x" in g and "done" in g and "n_chunks" in g.attrs


# Every array this store creates: zstd as before, now with its checksum of each chunk's content, and
# every chunk stored (a chunk equal to the fill value too), so that a missing chunk file means damage.
CHECKED = {"compressors": (ZstdCodec(level=0, checksum=True),), "config": {"write_empty_chunks": True}}


PREDICTION_CHUNK_BYTES = 64 << 20  # the most one chunk of test probabilities holds (float32)


def prediction_chunks(shape: tuple[int, ...], cap: int | None = None) -> tuple[int, ...]:
    """The chunks of a prediction array [seed, fraction, image, class]: the whole array in one chunk where it
    fits in ``cap`` bytes (scoring reads every array whole: one chunk halves zarr's cost of a read against a
    chunk per seed), else as many whole seeds as fit, and a seed's images split where one seed alone does
    not. Stores written with a chunk per seed read the same (zarr reads the layout from the metadata)."""
    cap = PREDICTION_CHUNK_BYTES if cap is None else cap
    seeds, fractions, images, classes = (max(int(d), 1) for d in shape)
    row = fractions * classes * 4  # bytes of one image of one seed
    rows = images if row * images <= cap else max(cap // row, 1)
    return (min(seeds, max(cap // (row * rows), 1)), fractions, rows, classes)


def has_checksums(arr: zarr.Array) -> bool:
    """Whether ``arr`` carries a checksum in each chunk (written by this version; before: best effort)."""
    return any(isinstance(c, Crc32cCodec) or (isinstance(c, ZstdCodec) and c.checksum) for c in arr.compressors)


def chunk_keys(arr: zarr.Array) -> list[str]:
    """The store keys (relative to the array) of every chunk of ``arr``, in C order of chunk index."""
    return [arr.metadata.encode_chunk_key(c) for c in np.ndindex(*arr.cdata_shape)]


def values_crc(values: np.ndarray) -> int:
    """CRC-32 of an array's values in C order (the commit record's digest of what was written)."""
    return zlib.crc32(np.ascontiguousarray(values).tobytes())


def commit_record(store: "Store", arr: zarr.Array, coords: tuple[int, ...], values: np.ndarray) -> list[int]:
    """The commit record of chunk ``coords`` of ``arr``, just written with ``values``: [stored bytes of its
    file, CRC-32 of its values]. Every array whose values feed a number keeps one per chunk: embeddings in
    their ``commit`` array, predictions in their ``commit`` attribute."""
    return [store.file_size(f"{arr.path}/{arr.metadata.encode_chunk_key(coords)}"), values_crc(values)]


def chunk_values(arr: zarr.Array, values: np.ndarray, coords: tuple[int, ...]) -> np.ndarray:
    """The part of ``values`` (all of ``arr``) that chunk ``coords`` holds."""
    return values[tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, arr.chunks))]


def record_problem(size: int | None, record, values: np.ndarray | None = None) -> str | None:
    """What is wrong with one chunk against its commit record (stored bytes, CRC-32 of its values), or None.
    ``size``: the bytes stored now (None: no file); ``values``: the decoded values, where they were read
    (else only the size is compared)."""
    if size is None:
        return "missing (its file was deleted)"
    if record is None:
        return None
    if int(record[0]) != size:
        return f"not as committed ({size} bytes stored, {int(record[0])} committed: truncated or replaced)"
    if values is not None and int(record[1]) != values_crc(values):
        return "not as committed (the CRC-32 of its values differs: altered or replaced)"
    return None


def plain_group(key: str) -> bool:
    """Whether store key ``key`` is a group this store creates without attributes (``datasets``,
    ``datasets/D/embeddings[/E]``, ``datasets/D/predictions[/E]``): its metadata can be written anew."""
    parts = key.strip("/").split("/")
    return parts == ["datasets"] or (len(parts) in (3, 4) and parts[0] == "datasets"
                                     and parts[2] in ("embeddings", "predictions"))


def _node_or_none(path: str, key: str):
    """The node at ``key`` of the store at ``path``, read only, or None where it cannot be read (only
    repair messages use it: a damaged store must still get its message)."""
    try:
        return _open_root(path, "r")[key]
    except Exception:  # noqa: BLE001 - only a message is at stake
        return None


def _child_names(path: str, key: str) -> list[str]:
    """The names of the nodes right under ``key``, whether or not their metadata reads (for repair messages)."""
    here = local_path(path)
    if here is not None:
        folder = os.path.join(here, key)
        return sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n))) \
            if os.path.isdir(folder) else []
    try:
        group = _open_root(path, "r")[key]
        return sorted([*group.group_keys(), *group.array_keys()])
    except Exception:  # noqa: BLE001 - only a message is at stake
        return []


def _encoders_of(path: str, dataset: str) -> list[str]:
    """The encoders with embeddings of ``dataset`` in the store at ``path`` (for repair commands; [] when
    that cannot be read)."""
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
        return ["--dataset", f"csv:{attrs['csv']}"] + flag_words("datasets", {
            "image_root": attrs.get("root"), "modality": attrs.get("modality"),
            "shift_target": attrs.get("shift_target"), "split_seed": attrs.get("split_seed"), **reads})
    if attrs.get("root"):
        return ["--dataset", dataset] + flag_words("datasets", {
            "roots": {dataset: attrs["root"]}, "split_seed": attrs.get("split_seed"),
            "uncertain": attrs.get("uncertain"), **reads})
    return ["--dataset", dataset] + flag_words("datasets", {"size": attrs.get("size")})


def _identity_copy(path: str, dataset: str) -> dict:
    """The copy of the dataset's naming attributes that extract keeps with each embedding array (``dataset``)."""
    base = f"datasets/{dataset}/embeddings"
    for enc in _encoders_of(path, dataset):
        group = _node_or_none(path, f"{base}/{enc}")
        for cond in sorted(group.group_keys()) if group is not None else []:
            found = _attrs_of(path, f"{base}/{enc}/{cond}").get("dataset")
            if found:
                return found
    return {}


# the extract settings recorded with each embedding array (``tool.settings.extract``) that shape what it holds
_EXTRACT_KEYS = {"chunk": "chunk", "severities": "severities", "perturbations": "perturb", "dtype": "dtype",
                 "precision": "precision"}


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
    ``crs.probe.run``), read from any of the name's prediction arrays."""
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
    verify = f"`crs store verify --repair {path}`"
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


def shape_problem(x, n_chunks: int, n_rows: int | None) -> str | None:
    """What is wrong with an embedding array's metadata (``x``'s shape against the row count and chunk count
    it was created with, kept in its group's attributes; arrays older than ``n_rows``: the chunk count
    only), or None. An altered ``zarr.json`` that is still valid JSON is only caught this way."""
    rows, chunk = int(x.shape[0]), int(x.chunks[0])
    if n_rows is not None and rows != int(n_rows):
        return f"its metadata says {rows} rows but it was created with {n_rows} (the zarr.json was altered)"
    if rows and -(-rows // chunk) != n_chunks:
        return (f"its metadata says {rows} rows in chunks of {chunk} but it was created with {n_chunks} chunks "
                "(the zarr.json was altered)")
    return None


def _as_json(value: Any) -> Any:
    """A value as it reads back from JSON attributes (tuples become lists)."""
    return json.loads(json.dumps(value))


def store_order(split: np.ndarray) -> np.ndarray:
    """Permutation putting test rows first, then val, then train; stable within a split."""
    key = np.array([2, 1, 0], dtype=np.int8)[np.asarray(split)]  # train 2, val 1, test 0
    return np.argsort(key, kind="stable")


def local_path(path: str) -> str | None:
    """The file-system path of a store at ``path`` (a path or file:// URL); None for a remote URL."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if is_url(path) else path


def is_url(path: str) -> bool:
    """Whether ``path`` names an fsspec URL (s3://, gs://, az://, ...) rather than a local folder."""
    return "://" in path and not path.startswith("file://")


def url_storage_options(path: str, storage_options: dict | None = None) -> dict:
    """fsspec options for an object-store URL: ours are never credentials (those come from each
    system's own environment variables and config files: AWS_*, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS,
    AZURE_STORAGE_*, ...). Directory listings are not cached, because other processes (another
    run, Ray workers) add arrays and chunks behind this one's back."""
    if not is_url(path) or path.startswith("memory://"):
        return dict(storage_options or {})
    own = {"use_listings_cache": False}
    if path.split("://", 1)[0] in ("s3", "s3a"):
        # s3fs (2026.9 here) asks for an object's size (a HEAD request) before every whole-object read, to
        # split reads larger than its block size (50 MiB) over several connections. Nearly all of a store's
        # objects (metadata, embedding chunks of a few MiB) are far smaller, so that HEAD only doubled the
        # round trips of every read: crs extract on S3 made 1,197 HEAD requests for 633 reads of metadata.
        # Only a prediction chunk (up to PREDICTION_CHUNK_BYTES, 64 MiB) can be larger; it is read in one stream
        own["max_concurrency"] = 1
    return {**own, **(storage_options or {})}


_ZARR_TEMPORARY = re.compile(r"zarr\.[0-9a-f]{32}\.partial")  # zarr's atomic write of a zarr.json


def _open_root(path: str, mode: str, storage_options: dict | None = None) -> zarr.Group:
    if path.startswith("file://"):
        path = path[len("file://") :]  # a local path: the local store writes chunks atomically
    is_url = "://" in path
    storage_options = url_storage_options(path, storage_options)
    if not is_url:
        if os.path.isfile(path):
            raise StoreError(f"{path!r} is a file, not a CRS store; pass --store with a directory path")
        # another process creating this store at the same moment has only its zarr.json's temporary
        # file there yet ("zarr.<hex>.partial"): that directory is a store being made, not a stranger's
        held = [e for e in os.listdir(path) if not _ZARR_TEMPORARY.fullmatch(e)] if os.path.isdir(path) else []
        if held and not os.path.exists(os.path.join(path, "zarr.json")):
            raise StoreError(
                f"{path!r} is a non-empty directory that is not a Zarr store; refusing to write into it. "
                "Pass --store with a new or existing CRS store path"
            )
        if mode == "r" and not os.path.exists(os.path.join(path, "zarr.json")):
            raise StoreError(f"no CRS store at {path!r}; run `crs extract` first (or pass --store)")
    else:
        _check_url(path, mode, storage_options)
    kwargs = {"storage_options": storage_options} if storage_options else {}
    try:
        try:
            return zarr.open_group(store=path, mode=mode, **kwargs)
        except zarr.errors.ContainsGroupError:
            # another process created the new store between our look and our create: open theirs
            return zarr.open_group(store=path, mode=mode, **kwargs)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
        raise StoreError(f"no CRS store at {path!r}; run `crs extract` first (or pass --store)") from exc
    except Exception as exc:  # zarr raises several types for a node that is an array, bad metadata, ...
        raise StoreError(f"{path!r} cannot be opened as a CRS store: {exc}. If it is one, its root metadata "
                         f"(zarr.json) is damaged: `crs store verify {path}` says so; no repair keeps the "
                         "store's identity, so extract into a new store (pass --store with a new path)") from exc


def _check_url(url: str, mode: str, storage_options: dict) -> None:
    """The object-store counterpart of the local checks: an existing prefix must be a Zarr store."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except (ImportError, ValueError) as exc:  # no fsspec backend for that protocol (s3fs, gcsfs, adlfs)
        raise StoreError(f"cannot open the store URL {url!r}: {exc}. For s3:// install crs-bench[s3] "
                         "(s3fs); gs:// needs gcsfs and az:// adlfs") from exc
    root = root.rstrip("/")
    try:
        has_meta = fs.exists(f"{root}/zarr.json")
        has_other = not has_meta and fs.exists(root) and bool(fs.ls(root, detail=False))
    except FileNotFoundError:
        has_meta = has_other = False
    except PermissionError as exc:
        raise StoreError(f"no permission to read {url!r} ({exc}); check the credentials in the environment "
                         "(e.g. AWS_PROFILE or AWS_ACCESS_KEY_ID for s3://)") from exc
    if has_other:
        raise StoreError(f"{url!r} holds objects but no Zarr store; refusing to write into it. Pass --store "
                         "with a new or existing CRS store URL")
    if mode == "r" and not has_meta:
        raise StoreError(f"no CRS store at {url!r}; run `crs extract` first (or pass --store)")


class Store:
    """A CRS embedding store at a local path or any fsspec URL."""

    def __init__(self, path: str = DEFAULT_STORE, mode: str = "a", storage_options: dict | None = None):
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', not {mode!r}")
        self.path = str(path)
        self.read_only = mode == "r"
        self.storage_options = dict(storage_options or {})
        self._generator_checked: set[str] = set()  # datasets whose perturbation generator was checked (embedding)
        self.root = _open_root(self.path, "r" if self.read_only else "a", storage_options)
        meta = self.root.attrs.get("crs_store")
        if meta is None and not self.read_only and len(list(self.root.keys())) > 0:
            # our metadata may predate another process's stamping of the store it just created
            self.root = _open_root(self.path, "a", storage_options)
            meta = self.root.attrs.get("crs_store")
        if meta is None:
            if self.read_only or len(list(self.root.keys())) > 0:
                raise StoreError(
                    f"{self.path!r} is a Zarr group but not a CRS store (no 'crs_store' attribute); "
                    "nothing was changed. Pass --store with a new path"
                )
            self.root.attrs["crs_store"] = {
                "schema_version": SCHEMA_VERSION,
                "created": now(),
                "crs_version": CRS_VERSION,
                "store_id": uuid.uuid4().hex,
            }
        else:
            version = meta.get("schema_version")
            if version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path!r} was written with store schema version {version}; this crs reads "
                    f"version {SCHEMA_VERSION}. Nothing was changed: use a crs that matches the store, "
                    "or pass --store with a new path and extract again"
                )

    @property
    def is_url(self) -> bool:
        return is_url(self.path)

    @property
    def store_id(self) -> str:
        """This store's identity, independent of how its path is spelled (older stores: creation time)."""
        meta = self.root.attrs.get("crs_store", {})
        return str(meta.get("store_id") or meta.get("created"))

    def content_digest(self, dataset: str, encoder: str | None = None) -> str:
        """A digest of what later stages read: the store's identity, the dataset's table and, with
        ``encoder``, the commit records of its arrays (per chunk: written or not, and the CRC-32 of
        the values written). Equal digests mean the same content, however the store's path is
        spelled; rewriting a chunk with other values changes it."""
        h = hashlib.sha256(self.store_id.encode())
        table = self.dataset(dataset)
        attrs = {k: v for k, v in table.attrs.items() if k not in _WHEN}
        h.update(json.dumps(_as_json(attrs), sort_keys=True, default=str).encode())
        for values in (table.ids, table.labels, table.split, table.group):
            h.update(json.dumps(np.asarray(values).tolist()).encode())
        h.update(json.dumps(self.failures(dataset)["image_id"].tolist()).encode())
        if encoder is not None:
            for ds, enc, cond, _ in sorted(self.embeddings(dataset)):
                if enc != encoder:
                    continue
                emb = self._embedding_group(ds, enc, cond)
                what = f"the commit record of embeddings {ds}/{enc}/{cond}"
                h.update(cond.encode())
                h.update(np.asarray(self.checked_read(emb["done"], what), dtype=bool).tobytes())
                if "commit" in emb:
                    h.update(np.asarray(self.checked_read(emb["commit"], what)[:, 1], dtype="<u8").tobytes())
                attrs = {k: v for k, v in dict(emb.attrs).items() if k not in _WHEN | {"chunk_bytes"}}
                h.update(json.dumps(_as_json(attrs), sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    def filesystem(self):
        """(fsspec filesystem, root path in it) of an object-store URL, for files beside the Zarr
        hierarchy (locks); credentials as for the store itself."""
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.path, **url_storage_options(self.path, self.storage_options))
        return fs, root.rstrip("/")

    # ------------------------------------------------------------ stored files
    def _local_root(self) -> str | None:
        return local_path(self.path)

    def files(self, prefix: str) -> dict[str, int]:
        """{key relative to ``prefix``: stored bytes} of every file under store key ``prefix`` (one listing;
        hidden names, such as a writer's temporary files, left out)."""
        out: dict[str, int] = {}
        root = self._local_root()
        if root is not None:
            base = os.path.join(root, prefix)
            for dirpath, _, names in os.walk(base):
                for name in names:
                    if name.startswith("."):
                        continue
                    full = os.path.join(dirpath, name)
                    try:
                        out[os.path.relpath(full, base).replace(os.sep, "/")] = os.path.getsize(full)
                    except FileNotFoundError:  # removed while listing
                        pass
            return out
        fs, r = self.filesystem()
        base = f"{r}/{prefix}".strip("/")
        try:
            found = fs.find(base, detail=True)
        except FileNotFoundError:
            return out
        for name, info in found.items():
            rel = name.strip("/")[len(base) :].lstrip("/")
            if rel and not rel.rsplit("/", 1)[-1].startswith("."):
                out[rel] = int(info.get("size") or 0)
        return out

    def file_size(self, key: str) -> int:
        """Stored bytes of the file at store key ``key`` (0 when there is none)."""
        root = self._local_root()
        try:
            if root is not None:
                return os.path.getsize(os.path.join(root, key))
            fs, r = self.filesystem()
            return int(fs.size(f"{r}/{key}") or 0)
        except FileNotFoundError:
            return 0

    def remove(self, key: str) -> None:
        """Delete the file or the subtree at store key ``key`` (repairs only)."""
        root = self._local_root()
        if root is not None:
            full = os.path.join(root, key)
            if os.path.isdir(full):
                import shutil

                shutil.rmtree(full)
            elif os.path.exists(full):
                os.remove(full)
            return
        fs, r = self.filesystem()
        if fs.exists(f"{r}/{key}"):
            fs.rm(f"{r}/{key}", recursive=True)

    def damaged_metadata(self, prefix: str = "") -> list[str]:
        """Store keys of the ``zarr.json`` files under ``prefix`` that do not parse as Zarr metadata."""
        prefix = prefix.strip("/")
        keys = (f"{prefix}/{rel}".strip("/") for rel in sorted(self.files(prefix))
                if rel.rsplit("/", 1)[-1] == "zarr.json")
        return [k for k in keys if self.damaged_metadata_file(k)]

    def _read_bytes(self, key: str) -> bytes:
        root = self._local_root()
        if root is not None:
            with open(os.path.join(root, key), "rb") as f:
                return f.read()
        fs, r = self.filesystem()
        return fs.cat_file(f"{r}/{key}")

    def missing_files(self, prefix: str, keys: list[str]) -> list[str]:
        """Those of ``keys`` (relative to store key ``prefix``) that have no file: a stat each on a local
        store (cheaper than listing a folder a chunk), one listing on an object store."""
        root = self._local_root()
        if root is not None:
            base = os.path.join(root, prefix)
            return [k for k in keys if not os.path.isfile(os.path.join(base, k))]
        present = self.files(prefix)
        return [k for k in keys if k not in present]

    def chunk_sizes(self, prefix: str, keys: list[str]) -> list[int | None]:
        """Stored bytes of each of ``keys`` (relative to store key ``prefix``; None: no file): a stat each on
        a local store, one listing on an object store."""
        root = self._local_root()
        if root is None:
            present = self.files(prefix)
            return [present.get(k) for k in keys]
        base = os.path.join(root, prefix)
        sizes = []
        for k in keys:
            try:
                sizes.append(os.path.getsize(os.path.join(base, k)))
            except FileNotFoundError:
                sizes.append(None)
        return sizes

    def committed(self, arr: zarr.Array, records, what: str, values: np.ndarray | None = None) -> None:
        """Refuse ``arr`` (StoreError naming the chunk and the repair) where a chunk's file is missing or
        differs from its commit record (``records``: one [bytes, CRC-32] per chunk in C order, or None for
        arrays written before commit records: presence only); ``values``, all of ``arr`` where already
        read, also has each chunk's CRC compared."""
        keys = chunk_keys(arr)
        sizes = self.chunk_sizes(arr.path, keys)
        found: dict[str, list[str]] = {}
        for i, (coords, key, size) in enumerate(zip(np.ndindex(*arr.cdata_shape), keys, sizes)):
            record = None if records is None else records[i]
            part = None if values is None or record is None else chunk_values(arr, values, coords)
            problem = record_problem(size, record, part)
            if problem:
                found.setdefault(problem, []).append(key)
        for problem, bad in found.items():
            raise self._damage(arr.path, bad, problem, what, decoded=values is not None)

    def missing_chunks(self, arr: zarr.Array) -> list[str]:
        """Chunk keys of ``arr`` with no stored file (only arrays written with every chunk stored)."""
        return self.missing_files(arr.path, chunk_keys(arr)) if has_checksums(arr) else []

    def bad_chunks(self, arr: zarr.Array) -> list[str]:
        """Chunk keys of ``arr`` whose stored bytes do not decode (checksum mismatch, truncated, garbled)."""
        bad = []
        for coords, key in zip(np.ndindex(*arr.cdata_shape), chunk_keys(arr)):
            try:
                arr.blocks[coords]
            except (MemoryError, OSError):
                raise
            except Exception:  # noqa: BLE001 - any decoder's complaint about these bytes is damage
                bad.append(key)
        return bad

    def checked_read(self, arr: zarr.Array, what: str, *, listed: bool = False) -> np.ndarray:
        """All of ``arr``, refused with a StoreError naming the array, the chunk and the repair when a chunk
        is missing or does not decode. ``what`` names the array for the user; ``listed``: the caller has
        checked already that every chunk's file is there."""
        missing = [] if listed else self.missing_chunks(arr)
        if missing:
            raise self._damage(arr.path, missing, "missing (its file was deleted)", what)
        try:
            return np.asarray(arr[...])
        except (MemoryError, OSError, CrsError):
            raise
        except Exception as exc:  # noqa: BLE001 - confirmed below: damage only if a chunk fails on its own
            bad = self.bad_chunks(arr)
            if not bad:
                raise
            raise self._damage(arr.path, bad, f"damaged ({exc})", what, decoded=True) from exc

    def _damage(self, key: str, chunks: list[str], problem: str, what: str, decoded: bool = False) -> StoreError:
        shown = ", ".join(chunks[:5]) + (f" and {len(chunks) - 5} more" if len(chunks) > 5 else "")
        return StoreError(
            f"{what}: chunk {shown} of array {key!r} in {self.path!r} is {problem}. "
            f"To repair: {repair_hint(self.path, key, decoded=decoded)}"
        )

    def metadata_error(self, exc: BaseException, key: str) -> StoreError | None:
        """A StoreError naming the damaged ``zarr.json`` files on the way to ``key`` or under it, if any
        (else None: the error was not damaged metadata)."""
        parts = key.strip("/").split("/") if key.strip("/") else []
        bad = []
        for i in range(len(parts) + 1):  # the root, each ancestor, the node itself
            meta = "/".join(parts[:i] + ["zarr.json"])
            if self.file_size(meta) and self.damaged_metadata_file(meta):
                bad.append(meta)
        if not bad:
            bad = self.damaged_metadata(key.strip("/"))
        if not bad:
            return None
        return StoreError(
            f"damaged Zarr metadata in {self.path!r}: {', '.join(bad)} ({type(exc).__name__}: {exc}). "
            f"To repair: {repair_hint(self.path, bad[0].rsplit('/', 1)[0] if '/' in bad[0] else '', decoded=True)}"
        )

    def damaged_metadata_file(self, key: str) -> bool:
        try:
            meta = json.loads(self._read_bytes(key))
        except FileNotFoundError:
            return False
        except (ValueError, UnicodeDecodeError):
            return True
        return not (isinstance(meta, dict) and meta.get("zarr_format") == 3
                    and meta.get("node_type") in ("group", "array"))

    def _node(self, key: str):
        """The group or array at ``key``; damaged metadata on the way is a StoreError naming the file."""
        with self.reading(key):
            return self.root[key]

    @contextlib.contextmanager
    def reading(self, key: str = ""):
        """Damaged metadata met inside the block (on the way to ``key`` or under it) becomes a StoreError
        naming the file; other errors pass unchanged."""
        try:
            yield
        except (MemoryError, OSError, CrsError, KeyError):
            raise
        except Exception as exc:  # noqa: BLE001 - confirmed by parsing the metadata files themselves
            err = self.metadata_error(exc, key)
            if err is None:
                raise
            raise err from exc

    # ----------------------------------------------------------------- datasets
    DATASET_ARRAYS = ("image_id", "label", "split", "group")

    def _datasets(self) -> zarr.Group:
        with self.reading("datasets"):
            return require_group(self.root, "datasets") if not self.read_only else self.root["datasets"]

    def datasets(self) -> list[str]:
        with self.reading("datasets"):
            if "datasets" not in self.root:
                return []
            return sorted(self.root["datasets"].group_keys())

    def has_dataset(self, name: str) -> bool:
        return name in self.datasets()

    def dataset_attrs(self, name: str) -> dict[str, Any] | None:
        """A stored dataset's attributes without reading its arrays (which may be the damage a run repairs);
        None where it is not stored, not fully written, or its metadata cannot be read."""
        if not self.has_dataset(name):
            return None
        try:
            g = self._node(f"datasets/{name}")
        except (StoreError, KeyError):
            return None
        return dict(g.attrs) if _dataset_written(g) else None

    @_writes
    def write_dataset(self, table: DatasetTable) -> None:
        """Write a dataset's metadata; if present, check it is the same (splits never change, nor the files
        it was made from) and rewrite any of its arrays that is damaged."""
        with self.reading(f"datasets/{table.name}"):
            if self.has_dataset(table.name) and not _dataset_written(self.root["datasets"][table.name]):
                self._drop_unwritten_dataset(table.name)  # killed while writing it: its attrs come last
            if not self.has_dataset(table.name):
                g = self._datasets().create_group(table.name)
                self._write_table_arrays(g, table, self.DATASET_ARRAYS)
                # attrs last: a dataset group with attrs is a complete one
                set_attrs(g, {**table.attrs, "n_images": len(table.ids), "row_order": "test, val, train",
                              "written": now()})
                return
            g = self.root["datasets"][table.name]
            old_attrs = dict(g.attrs)
        self._check_identity(table, old_attrs.get("identity"))
        values, damaged = {}, []
        for key in self.DATASET_ARRAYS:
            try:
                values[key] = self._dataset_array(g, table.name, key)
            except StoreError:
                damaged.append(key)
        new = {"image_id": np.asarray(table.ids, dtype=str), "label": np.asarray(table.labels),
               "split": np.asarray(table.split)}
        if not all(np.array_equal(values[k], new[k]) for k in new if k in values):
            role = (old_attrs.get("role"), table.attrs.get("role"))
            if "shift_target" in role and role[0] != role[1]:  # a target holds its test rows only
                was = (f"the shift target of {old_attrs.get('target_of')!r} (its test rows only)"
                       if role[0] == "shift_target" else "a dataset of its own")
                raise StoreError(
                    f"dataset {table.name!r} is stored in {self.path!r} as {was}, and is asked for now as "
                    f"{'a dataset of its own' if role[0] == 'shift_target' else 'a shift target'}; one store holds "
                    "it one way: pass --store with a new path, or name it the way the store holds it")
            raise StoreError(
                f"dataset {table.name!r} in {self.path!r} has different images, labels or splits "
                "from the ones given now (a different --size or seed?). Splits never change inside "
                "a store: use the same settings, or pass --store with a new path"
            )
        if damaged:  # rewritten as they were, when what is left shows the same rows in the same order
            same_rows = (old_attrs.get("n_images") == len(table.ids) and "source_row" in old_attrs
                         and old_attrs["source_row"] == _as_json(table.attrs.get("source_row")))
            if not same_rows and "image_id" in damaged:
                self._dataset_array(g, table.name, "image_id")  # raises the damage, naming array and chunk
            self._write_table_arrays(g, table, damaged)

    def _drop_unwritten_dataset(self, name: str) -> None:
        """Delete a dataset group whose metadata a killed run left half-written (the caller holds its
        dataset lock). Its embeddings are created only after the metadata is whole, so such a group holds
        none; if it does, it is not ours to guess about: refuse rather than delete them."""
        g = self.root["datasets"][name]
        kept = sorted(k for k in g.group_keys() if k in ("embeddings", "predictions"))
        if kept:
            raise StoreError(
                f"dataset {name!r} in {self.path!r} holds {' and '.join(kept)} but its metadata was not fully "
                f"written, so its row order is unknown and nothing in it can be trusted. To repair: extract "
                f"into a new store (--store NEW_PATH), or delete 'datasets/{name}' from this one and run "
                f"`crs extract --dataset {name} ...` again")
        del self.root["datasets"][name]

    @staticmethod
    def _check_identity(table: DatasetTable, old: Any) -> None:
        """A file-based dataset's identity (image root, CSV digest, ...) must match the stored one."""
        new = _as_json(table.attrs.get("identity"))
        if not isinstance(old, dict) or not isinstance(new, dict):
            return  # older stores and synthetic datasets record none: nothing more to compare
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            what = "; ".join(f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in differ)
            raise StoreError(
                f"dataset {table.name!r} in this store was extracted from other files ({what}). The images and "
                "CSV of a dataset never change inside a store, or its embeddings would mix different images: "
                "point the dataset at the files it was extracted from, or pass --store with a new path"
            )

    def _write_table_arrays(self, g: zarr.Group, table: DatasetTable, keys) -> None:
        n = len(table.ids)
        chunk = max(1, min(n, 65536))
        for key in keys:
            if key in ("image_id", "group"):
                value = np.asarray(table.ids if key == "image_id" else table.group, dtype=str)
                arr = g.create_array(key, shape=(n,), dtype=str, chunks=(chunk,), overwrite=True, **CHECKED)
                arr[:] = value
            elif key == "label":
                lab = np.asarray(table.labels)
                arr = g.create_array("label", shape=lab.shape, dtype=lab.dtype, chunks=(chunk,) + lab.shape[1:],
                                     overwrite=True, **CHECKED)
                arr[...] = lab
            else:
                arr = g.create_array("split", shape=(n,), dtype=np.int8, chunks=(chunk,), overwrite=True, **CHECKED)
                arr[:] = np.asarray(table.split).astype(np.int8)

    def _dataset_array(self, g: zarr.Group, name: str, key: str) -> np.ndarray:
        what = f"dataset {name!r} ({key})"
        with self.reading(f"datasets/{name}/{key}"):
            if key not in g:
                raise StoreError(f"{what}: array 'datasets/{name}/{key}' is missing from {self.path!r}. "
                                 f"To repair: {repair_hint(self.path, f'datasets/{name}/{key}')}")
            arr = g[key]
        values = self.checked_read(arr, what)
        return _as_strings(values) if key in ("image_id", "group") else values

    def dataset(self, name: str) -> DatasetTable:
        if not self.has_dataset(name):
            known = ", ".join(self.datasets()) or "none"
            raise StoreError(
                f"dataset {name!r} is not in the store {self.path!r} (it has: {known}); "
                f"run `crs extract --dataset {name} --encoder ...` first"
            )
        g = self._node(f"datasets/{name}")
        if not _dataset_written(g):
            raise StoreError(f"dataset {name!r} in {self.path!r} was not fully written (a run was stopped while "
                             f"writing its metadata). To repair: run the same `crs extract --dataset {name} ...` "
                             "again; it rewrites the dataset's metadata before embedding anything")
        v = {key: self._dataset_array(g, name, key) for key in self.DATASET_ARRAYS}
        return DatasetTable(name=name, ids=v["image_id"], labels=v["label"], split=v["split"], group=v["group"],
                            attrs=dict(g.attrs))

    # ---------------------------------------------------------------- failures
    FAILURE_COLUMNS = ("image_id", "file", "reason")

    def failures(self, dataset: str) -> dict[str, np.ndarray]:
        """Images of ``dataset`` that could not be decoded: {'image_id', 'file', 'reason'} (empty if none).

        Their rows hold the embedding of a blank image; later stages leave them out
        (``excluded_rows``)."""
        empty = {k: np.zeros(0, dtype=str) for k in self.FAILURE_COLUMNS}
        if not self.has_dataset(dataset):
            return empty
        key = f"datasets/{dataset}/failures"
        with self.reading(key):
            if "failures" not in self.root["datasets"][dataset]:
                return empty
            g = self.root[key]
            missing = [k for k in self.FAILURE_COLUMNS if k not in g]
            arrays = {k: g[k] for k in self.FAILURE_COLUMNS if k in g}
        if missing:
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} lacks its column(s) "
                             f"{', '.join(missing)}. To repair: {repair_hint(self.path, key)}")
        if g.attrs.get("writing"):
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} was being rewritten when a run "
                             f"was stopped, so which images failed is not known. To repair: "
                             f"{repair_hint(self.path, key)}")
        out = {k: _as_strings(self.checked_read(arrays[k], f"the failures table of {dataset!r} ({k})"))
               for k in self.FAILURE_COLUMNS}
        if len({v.size for v in out.values()}) > 1 or out["image_id"].size != g.attrs.get("rows", out["image_id"].size):
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} has columns of different lengths "
                             f"(a torn write). To repair: {repair_hint(self.path, key)}")
        return out

    @_writes
    def add_failures(self, dataset: str, image_ids, files, reasons) -> None:
        """Merge failures into the dataset's table (one row per image id; the newest reason wins)."""
        old = self.failures(dataset)
        rows = {i: (f, r) for i, f, r in zip(old["image_id"].tolist(), old["file"].tolist(), old["reason"].tolist())}
        rows.update({str(i): (str(f), str(r)) for i, f, r in zip(image_ids, files, reasons)})
        if not rows:
            return
        ids = sorted(rows)
        g = require_group(self._datasets()[dataset], "failures")
        # the three columns are rewritten one after another: a kill between them leaves a table that
        # ``writing`` marks as torn (refused on read, repaired by resetting the dataset's chunks), never one
        # that reads as a shorter list of failures
        g.attrs["writing"] = True
        for k, values in (("image_id", ids), ("file", [rows[i][0] for i in ids]), ("reason", [rows[i][1] for i in ids])):
            arr = g.create_array(k, shape=(len(ids),), dtype=str, chunks=(max(1, len(ids)),), overwrite=True,
                                 **CHECKED)
            arr[:] = np.asarray(values, dtype=str)
        set_attrs(g, {"writing": False, "rows": len(ids), "written": now()})

    def excluded_rows(self, dataset: str) -> np.ndarray:
        """Store rows (test, val, train order) of images listed in the failures table."""
        failed = set(self.failures(dataset)["image_id"].tolist())
        if not failed:
            return np.zeros(0, dtype=np.int64)
        ids = self.dataset(dataset).ids
        return np.flatnonzero(np.isin(ids, list(failed)))

    # -------------------------------------------------------------- embeddings
    @_writes
    def embedding(
        self,
        dataset: str,
        encoder: str,
        condition: str,
        *,
        rows: str,
        n_rows: int,
        width: int,
        chunk: int,
        dtype: str = "float16",
        attrs: dict[str, Any] | None = None,
    ) -> "EmbeddingArray":
        """Open (or create) an embedding array for writing; a mismatch with what is there is an error."""
        key = condition_key(condition)
        with self.reading(f"datasets/{dataset}/embeddings/{encoder}/{key}"):
            base = require_group(require_group(self._datasets()[dataset], "embeddings"), encoder)
            if key in base and not _fully_created(base[key]):
                del base[key]  # killed while creating it: nothing in it was marked written
            exists = key in base
        n_chunks = -(-n_rows // chunk) if n_rows else 0
        if exists:
            g = base[key]
            x = g["x"]
            if x.shape != (n_rows, width) or x.chunks[0] != chunk or str(x.dtype) != dtype:
                raise StoreError(
                    f"{dataset}/{encoder}/{condition} exists in {self.path!r} with shape {x.shape}, chunk "
                    f"{x.chunks[0]}, {x.dtype}; asked for {(n_rows, width)}, chunk {chunk}, {dtype}. "
                    "Delete that array, or use the same settings, or pass --store with a new path"
                )
            self._one_generator(dataset, condition, attrs, dict(g.attrs))
            old_spec = g.attrs.get("encoder_spec")
            new_spec = _as_json((attrs or {}).get("encoder_spec"))
            if new_spec is not None and old_spec is not None and old_spec != new_spec:
                raise StoreError(
                    f"{dataset}/{encoder}/{condition} in {self.path!r} was written by a different encoder "
                    f"spec ({old_spec}); refusing to mix. Pass --store with a new path"
                )
            return EmbeddingArray(g, dataset, encoder, condition, self)
        self._one_generator(dataset, condition, attrs, None)
        # the group, then its arrays; its attributes (n_chunks) last, once they all are (``_fully_created``)
        g, arrays = create_arrays(base, {
            "x": dict(shape=(n_rows, width), dtype=dtype, chunks=(chunk, width), fill_value=0),
            "done": dict(shape=(max(n_chunks, 1),), dtype=bool, chunks=(1,), fill_value=False),
            "commit": dict(shape=(max(n_chunks, 1), 2), dtype=np.uint64, chunks=(1, 2), fill_value=0)}, group=key)
        if n_chunks == 0:
            arrays["done"][0] = True
        set_attrs(
            g, {**(attrs or {}), "condition": condition, "rows": rows, "n_rows": n_rows, "n_chunks": n_chunks,
             "complete": False}
        )
        return EmbeddingArray(g, dataset, encoder, condition, self, arrays)

    def _one_generator(self, dataset: str, condition: str, attrs: dict | None, existing: dict | None) -> None:
        """Refuse to write a perturbed array whose ``perturbation_generator`` (in ``attrs``: the writer's) is not
        the one of the array there (``existing``: its attributes) or of the dataset's other perturbed arrays
        (looked at once per dataset and Store object). Writers that pass none are not checked."""
        from crs.store import generators

        generator = (attrs or {}).get(generators.ATTR)
        if generator is None or not generators.is_perturbed(condition):
            return
        if dataset not in self._generator_checked or (existing is not None
                                                       and generators.recorded(existing) != generator):
            problem = generators.refusal(self.path, dataset, generator, self.perturbation_generators(dataset))
            if problem:
                raise StoreError(problem)
            self._generator_checked.add(dataset)

    def perturbation_generators(self, dataset: str) -> dict[str, list[str]]:
        """{generator: ["ENCODER/CONDITION", ...]} over the dataset's perturbed embedding arrays, in key order
        (``crs.store.generators``: an array that records none was drawn by the first generator)."""
        from crs.store import generators

        found: dict[str, list[str]] = {}
        if dataset not in self.datasets():
            return found
        with self.reading(f"datasets/{dataset}/embeddings"):
            g = self.root["datasets"][dataset]
            groups = g["embeddings"] if "embeddings" in g else None
            for enc in sorted(groups.group_keys()) if groups is not None else []:
                for key, node in sorted(groups[enc].groups()):  # one listing: every array's attributes
                    attrs = dict(node.attrs)
                    # an array whose creation has not finished (its attributes come last, in one write) records
                    # nothing yet: another writer creating it now, or one killed then, not an older generator
                    if generators.is_perturbed(key_condition(key)) and "condition" in attrs:
                        found.setdefault(generators.recorded(attrs), []).append(f"{enc}/{key_condition(key)}")
        return found

    def open_embedding(self, dataset: str, encoder: str, condition: str) -> "EmbeddingArray":
        """An existing embedding array, to write chunks into (the one writer of those chunks)."""
        if self.read_only:
            raise StoreError(f"{self.path!r} is open read-only")
        g = self._node(f"datasets/{dataset}/embeddings/{encoder}/{condition_key(condition)}")
        return EmbeddingArray(g, dataset, encoder, condition, self)

    def embeddings(self, dataset: str | None = None,
                   encoder: str | None = None) -> Iterator[tuple[str, str, str, bool]]:
        """Yield (dataset, encoder, condition, complete) for every embedding array (of ``dataset`` and
        ``encoder`` only, where given)."""
        held = self.datasets()
        for d in [dataset] if dataset else held:
            if d not in held:
                continue
            with self.reading(f"datasets/{d}/embeddings"):
                g = self.root["datasets"][d]
                found = []
                if "embeddings" in g:
                    groups = g["embeddings"]
                    for enc in sorted(groups.group_keys()):
                        if encoder is not None and enc != encoder:
                            continue
                        nodes = dict(groups[enc].groups())  # one listing, not a lookup per condition
                        for key in sorted(nodes):
                            found.append((d, enc, key_condition(key), bool(nodes[key].attrs.get("complete", False))))
            yield from found

    def read_embedding(self, dataset: str, encoder: str, condition: str) -> np.ndarray:
        """The full [row, feature] array; refuses an incomplete or damaged one (naming the chunk and the repair)."""
        g = self._embedding_group(dataset, encoder, condition)
        what = f"embeddings {dataset}/{encoder}/{condition}"
        if not g.attrs.get("complete", False):
            left = int((~_read_robust(g["done"], False).astype(bool)).sum())
            raise StoreError(
                f"{what} in {self.path!r} are incomplete ({left} of "
                f"{g.attrs.get('n_chunks')} chunks missing): the extraction was interrupted. Resume it with "
                f"`crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
            )
        with self.reading(g.path):
            if "x" not in g:
                raise StoreError(f"{what} in {self.path!r} lack their array's metadata ({g.path}/x/zarr.json is "
                                 f"missing). To repair: {repair_hint(self.path, g.path)}")
            x = g["x"]
        problem = shape_problem(x, int(g.attrs.get("n_chunks", 0)), g.attrs.get("n_rows"))
        if problem:
            raise StoreError(f"{what} in {self.path!r}: {problem}. To repair: "
                             f"{repair_hint(self.path, x.path, decoded=True)}")
        # A complete array has a file for every chunk (also in stores older than the commit record), each
        # of its committed size: one stat a chunk, against the sizes ``finalize`` copied from the commit
        # record into the attributes read above (reading the record itself is a file a chunk). A chunk
        # re-encoded to the same size with other values is left to `crs store verify`, which compares each
        # chunk's CRC-32 (here it would add about a third to the read's time).
        sizes = g.attrs.get("chunk_bytes")
        if sizes is None and "commit" in g:  # completed before the sizes were copied
            sizes = self.checked_read(g["commit"], f"the commit record of {what}")[: len(chunk_keys(x)), 0]
        self.committed(x, None if sizes is None else [[int(b)] for b in sizes], what)
        return self.checked_read(x, what, listed=True)

    def prediction_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        """The attributes of a stored prediction array without reading its values: KeyError where none is
        stored, StoreError (naming the file and the repair) where its metadata is damaged."""
        key = f"datasets/{dataset}/predictions/{encoder}/{condition_key(condition)}"
        return dict(self._node(key).attrs)

    def embedding_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        return dict(self._embedding_group(dataset, encoder, condition).attrs)

    def _embedding_group(self, dataset: str, encoder: str, condition: str) -> zarr.Group:
        key = f"datasets/{dataset}/embeddings/{encoder}/{condition_key(condition)}"
        try:
            return self._node(key)  # one metadata read; the friendly errors below only when it is not there
        except KeyError:
            pass
        self.dataset(dataset)  # raises when the dataset is missing or not fully written
        raise StoreError(
            f"no embeddings for encoder {encoder!r}, dataset {dataset!r}, condition {condition!r} in "
            f"{self.path!r}; run `crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
        )

    # ------------------------------------------------------------- predictions
    @_writes
    def write_predictions(
        self, dataset: str, encoder: str, condition: str, probs: np.ndarray, attrs: dict[str, Any]
    ) -> None:
        """Test probabilities [seed, fraction, image, class] of the chosen probes (overwrites)."""
        base = require_group(require_group(self._datasets()[dataset], "predictions"), encoder)
        key = condition_key(condition)
        probs = np.asarray(probs, dtype=np.float32)
        spec = dict(shape=probs.shape, dtype=np.float32, chunks=prediction_chunks(probs.shape), fill_value=0.0)
        arr = create_arrays(base, {key: spec}, overwrite=True)[1][key]
        arr[...] = probs
        commit = [commit_record(self, arr, c, chunk_values(arr, probs, c)) for c in np.ndindex(*arr.cdata_shape)]
        # attrs last: an array with its 'condition' attribute was written whole
        set_attrs(arr, {**attrs, "condition": condition, "commit": commit, "written": now()})

    def read_predictions(self, dataset: str, encoder: str, condition: str) -> tuple[np.ndarray, dict[str, Any]]:
        key = condition_key(condition)
        where = f"datasets/{dataset}/predictions/{encoder}/{key}"
        what = f"test probabilities {encoder}/{dataset}/{condition}"
        with self.reading(where):
            try:  # one lookup by path: walking the groups cost ~15 metadata reads per array (score_bench part 6)
                arr = self.root[where]
            except KeyError:
                arr = None
            if not isinstance(arr, zarr.Array):
                raise StoreError(
                    f"no {what} in {self.path!r}; run `crs probe --encoder {encoder} --dataset {dataset}`"
                )
            attrs = dict(arr.attrs)
        if "condition" not in attrs:
            raise StoreError(f"{what} in {self.path!r} were not written whole (the run that wrote them was "
                             f"interrupted). To repair: {repair_hint(self.path, where)}")
        values = self.checked_read(arr, what)
        self.committed(arr, attrs.get("commit"), what, values)  # older arrays without a record: presence only
        return values, attrs


def set_attrs(node: zarr.Group | zarr.Array, values: dict[str, Any]) -> None:
    """Merge ``values`` into ``node``'s attributes in one write of its metadata file.

    zarr 3's ``node.attrs.update(d)`` is MutableMapping's: it rewrites the whole ``zarr.json`` once per
    key, so a kill between two keys leaves only the first ones written (a dataset with its task and
    classes but no row order, which a resumed run then read as complete). ``update_attributes``
    writes them all at once; every write of more than one attribute in this store goes through here."""
    node.update_attributes(dict(values))


def create_arrays(parent: zarr.Group, specs: dict[str, dict], *, overwrite: bool = False,
                  group: str | None = None) -> tuple[zarr.Group, dict[str, zarr.Array]]:
    """Create the arrays ``specs`` (name -> ``create_array`` keywords; ``CHECKED`` is added) under ``parent``, or
    under ``group``, a new group of it written just before them, writing each node's metadata file once;
    ``overwrite`` replaces what is there (chunks too). Returns (the group holding them, the arrays by name).

    zarr's ``create_array`` and ``create_group`` first check, and write where missing, the metadata of every
    group above the new node, two requests per level and node: on object storage some fifty round trips to
    create one embedding condition five levels down. ``create_hierarchy`` reads each group above once for
    all the nodes and writes them side by side, in no set order; the new group is written first, on its own
    (as create_group then create_array do), and a caller that needs more order writes what must come last
    afterwards. The arrays' metadata is built in memory by ``create_array`` itself, so the files are byte for
    byte the ones it writes; the arrays come back writing every chunk, as ``CHECKED`` asks."""
    from zarr.core.group import GroupMetadata

    memory = zarr.storage.MemoryStore()
    nodes = {name: zarr.create_array(memory, name=name, **kw, **CHECKED).metadata for name, kw in specs.items()}
    holder = parent
    if group:  # first, on its own: arrays whose group was never written would block a re-run's creating it
        holder = dict(parent.create_hierarchy({group: GroupMetadata()}, overwrite=overwrite))[group]
    made = dict(holder.create_hierarchy(nodes, overwrite=overwrite))
    return holder, {name: made[name].with_config(CHECKED["config"]) for name in specs}


def _dataset_written(g: zarr.Group) -> bool:
    """Whether a dataset group's metadata was written whole: 'written' is the last of its attributes
    (stores written key by key, before ``set_attrs``, wrote it last too)."""
    return "written" in g.attrs


def require_group(parent: zarr.Group, name: str) -> zarr.Group:
    """``parent``'s group ``name``, created if absent.

    Two writers creating the same group at once (two ``crs extract`` runs of different encoders into a
    new store both create ``datasets/<d>/embeddings``) make zarr's ``require_group`` raise
    ContainsGroupError in the slower one: the group it found is the one it asked for, so it is used.
    """
    try:
        return parent.require_group(name)
    except zarr.errors.ContainsGroupError:
        return parent[name]


def _as_strings(values) -> np.ndarray:
    """Stored strings as a fixed-width numpy unicode array (numpy's StringDType casts poorly)."""
    values = np.asarray(values).tolist()
    return np.array(values, dtype=str) if values else np.zeros(0, dtype=str)


def _read_robust(arr: zarr.Array, fill) -> np.ndarray:
    """All of a small record array, chunks that do not decode read as ``fill`` (i.e. not committed)."""
    try:
        return np.asarray(arr[...])
    except (MemoryError, OSError):
        raise
    except Exception:  # noqa: BLE001 - a damaged record chunk means "not committed": that chunk is redone
        out = np.full(arr.shape, fill, dtype=arr.dtype)
        for coords in np.ndindex(*arr.cdata_shape):
            sl = tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, arr.chunks))
            try:
                out[sl] = arr.blocks[coords]
            except (MemoryError, OSError):
                raise
            except Exception:  # noqa: BLE001
                pass
        return out


class EmbeddingArray:
    """One (dataset, encoder, condition) array being written chunk by chunk."""

    def __init__(self, group: zarr.Group, dataset: str, encoder: str, condition: str, store: Store,
                 arrays: dict[str, zarr.Array] | None = None):
        """``arrays``: x, done and commit as ``create_arrays`` just made them (else read from ``group``)."""
        self.group = group
        if arrays is not None:
            self.x, self.done, self.commit = arrays["x"], arrays["done"], arrays["commit"]
        else:
            self.x = group["x"].with_config(CHECKED["config"])  # a chunk without a file is a lost one
            self.done = group["done"]
            self.commit = group["commit"] if "commit" in group else None  # None: written before commit records
        self.store = store
        self.dataset, self.encoder, self.condition = dataset, encoder, condition

    @property
    def chunk(self) -> int:
        return int(self.x.chunks[0])

    @property
    def n_chunks(self) -> int:
        return int(self.group.attrs["n_chunks"])

    @property
    def complete(self) -> bool:
        return bool(self.group.attrs.get("complete", False))

    def pending(self) -> np.ndarray:
        """Indices of chunks not yet written, or written but damaged since: a done chunk whose file is
        missing or not of its committed size (older arrays: whose file is missing). What `crs extract`
        re-does; a full decode of every chunk is ``crs store verify``'s job."""
        if self.n_chunks == 0:
            return np.zeros(0, dtype=np.int64)
        done = _read_robust(self.done, False).astype(bool)[: self.n_chunks]
        if done.any():
            present = self.store.files(self.x.path)
            sizes = np.array([present.get(k, -1) for k in chunk_keys(self.x)], dtype=np.int64)
            done &= sizes >= 0
            if self.commit is not None:
                done &= sizes == _read_robust(self.commit, 0)[: self.n_chunks, 0].astype(np.int64)
        return np.flatnonzero(~done)

    def chunk_rows(self, j: int) -> slice:
        return slice(j * self.chunk, min((j + 1) * self.chunk, self.x.shape[0]))

    @_writes
    def write_chunk(self, j: int, values: np.ndarray) -> None:
        sl = self.chunk_rows(j)
        values = np.asarray(values)
        if values.shape != (sl.stop - sl.start, self.x.shape[1]):
            raise ValueError(f"chunk {j} needs shape {(sl.stop - sl.start, self.x.shape[1])}, got {values.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            cast = values.astype(self.x.dtype)
        if not np.all(np.isfinite(cast)):
            raise StoreError(
                f"{self.encoder} gave non-finite embeddings for {self.dataset}/{self.condition} chunk {j} "
                f"once cast to {self.x.dtype} (largest magnitude {np.nanmax(np.abs(values)):.3g}); "
                "pass --dtype float32 if the encoder's outputs exceed float16's range"
            )
        self.x[sl] = cast
        if self.commit is not None:  # the commit record, then the flag: both only after the data is written
            self.commit[j] = np.array(commit_record(self.store, self.x, (j, 0), cast), dtype=np.uint64)
        self.done[j] = True

    @_writes
    def finalize(self) -> bool:
        """Mark complete when every chunk is written (a damaged chunk found since: not complete any more);
        returns whether it is."""
        if len(self.pending()) == 0:
            sizes = None if self.commit is None else \
                [int(b) for b in _read_robust(self.commit, 0)[: self.n_chunks, 0]]
            if not self.complete:  # the time it became complete, not of every later run that found it so
                set_attrs(self.group, {"complete": True, "completed": now(), "chunk_bytes": sizes})
            elif self.group.attrs.get("chunk_bytes") != sizes:  # a chunk was written again since
                self.group.attrs["chunk_bytes"] = sizes
            return True
        if self.complete:
            self.group.attrs["complete"] = False
        return False
