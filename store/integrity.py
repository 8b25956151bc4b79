"""`crs store verify`: check a whole store against what was committed, and reset what is damaged.

Checked: every ``zarr.json`` parses as Zarr v3 metadata (a damaged root hides nothing: the arrays below are
checked all the same); no file or folder is a symbolic link; every chunk of the dataset arrays, the failures
table and the predictions is present (every chunk is stored) and decodes (zstd checks each chunk's content
checksum); the dataset arrays and the predictions are of their committed sizes and their values have the
committed CRC-32 (each array's ``commit`` attribute); every array the last probe run of an encoder committed
(``committed``) is there; every committed chunk of an embedding array is present, of its committed size,
decodes, and its values have the committed CRC-32.

``repair=True`` makes each damaged part recomputable by the command named in its finding, and says what it
changed (``changed``): a link is removed; an embedding chunk's commit record is reset (``crs extract`` re-does
exactly it), unless the chunk was only re-encoded (its values are those committed: it is kept, its record
names its new size; so is a re-encoded chunk of a dataset or prediction array); a damaged dataset array is
removed (``crs extract`` rewrites it); a damaged failures table is removed and the dataset's chunks reset (the
failures are only found again by decoding every image); damaged predictions are removed (``crs probe``); a
damaged metadata file of a group without attributes is rewritten, of any other node the node is removed; a
damaged root metadata file is written anew with a new identity. What remains is returned: findings that
still need a command.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from dataclasses import dataclass

import fsspec
import numpy as np

from crs import __version__ as TOOL_VERSION
from crs.foundations.errors import writing_to
from crs.foundations.provenance import now
from crs.store.commits import chunk_keys, chunk_values, record_problem, shape_problem
from crs.store.datasets import DATASET_ARRAYS
from crs.store.errors import StoreError
from crs.store.failures import FAILURE_COLUMNS
from crs.store.layout import SCHEMA_VERSION, condition_key, key_condition, plain_group
from crs.store.location import root_problem, url_storage_options
from crs.store.nodes import read_robust, set_attrs
from crs.store.predictions import COMMITTED
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


class Repairs:
    """A repair under way (``verify(repair=True)``): what it changed, one line each, for the user."""

    def __init__(self, changed: list[str]):
        self.changed = changed

    def did(self, text: str) -> None:
        self.changed.append(text)


def verify(path: str, *, repair: bool = False, storage_options: dict | None = None,
           changed: list[str] | None = None) -> list[Finding]:
    """Every problem of the store at ``path``; with ``repair``, reset what is damaged and return what remains,
    saying in ``changed`` (where given) what the repair changed, one line each."""
    mend = Repairs([] if changed is None else changed) if repair else None
    root = root_problem(str(path), storage_options)
    if root and mend:
        _write_root(str(path), storage_options)
        mend.did(f"wrote the store's root metadata (zarr.json, {root}) anew, with a new store identity")
    try:
        store = Store(path, mode="r", storage_options=storage_options)  # a repair never creates a store
        if repair:
            store = Store(path, mode="a", storage_options=storage_options)
    except StoreError:
        if not root:
            raise
        store = Store.below_damaged_root(path, storage_options)  # check the arrays below all the same
    with writing_to(store.path):  # a repair's writes: a full disk is named by the store's path
        links = _links(store, mend)
        if links and mend:
            store.location.reopen()
            links = []  # what the removed links leave missing is found below, with its repair
        found = links + _verify(store, mend)
    if root and not repair:
        found.insert(0, Finding("", "zarr.json", f"the store's root metadata is {root}",
                                f"run `crs store verify --repair {store.path}` (it writes it anew, with a new "
                                "store identity; the arrays below are kept)"))
    return found


def _links(store: Store, repair: Repairs | None) -> list[Finding]:
    """Every file or folder of a local store that is a symbolic link; with ``repair``, each link is removed.

    A store holds its own files: a link's target can change or vanish under it, and a writer writes
    through it into a file that is not the store's (another store's chunk, a dataset's file)."""
    root = store.files.local_root()
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
            finding = Finding(node, chunk, f"a symbolic link (to {target}), not a file of the store's own",
                              f"run `crs store verify --repair {store.path}` (it removes the link and resets "
                              f"what it stood for), then {next_step(store.path, node)}")
            if repair:
                os.unlink(full)
                repair.did(f"removed {rel}, a symbolic link (to {target}): a store reads only its own files")
            out.append(finding)
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


