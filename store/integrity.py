"""`crs store verify`: check a whole store against what was committed, and reset what is damaged.

Checked: every ``zarr.json`` parses as Zarr v3 metadata; every chunk of the dataset arrays,
the failures table and the predictions is present (every chunk is stored) and decodes (zstd
checks each chunk's content checksum); every committed chunk of an embedding array is present,
of its committed size, decodes, and its values have the committed CRC-32; every chunk of a
prediction array is of its committed size and its values have the committed CRC-32 (the array's
``commit`` attribute).

``repair=True`` makes each damaged part recomputable by the command named in its finding:
an embedding chunk's commit record is reset (``crs extract`` re-does exactly it); a damaged
dataset array is removed (``crs extract`` rewrites it); a damaged failures table is removed
and the dataset's chunks reset (the failures are only found again by decoding every image);
damaged predictions are removed (``crs probe``); a damaged metadata file of a group without
attributes is rewritten, of any other node the node is removed. What remains is returned:
findings that still need that command, or that no repair can mend (the root's metadata).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import fsspec
import numpy as np
import zarr

from crs.errors import writing_to
from crs.store.commits import chunk_keys, chunk_values, record_problem, shape_problem
from crs.store.errors import StoreError
from crs.store.layout import key_condition, plain_group
from crs.store.location import url_storage_options
from crs.store.nodes import read_robust
from crs.store.repair import extract_command, next_step, repair_hint
from crs.store.zarr_store import Store

EMPTY_GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}


@dataclass(frozen=True)
class Finding:
    """One thing wrong in a store: the node (store key), the chunk key (None: the node itself), what, and
    the command that repairs it."""

    array: str
    chunk: str | None
    problem: str
    repair: str


def verify(path: str, *, repair: bool = False, storage_options: dict | None = None) -> list[Finding]:
    """Every problem of the store at ``path``; with ``repair``, reset what is damaged and return what remains."""
    try:
        store = Store(path, mode="r", storage_options=storage_options)  # a repair never creates a store
        if repair:
            store = Store(path, mode="a", storage_options=storage_options)
    except StoreError:
        if _root_damaged(str(path), storage_options):
            return [Finding("", "zarr.json", "the store's root metadata is damaged",
                            "no repair keeps this store's identity: extract into a new store (--store NEW)")]
        raise
    with writing_to(store.path):  # a repair's writes: a full disk is named by the store's path
        links = _links(store, repair)
        if links and repair:
            store.root = zarr_reopen(store)
            links = []  # what the removed links leave missing is found below, with its repair
        return links + _verify(store, repair)


def _links(store: Store, repair: bool) -> list[Finding]:
    """Every file or folder of a local store that is a symbolic link; with ``repair``, each link is removed.

    A store holds its own files: a link's target can change or vanish under it, and a writer writes
    through it into a file that is not the store's (another store's chunk, a dataset's file)."""
    root = store._local_root()
    if root is None:
        return []
    out = []
    for folder, dirs, files in os.walk(root):  # a linked folder is listed, never entered
        for name in sorted(dirs + files):
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            node, chunk = _node_and_file(rel)
            target = os.readlink(full)
            if repair:
                os.unlink(full)
                continue
            out.append(Finding(node, chunk, f"a symbolic link (to {target}), not a file of the store's own",
                               f"run `crs store verify --repair {store.path}` (it removes the link and resets "
                               f"what it stood for), then {next_step(store.path, node)}"))
    return out


def _node_and_file(rel: str) -> tuple[str, str | None]:
    """(node, file key under it) of a store-relative path: a chunk (``.../c/...``), a ``zarr.json``, or a
    folder (file None)."""
    parts = rel.split("/")
    if "c" in parts:
        i = parts.index("c")
        return "/".join(parts[:i]), "/".join(parts[i:])
    if parts[-1] == "zarr.json":
        return "/".join(parts[:-1]), "zarr.json"
    return rel, None