def _verify(store: Store, repair: Repairs | None) -> list[Finding]:
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


def _write_root(path: str, storage_options: dict | None) -> None:
    """The root metadata of a CRS store written anew (the old one is damaged): a new identity, since the old
    one cannot be read."""
    fs, root = fsspec.core.url_to_fs(path, **url_storage_options(path, storage_options))
    attrs = {"crs_store": {"schema_version": SCHEMA_VERSION, "created": now(), "tool_version": TOOL_VERSION,
                           "store_id": uuid.uuid4().hex, "root_rewritten": True}}
    fs.pipe_file(f"{root.rstrip('/')}/zarr.json", json.dumps({**EMPTY_GROUP, "attributes": attrs}, indent=2).encode())


def format_findings(findings: list[Finding], changed: list[str] = ()) -> str:
    """What a repair changed (``changed``), then the findings, one block each, for the terminal (or a line
    saying there are none)."""
    lines = [f"repaired: {c}" for c in changed]
    if not findings:
        return "\n".join(lines + ["store verified: every committed chunk and metadata file is intact"])
    lines.append(f"{len(findings)} problem{'s' if len(findings) != 1 else ''} found:")
    for f in findings:
        where = f.array or "(store root)"
        if f.chunk:
            where += f" chunk {f.chunk}" if f.chunk != "zarr.json" else "/zarr.json"
        lines.append(f"- {where}: {f.problem}\n  repair: {f.repair}")
    return "\n".join(lines)


# ------------------------------------------------------------------ metadata
def _metadata(store: Store, repair: Repairs | None) -> list[Finding]:
    out, removed = [], []
    for meta in store.checks.damaged_metadata(""):
        node = meta.rsplit("/", 1)[0] if "/" in meta else ""
        if any(node.startswith(r + "/") for r in removed):
            continue  # went with a node removed above
        if node == "":
            continue  # ``verify`` says so (and a repair writes it anew)
        hint = repair_hint(store.path, node, decoded=True)
        if not repair:
            out.append(Finding(node, "zarr.json", "damaged metadata (not Zarr v3 JSON)", hint))
            continue
        parts = node.split("/")
        if plain_group(node):  # its metadata is written anew as it was
            _write_json(store, meta, EMPTY_GROUP)
            repair.did(f"wrote {meta} anew (the group's metadata, which holds nothing else)")
            continue
        if len(parts) >= 5 and parts[2] == "embeddings":
            node = "/".join(parts[:5])  # x, done or commit: the condition's whole array goes
        elif len(parts) >= 3 and parts[2] == "failures":
            node = "/".join(parts[:3])
        out += _removed(store, node, repair, "its metadata was damaged")
        removed.append(node)
        if len(parts) >= 3 and parts[2] == "failures":
            _reset_dataset_chunks(store, parts[1])
            repair.did(f"reset every embedding chunk of {parts[1]} (its failures table went)")
    if repair:
        store.location.reopen()
    return out


def _write_json(store: Store, key: str, obj: dict) -> None:
    data = json.dumps(obj, indent=2).encode()
    root = store.files.local_root()
    if root is not None:
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
    else:
        fs, r = store.files.filesystem()
        fs.pipe_file(f"{r}/{key}", data)


# ------------------------------------------------------------------ datasets
def _dataset(store: Store, d: str, repair: Repairs | None, readable, done_before=()) -> list[Finding]:
    g = store.root["datasets"][d]
    out = _table_arrays(store, g, d, repair, readable, done_before) + _failures(store, g, d, repair, readable)
    for enc, cond, node in _leaves(store, g, d, "embeddings", readable):
        if all(readable(f"{node}/{a}") for a in ("x", "done", "commit")):
            out += _embedding(store, g["embeddings"][enc][cond], d, enc, cond, repair)
    for enc, cond, node in _leaves(store, g, d, "predictions", readable):
        if readable(node):
            out += _prediction(store, g["predictions"][enc][cond], node, repair)
    return out + _committed_predictions(store, g, d, readable)


def _removed(store: Store, node: str, repair: Repairs, why: str = "it was damaged") -> list[Finding]:
    """Remove ``node`` (a repair), saying so; the finding left names the command that writes it anew."""
    then = next_step(store.path, node)  # before the removal: it reads what the node's children record
    store.files.remove(node)
    repair.did(f"removed {node} ({why})")
    return [Finding(node, None, f"removed ({why})", then)]


def _table_arrays(store: Store, g, d: str, repair: Repairs | None, readable, done_before) -> list[Finding]:
    """The dataset's own arrays (image ids, labels, splits, groups), each against its commit record."""
    out = []
    for key in DATASET_ARRAYS:
        node = f"datasets/{d}/{key}"
        if not readable(node):
            continue
        if key not in g:
            if not any(f.array == node for f in done_before):
                out.append(Finding(node, None, "missing (the array is gone)", next_step(store.path, node)))
            continue
        found = _whole_array(store, g[key], node)
        if not found:
            found = _against_record(store, g[key], node, g[key].attrs.get("commit"), repair)
        out += _removed(store, node, repair) if found and repair else found
    return out


def _failures(store: Store, g, d: str, repair: Repairs | None, readable) -> list[Finding]:
    node = f"datasets/{d}/failures"
    if not (readable(node) and all(readable(f"{node}/{k}") for k in FAILURE_COLUMNS) and "failures" in g):
        return []
    fg = g["failures"]
    found = [f for k in FAILURE_COLUMNS
             for f in (_whole_array(store, fg[k], f"{node}/{k}") if k in fg
                       else [Finding(f"{node}/{k}", None, "missing column", repair_hint(store.path, node))])]
    if not found and (fg.attrs.get("writing") or len({fg[k].shape[0] for k in FAILURE_COLUMNS}) > 1):
        found = [Finding(node, None, "torn (its rewrite was interrupted)", repair_hint(store.path, node))]
    if found and repair:
        store.files.remove(node)
        _reset_dataset_chunks(store, d)
        repair.did(f"removed {node} (it was damaged) and reset every embedding chunk of {d}")
        found = [Finding(node, None, "removed (it was damaged); every chunk of the dataset was reset",
                         next_step(store.path, f"datasets/{d}/embeddings"))]
    return found


def _prediction(store: Store, arr, node: str, repair: Repairs | None) -> list[Finding]:
    found = _whole_array(store, arr, node)
    if "condition" not in arr.attrs:
        found.append(Finding(node, None, "not written whole (its writer was interrupted)",
                             repair_hint(store.path, node)))
    elif not found:
        found = _against_record(store, arr, node, arr.attrs["commit"], repair)
    return _removed(store, node, repair) if found and repair else found


def _committed_predictions(store: Store, g, d: str, readable) -> list[Finding]:
    """Each prediction array that the last probe run of an encoder committed (``Store.commit_predictions``)
    and that is gone: a repair cannot make it, the probe that wrote it can."""
    base = f"datasets/{d}/predictions"
    out = []
    for enc in _children(store, base) if readable(base) and "predictions" in g else []:
        if not readable(f"{base}/{enc}"):
            continue
        record = g["predictions"][enc].attrs.get(COMMITTED) or {}
        held = set(_children(store, f"{base}/{enc}"))
        for cond in record.get("conditions", []):
            node = f"{base}/{enc}/{condition_key(cond)}"
            if condition_key(cond) not in held:
                out.append(Finding(node, None, f"missing: its probe run ({record.get('generation')}) committed it "
                                   "and its array is gone", next_step(store.path, node)))
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
    return sorted({rel.split("/")[0] for rel in store.files.listing(key) if rel.count("/") == 1
                   and rel.endswith("/zarr.json")})