def _verify(store: Store, repair: bool) -> list[Finding]:
    findings = _metadata(store, repair)
    if any(f.array == "datasets" and f.chunk == "zarr.json" and not repair for f in findings):
        return findings  # nothing below can be listed until that group's metadata is rewritten
    damaged = [f.array for f in findings if f.chunk == "zarr.json"]  # what cannot be opened (only without repair)

    def readable(node: str) -> bool:
        return not any(node == b or node.startswith(b + "/") for b in damaged)

    for d in _children(store, "datasets"):
        if readable(f"datasets/{d}"):
            findings += _dataset(store, d, repair, readable, findings)
    return findings


def _root_damaged(path: str, storage_options: dict | None) -> bool:
    """Whether ``path`` has a root ``zarr.json`` that is not Zarr v3 metadata (a damaged store, not no store)."""
    fs, root = fsspec.core.url_to_fs(path, **url_storage_options(path, storage_options))
    try:
        meta = json.loads(fs.cat_file(f"{root.rstrip('/')}/zarr.json"))
    except FileNotFoundError:
        return False
    except (ValueError, UnicodeDecodeError):
        return True
    return not (isinstance(meta, dict) and meta.get("zarr_format") == 3 and meta.get("node_type") == "group")


def format_findings(findings: list[Finding]) -> str:
    """The findings, one block each, for the terminal (or a line saying there are none)."""
    if not findings:
        return "store verified: every committed chunk and metadata file is intact"
    lines = [f"{len(findings)} problem{'s' if len(findings) != 1 else ''} found:"]
    for f in findings:
        where = f.array or "(store root)"
        if f.chunk:
            where += f" chunk {f.chunk}" if f.chunk != "zarr.json" else "/zarr.json"
        lines.append(f"- {where}: {f.problem}\n  repair: {f.repair}")
    return "\n".join(lines)


# ------------------------------------------------------------------ metadata
def _metadata(store: Store, repair: bool) -> list[Finding]:
    out, removed = [], []
    for meta in store.damaged_metadata(""):
        node = meta.rsplit("/", 1)[0] if "/" in meta else ""
        if any(node.startswith(r + "/") for r in removed):
            continue  # went with a node removed above
        if node == "":
            out.append(Finding("", "zarr.json", "the store's root metadata is damaged",
                               "no repair keeps this store's identity: extract into a new store (--store NEW)"))
            continue
        hint = repair_hint(store.path, node, decoded=True)
        if not repair:
            out.append(Finding(node, "zarr.json", "damaged metadata (not Zarr v3 JSON)", hint))
            continue
        parts = node.split("/")
        if plain_group(node):  # its metadata is written anew as it was
            _write_json(store, meta, EMPTY_GROUP)
            continue
        if len(parts) >= 5 and parts[2] == "embeddings":
            node = "/".join(parts[:5])  # x, done or commit: the condition's whole array goes
        elif len(parts) >= 3 and parts[2] == "failures":
            node = "/".join(parts[:3])
        then = next_step(store.path, node)  # before the removal: it reads what the node's children record
        store.remove(node)
        removed.append(node)
        if len(parts) >= 3 and parts[2] == "failures":
            _reset_dataset_chunks(store, parts[1])
        out.append(Finding(node, None, "removed (its metadata was damaged)", then))
    if repair:
        store.root = zarr_reopen(store)
    return out


def zarr_reopen(store: Store):
    """The root group opened again (after files changed under it)."""
    kwargs = {"storage_options": store.storage_options} if store.storage_options else {}
    path = store.path[len("file://"):] if store.path.startswith("file://") else store.path
    return zarr.open_group(store=path, mode="r" if store.read_only else "a", **kwargs)


def _write_json(store: Store, key: str, obj: dict) -> None:
    data = json.dumps(obj, indent=2).encode()
    root = store._local_root()
    if root is not None:
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
    else:
        fs, r = store.filesystem()
        fs.pipe_file(f"{r}/{key}", data)