def _whole_array(store: Store, arr, node: str) -> list[Finding]:
    """An array written at once: every chunk present (where every chunk is stored) and decoding."""
    missing = store.checks.missing_chunks(arr)
    bad = [k for k in store.checks.bad_chunks(arr) if k not in missing]
    if not missing and not bad:
        return []
    hint = repair_hint(store.path, node, decoded=True)  # only where needed: it reads the writers' attributes
    return ([Finding(node, k, "missing (its file was deleted)", hint) for k in missing]
            + [Finding(node, k, "does not decode (checksum mismatch, truncated or garbled)", hint) for k in bad])


def _against_record(store: Store, arr, node: str, records, repair: Repairs | None = None) -> list[Finding]:
    """An array whose chunks all decode, each chunk against its commit record (bytes stored, CRC-32 of its
    values). A chunk whose file is of another size but whose values are those committed (re-encoded) is
    kept: with ``repair`` its record names its new size (when nothing else is wrong with the array)."""
    if records is None:
        return [Finding(node, None, "no commit record (its writer was stopped, or it was written by other means)",
                        repair_hint(store.path, node, decoded=True))]
    values = np.asarray(arr[...])
    sizes = store.files.chunk_sizes(arr.path, chunk_keys(arr))
    found, kept = [], []
    for i, (record, coords, key, size) in enumerate(zip(records, np.ndindex(*arr.cdata_shape), chunk_keys(arr),
                                                        sizes)):
        part = chunk_values(arr, values, coords)
        problem = record_problem(size, record, part)
        if problem and size is not None and record_problem(int(record[0]), record, part) is None:
            kept.append((i, key, size))
        elif problem:
            found.append((key, problem))
    if kept and repair and not found:
        new = [list(map(int, r)) for r in records]
        for i, key, size in kept:
            new[i][0] = size
            repair.did(f"kept chunk {key} of {node}: re-encoded, its values are as committed; its commit record "
                       f"now names its new size ({size} bytes)")
        set_attrs(arr, {"commit": new})
        kept = []
    hint = repair_hint(store.path, node, decoded=True) if found else ""
    return [Finding(node, key, problem, hint) for key, problem in found] + [
        Finding(node, key, f"re-encoded: its values are as committed, but its file is {size} bytes, not the "
                f"{int(records[i][0])} committed (reads refuse it by its size)",
                f"run `crs store verify --repair {store.path}` (it keeps the chunk and records its new size)")
        for i, key, size in kept]


def _embedding(store: Store, g, d: str, enc: str, cond: str, repair: Repairs | None) -> list[Finding]:
    node = f"datasets/{d}/embeddings/{enc}/{cond}"

    @functools.cache
    def extract() -> str:  # the repairs, made only where needed (once): each reads the writers' attributes
        return f"run {extract_command(store.path, d, [enc])} (condition {key_condition(cond)})"

    @functools.cache
    def hint() -> str:
        return repair_hint(store.path, f"{node}/x", decoded=True)

    if any(a not in g for a in ("x", "done", "commit")) or "n_chunks" not in g.attrs:
        return [Finding(node, None, "created but never written (its creation was interrupted)", extract())]
    x, n = g["x"], int(g.attrs["n_chunks"])
    problem = shape_problem(x, n, g.attrs["n_rows"])
    if problem:  # its chunks cannot be told apart any more: the condition's array goes, extract makes it anew
        if repair:
            return _removed(store, node, repair, problem)
        return [Finding(f"{node}/x", "zarr.json", problem, hint())]
    out = []
    for name in ("done", "commit"):  # a record chunk that does not decode reads as "not committed"
        for k in store.checks.bad_chunks(g[name]):
            out.append(Finding(f"{node}/{name}", k, "commit record does not decode", hint()))
            if repair:
                store.files.remove(f"{node}/{name}/{k}")
                repair.did(f"removed {node}/{name}/{k} (a commit record that does not decode): chunk {k} is redone")
    damaged, kept = _committed_chunks(store, x, g, n)
    out += [Finding(f"{node}/x", key, problem, hint()) for _, key, problem in damaged]
    out += [Finding(f"{node}/x", key, f"re-encoded: its values are as committed, but its file is {size} bytes, not "
                    f"the {committed} committed (reads refuse it by its size)",
                    f"run `crs store verify --repair {store.path}` (it keeps the chunk and records its new size)")
            for _, key, size, committed in kept]
    if repair:
        _mend_chunks(g, node, damaged, kept, repair)
        if damaged or out:
            g.attrs["complete"] = False
        out = []  # what was found is reset or kept; what remains is the chunks `crs extract` has to write
    done = read_robust(g["done"], False).astype(bool)[:n]
    left = n - int(done.sum())
    if left:
        out.append(Finding(f"{node}/x", None, f"{left} of {n} chunks not written (extraction incomplete, "
                           "or reset by a repair)", extract()))
    elif repair and kept and not damaged and not g.attrs.get("complete"):
        sizes = [int(b) for b in read_robust(g["commit"], 0)[:n, 0]]
        set_attrs(g, {"complete": True, "chunk_bytes": sizes})
    return out


def _committed_chunks(store: Store, x, g, n: int):
    """(damaged, kept) committed chunks of embedding array ``x`` (``g``: its group, ``n`` chunks): damaged as
    (index, key, problem); kept, re-encoded chunks whose file differs from its record but whose decoded values
    are as committed (another zstd level, a copy through another writer), as (index, key, size, committed)."""
    keys = chunk_keys(x)[:n]
    done = read_robust(g["done"], False).astype(bool)[:n]
    commit = read_robust(g["commit"], 0)[:n]
    present = store.files.listing(x.path)
    damaged, kept = [], []
    for j in np.flatnonzero(done):
        size = present.get(keys[j])
        problem = _chunk_problem(x, int(j), size, commit[j])
        if problem == REENCODED:
            kept.append((int(j), keys[j], size, int(commit[j][0])))
        elif problem:
            damaged.append((int(j), keys[j], problem))
    return damaged, kept


def _mend_chunks(g, node: str, damaged, kept, repair: Repairs) -> None:
    """Reset each damaged chunk (the record first, then the flag: it is pending for `crs extract`); record the
    new size of each kept one."""
    for j, key, _ in damaged:
        g["commit"][j] = np.zeros(2, dtype=np.uint64)
        g["done"][j] = False
        repair.did(f"reset chunk {key} of {node}/x (it was damaged): `crs extract` writes it again")
    for j, key, size, _ in kept:
        g["commit"][j] = np.array([size, int(g["commit"][j][1])], dtype=np.uint64)
        repair.did(f"kept chunk {key} of {node}/x: re-encoded, its values are as committed; its commit record "
                   f"now names its new size ({size} bytes)")


def _reset_dataset_chunks(store: Store, d: str) -> None:
    """Every embedding chunk of dataset ``d`` uncommitted, so that `crs extract` decodes every image again."""
    root = store.location.opened_again()
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


REENCODED = "re-encoded"  # ``_chunk_problem``: the file differs from its record, its values do not


def _chunk_problem(x, j: int, size: int | None, record) -> str | None:
    """What is wrong with committed chunk ``j`` of ``x`` (None: intact; ``REENCODED``: its file is not of the
    committed size, but it decodes to the committed values)."""
    if size is None:
        return record_problem(size, record)
    try:
        values = np.asarray(x.blocks[(j,) + (0,) * (x.ndim - 1)])
    except (MemoryError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder's complaint about these bytes is damage
        return record_problem(size, record) or f"does not decode ({exc})"
    problem = record_problem(size, record, values)
    if problem and record_problem(int(record[0]), record, values) is None:
        return REENCODED  # of another size, yet decoded the values are those committed
    return problem