# ------------------------------------------------------------------ datasets
def _dataset(store: Store, d: str, repair: bool, readable, done_before=()) -> list[Finding]:
    g = store.root["datasets"][d]
    out = []
    for key in Store.DATASET_ARRAYS:
        node = f"datasets/{d}/{key}"
        if not readable(node):
            continue
        if key not in g:
            if not any(f.array == node for f in done_before):
                out.append(Finding(node, None, "missing (the array is gone)", next_step(store.path, node)))
            continue
        found = _whole_array(store, g[key], node)
        if found and repair:
            store.remove(node)
            found = [Finding(node, None, "removed (it was damaged)", next_step(store.path, node))]
        out += found
    node = f"datasets/{d}/failures"
    if readable(node) and all(readable(f"{node}/{k}") for k in Store.FAILURE_COLUMNS) and "failures" in g:
        fg = g["failures"]
        found = [f for k in Store.FAILURE_COLUMNS
                 for f in (_whole_array(store, fg[k], f"{node}/{k}") if k in fg
                           else [Finding(f"{node}/{k}", None, "missing column", repair_hint(store.path, node))])]
        if not found and (fg.attrs.get("writing") or len({fg[k].shape[0] for k in Store.FAILURE_COLUMNS}) > 1):
            found = [Finding(node, None, "torn (its rewrite was interrupted)", repair_hint(store.path, node))]
        if found and repair:
            store.remove(node)
            _reset_dataset_chunks(store, d)
            found = [Finding(node, None, "removed (it was damaged); every chunk of the dataset was reset",
                             next_step(store.path, f"datasets/{d}/embeddings"))]
        out += found
    for enc, cond, node in _leaves(store, g, d, "embeddings", readable):
        if all(readable(f"{node}/{a}") for a in ("x", "done", "commit")):
            out += _embedding(store, g["embeddings"][enc][cond], d, enc, cond, repair)
    for enc, cond, node in _leaves(store, g, d, "predictions", readable):
        if not readable(node):
            continue
        arr = g["predictions"][enc][cond]
        found = _whole_array(store, arr, node)
        if "condition" not in arr.attrs:
            found.append(Finding(node, None, "not written whole (its writer was interrupted)",
                                 repair_hint(store.path, node)))
        elif not found:
            found = _against_record(store, arr, node, arr.attrs["commit"])
        if found and repair:
            store.remove(node)
            found = [Finding(node, None, "removed (it was damaged)", next_step(store.path, node))]
        out += found
    return out


def _leaves(store: Store, g, d: str, kind: str, readable):
    """(encoder, condition key, store key) of each per-(encoder, condition) node under dataset ``d``'s
    ``kind`` group (embeddings or predictions) whose parents' metadata reads."""
    base = f"datasets/{d}/{kind}"
    if not readable(base) or kind not in g:
        return
    for enc in _children(store, base):
        if readable(f"{base}/{enc}"):
            for cond in _children(store, f"{base}/{enc}"):
                yield enc, cond, f"{base}/{enc}/{cond}"


def _children(store: Store, key: str) -> list[str]:
    """Names of the nodes right under store key ``key`` (those with a metadata file, damaged or not)."""
    return sorted({rel.split("/")[0] for rel in store.files(key) if rel.count("/") == 1
                   and rel.endswith("/zarr.json")})


def _whole_array(store: Store, arr, node: str) -> list[Finding]:
    """An array written at once: every chunk present (where every chunk is stored) and decoding."""
    hint = repair_hint(store.path, node, decoded=True)
    out = [Finding(node, k, "missing (its file was deleted)", hint) for k in store.missing_chunks(arr)]
    missing = {f.chunk for f in out}
    out += [Finding(node, k, "does not decode (checksum mismatch, truncated or garbled)", hint)
            for k in store.bad_chunks(arr) if k not in missing]
    return out


def _against_record(store: Store, arr, node: str, records) -> list[Finding]:
    """An array whose chunks all decode, each chunk against its commit record (bytes stored, CRC-32 of its
    values)."""
    values = np.asarray(arr[...])
    sizes = store.chunk_sizes(arr.path, chunk_keys(arr))
    hint = repair_hint(store.path, node, decoded=True)
    out = []
    for record, coords, key, size in zip(records, np.ndindex(*arr.cdata_shape), chunk_keys(arr), sizes):
        problem = record_problem(size, record, chunk_values(arr, values, coords))
        if problem:
            out.append(Finding(node, key, problem, hint))
    return out


def _embedding(store: Store, g, d: str, enc: str, cond: str, repair: bool) -> list[Finding]:
    node = f"datasets/{d}/embeddings/{enc}/{cond}"
    extract = f"run {extract_command(store.path, d, [enc])} (condition {key_condition(cond)})"
    if any(a not in g for a in ("x", "done", "commit")) or "n_chunks" not in g.attrs:
        return [Finding(node, None, "created but never written (its creation was interrupted)", extract)]
    x, n = g["x"], int(g.attrs["n_chunks"])
    hint = repair_hint(store.path, f"{node}/x", decoded=True)
    problem = shape_problem(x, n, g.attrs["n_rows"])
    if problem:  # its chunks cannot be told apart any more: the condition's array goes, extract makes it anew
        if repair:
            store.remove(node)
            return [Finding(node, None, f"removed ({problem})", next_step(store.path, node))]
        return [Finding(f"{node}/x", "zarr.json", problem, hint)]
    keys = chunk_keys(x)[:n]
    records = {"done": g["done"], "commit": g["commit"]}
    out = []
    for name, arr in records.items():  # a record chunk that does not decode reads as "not committed"
        for k in store.bad_chunks(arr):
            out.append(Finding(f"{node}/{name}", k, "commit record does not decode", hint))
            if repair:
                store.remove(f"{node}/{name}/{k}")
    done = read_robust(g["done"], False).astype(bool)[:n]
    commit = read_robust(g["commit"], 0)[:n]
    present = store.files(x.path)
    damaged = []
    for j in np.flatnonzero(done):
        problem = _chunk_problem(x, int(j), present.get(keys[j]), commit[j])
        if problem:
            out.append(Finding(f"{node}/x", keys[j], problem, hint))
            damaged.append(int(j))
    if repair:
        for j in damaged:  # the record first, then the flag: reset, the chunk is pending for `crs extract`
            g["commit"][j] = np.zeros(2, dtype=np.uint64)
            g["done"][j] = False
        if out:
            g.attrs["complete"] = False
        out = []  # what was found is reset; what remains is the chunks `crs extract` has to write
        done = read_robust(g["done"], False).astype(bool)[:n]
    left = n - int(done.sum())
    if left:
        out.append(Finding(f"{node}/x", None, f"{left} of {n} chunks not written (extraction incomplete, "
                           "or reset by a repair)", extract))
    return out


def _reset_dataset_chunks(store: Store, d: str) -> None:
    """Every embedding chunk of dataset ``d`` uncommitted, so that `crs extract` decodes every image again."""
    root = zarr_reopen(store)
    g = root["datasets"][d]
    if "embeddings" not in g:
        return
    for _, eg in g["embeddings"].groups():
        for _, cg in eg.groups():
            if "done" not in cg:
                continue
            if "commit" in cg:
                cg["commit"][...] = 0
            cg["done"][...] = False
            cg.attrs["complete"] = False


def _chunk_problem(x, j: int, size: int | None, record) -> str | None:
    """What is wrong with committed chunk ``j`` of ``x`` (None: intact)."""
    problem = record_problem(size, record)
    if problem:
        return problem
    try:
        values = np.asarray(x.blocks[(j,) + (0,) * (x.ndim - 1)])
    except (MemoryError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder's complaint about these bytes is damage
        return f"does not decode ({exc})"
    return record_problem(size, record, values)
