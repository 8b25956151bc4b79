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
                                      attrs: rows ('all' | 'test'), complete, provenance
        predictions/<encoder>/<condition key>/
            p      [seed, fraction, image, class] float32 test probabilities of the chosen probes

Rows are ordered test first (then val, then train), so that chunk j of a test-only
(perturbed) array and chunk j of the clean array cover the same images, and
extraction decodes each image once for all conditions.

Writes go chunk by chunk. ``done[j]`` is set only after chunk ``j`` of ``x`` is on
disk (Zarr's local store writes each chunk atomically), so a killed run loses at most
the chunks in flight, and a re-run finishes only what is missing. ``complete`` is set
once every flag is; readers refuse incomplete arrays and say how to resume.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import zarr

from crs import __version__ as CRS_VERSION
from crs.errors import UserError
from crs.names import SPLIT_CODE

SCHEMA_VERSION = 1
DEFAULT_STORE = "./crs-store.zarr"


class StoreError(UserError):
    """A store problem the user can act on (bad path, other schema, missing or incomplete data)."""


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


def _as_json(value: Any) -> Any:
    """A value as it reads back from JSON attributes (tuples become lists)."""
    return json.loads(json.dumps(value))


def _strings(arr) -> np.ndarray:
    """A Zarr string array as a fixed-width numpy unicode array (numpy's StringDType casts poorly)."""
    values = np.asarray(arr[:]).tolist()
    return np.array(values, dtype=str) if values else np.zeros(0, dtype=str)


def store_order(split: np.ndarray) -> np.ndarray:
    """Permutation putting test rows first, then val, then train; stable within a split."""
    key = np.array([2, 1, 0], dtype=np.int8)[np.asarray(split)]  # train 2, val 1, test 0
    return np.argsort(key, kind="stable")


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
    return {"use_listings_cache": False, **(storage_options or {})}


def _open_root(path: str, mode: str, storage_options: dict | None = None) -> zarr.Group:
    if path.startswith("file://"):
        path = path[len("file://") :]  # a local path: the local store writes chunks atomically
    is_url = "://" in path
    storage_options = url_storage_options(path, storage_options)
    if not is_url:
        if os.path.isfile(path):
            raise StoreError(f"{path!r} is a file, not a CRS store; pass --store with a directory path")
        if os.path.isdir(path) and os.listdir(path) and not os.path.exists(os.path.join(path, "zarr.json")):
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
        raise StoreError(f"{path!r} cannot be opened as a CRS store: {exc}") from exc


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
        ``encoder``, the commit records of its arrays. Equal digests mean the same content, however
        the store's path is spelled."""
        h = hashlib.sha256(self.store_id.encode())
        g = self.root["datasets"][dataset]
        h.update(json.dumps(_as_json(dict(g.attrs)), sort_keys=True, default=str).encode())
        for key in ("image_id", "label", "split", "group"):
            h.update(json.dumps(np.asarray(g[key][...]).tolist()).encode())
        h.update(json.dumps(self.failures(dataset)["image_id"].tolist()).encode())
        if encoder is not None:
            for ds, enc, cond, _ in sorted(self.embeddings(dataset)):
                if enc != encoder:
                    continue
                emb = self._embedding_group(ds, enc, cond)
                h.update(cond.encode())
                h.update(np.asarray(emb["done"][:], dtype=bool).tobytes())
                h.update(json.dumps(_as_json(dict(emb.attrs)), sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    def filesystem(self):
        """(fsspec filesystem, root path in it) of an object-store URL, for files beside the Zarr
        hierarchy (locks); credentials as for the store itself."""
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.path, **url_storage_options(self.path, self.storage_options))
        return fs, root.rstrip("/")

    # ----------------------------------------------------------------- datasets
    def _datasets(self) -> zarr.Group:
        return self.root.require_group("datasets") if not self.read_only else self.root["datasets"]

    def datasets(self) -> list[str]:
        if "datasets" not in self.root:
            return []
        return sorted(self.root["datasets"].group_keys())

    def has_dataset(self, name: str) -> bool:
        return name in self.datasets()

    def write_dataset(self, table: DatasetTable) -> None:
        """Write a dataset's metadata; if present, check it is the same (splits never change)."""
        if self.has_dataset(table.name) and "task" not in self.root["datasets"][table.name].attrs:
            del self.root["datasets"][table.name]  # killed while writing it: its attrs come last
        if self.has_dataset(table.name):
            old = self.dataset(table.name)
            same = (
                np.array_equal(old.ids, table.ids)
                and np.array_equal(old.labels, table.labels)
                and np.array_equal(old.split, table.split)
            )
            if not same:
                raise StoreError(
                    f"dataset {table.name!r} in {self.path!r} has different images, labels or splits "
                    "from the ones given now (a different --size or seed?). Splits never change inside "
                    "a store: use the same settings, or pass --store with a new path"
                )
            return
        g = self._datasets().create_group(table.name)
        n = len(table.ids)
        chunk = max(1, min(n, 65536))
        for key, value in (("image_id", table.ids), ("group", table.group)):
            arr = g.create_array(key, shape=(n,), dtype=str, chunks=(chunk,))
            arr[:] = np.asarray(value, dtype=str)
        lab = np.asarray(table.labels)
        arr = g.create_array("label", shape=lab.shape, dtype=lab.dtype, chunks=(chunk,) + lab.shape[1:])
        arr[...] = lab
        arr = g.create_array("split", shape=(n,), dtype=np.int8, chunks=(chunk,))
        arr[:] = table.split.astype(np.int8)
        # attrs last: a dataset group with attrs is a complete one
        g.attrs.update({**table.attrs, "n_images": n, "row_order": "test, val, train", "written": now()})

    def dataset(self, name: str) -> DatasetTable:
        if not self.has_dataset(name):
            known = ", ".join(self.datasets()) or "none"
            raise StoreError(
                f"dataset {name!r} is not in the store {self.path!r} (it has: {known}); "
                f"run `crs extract --dataset {name} --encoder ...` first"
            )
        g = self.root["datasets"][name]
        if "task" not in g.attrs:
            raise StoreError(f"dataset {name!r} in {self.path!r} was not fully written; run `crs extract` again")
        return DatasetTable(
            name=name,
            ids=_strings(g["image_id"]),
            labels=np.asarray(g["label"][...]),
            split=np.asarray(g["split"][:]),
            group=_strings(g["group"]),
            attrs=dict(g.attrs),
        )

    # ---------------------------------------------------------------- failures
    def failures(self, dataset: str) -> dict[str, np.ndarray]:
        """Images of ``dataset`` that could not be decoded: {'image_id', 'file', 'reason'} (empty if none).

        Their rows hold the embedding of a blank image; later stages leave them out
        (``excluded_rows``)."""
        empty = {k: np.zeros(0, dtype=str) for k in ("image_id", "file", "reason")}
        if not self.has_dataset(dataset) or "failures" not in self.root["datasets"][dataset]:
            return empty
        g = self.root["datasets"][dataset]["failures"]
        return {k: _strings(g[k]) for k in ("image_id", "file", "reason")}

    def add_failures(self, dataset: str, image_ids, files, reasons) -> None:
        """Merge failures into the dataset's table (one row per image id; the newest reason wins)."""
        old = self.failures(dataset)
        rows = {i: (f, r) for i, f, r in zip(old["image_id"].tolist(), old["file"].tolist(), old["reason"].tolist())}
        rows.update({str(i): (str(f), str(r)) for i, f, r in zip(image_ids, files, reasons)})
        if not rows:
            return
        ids = sorted(rows)
        g = self._datasets()[dataset].require_group("failures")
        for k, values in (("image_id", ids), ("file", [rows[i][0] for i in ids]), ("reason", [rows[i][1] for i in ids])):
            arr = g.create_array(k, shape=(len(ids),), dtype=str, chunks=(max(1, len(ids)),), overwrite=True)
            arr[:] = np.asarray(values, dtype=str)
        g.attrs["written"] = now()

    def excluded_rows(self, dataset: str) -> np.ndarray:
        """Store rows (test, val, train order) of images listed in the failures table."""
        failed = set(self.failures(dataset)["image_id"].tolist())
        if not failed:
            return np.zeros(0, dtype=np.int64)
        ids = self.dataset(dataset).ids
        return np.flatnonzero(np.isin(ids, list(failed)))

    # -------------------------------------------------------------- embeddings
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
        base = self._datasets()[dataset].require_group("embeddings").require_group(encoder)
        key = condition_key(condition)
        n_chunks = -(-n_rows // chunk) if n_rows else 0
        if key in base and not _fully_created(base[key]):
            del base[key]  # killed while creating it: nothing in it was marked written
        if key in base:
            g = base[key]
            x = g["x"]
            if x.shape != (n_rows, width) or x.chunks[0] != chunk or str(x.dtype) != dtype:
                raise StoreError(
                    f"{dataset}/{encoder}/{condition} exists in {self.path!r} with shape {x.shape}, chunk "
                    f"{x.chunks[0]}, {x.dtype}; asked for {(n_rows, width)}, chunk {chunk}, {dtype}. "
                    "Delete that array, or use the same settings, or pass --store with a new path"
                )
            old_spec = g.attrs.get("encoder_spec")
            new_spec = _as_json((attrs or {}).get("encoder_spec"))
            if new_spec is not None and old_spec is not None and old_spec != new_spec:
                raise StoreError(
                    f"{dataset}/{encoder}/{condition} in {self.path!r} was written by a different encoder "
                    f"spec ({old_spec}); refusing to mix. Pass --store with a new path"
                )
            return EmbeddingArray(g, dataset, encoder, condition)
        g = base.create_group(key)
        g.create_array("x", shape=(n_rows, width), dtype=dtype, chunks=(chunk, width), fill_value=0)
        done = g.create_array("done", shape=(max(n_chunks, 1),), dtype=bool, chunks=(1,), fill_value=False)
        if n_chunks == 0:
            done[0] = True
        g.attrs.update(
            {**(attrs or {}), "condition": condition, "rows": rows, "n_chunks": n_chunks, "complete": False}
        )
        return EmbeddingArray(g, dataset, encoder, condition)

    def open_embedding(self, dataset: str, encoder: str, condition: str) -> "EmbeddingArray":
        """An existing embedding array, to write chunks into (the one writer of those chunks)."""
        if self.read_only:
            raise StoreError(f"{self.path!r} is open read-only")
        g = self.root["datasets"][dataset]["embeddings"][encoder][condition_key(condition)]
        return EmbeddingArray(g, dataset, encoder, condition)

    def embeddings(self, dataset: str | None = None) -> Iterator[tuple[str, str, str, bool]]:
        """Yield (dataset, encoder, condition, complete) for every embedding array."""
        for d in [dataset] if dataset else self.datasets():
            if d not in self.datasets():
                continue
            g = self.root["datasets"][d]
            if "embeddings" not in g:
                continue
            for enc in sorted(g["embeddings"].group_keys()):
                for key in sorted(g["embeddings"][enc].group_keys()):
                    node = g["embeddings"][enc][key]
                    yield d, enc, key_condition(key), bool(node.attrs.get("complete", False))

    def read_embedding(self, dataset: str, encoder: str, condition: str) -> np.ndarray:
        """The full [row, feature] array; refuses an incomplete one."""
        g = self._embedding_group(dataset, encoder, condition)
        if not g.attrs.get("complete", False):
            left = int((~np.asarray(g["done"][:])).sum())
            raise StoreError(
                f"embeddings {dataset}/{encoder}/{condition} in {self.path!r} are incomplete ({left} of "
                f"{g.attrs.get('n_chunks')} chunks missing): the extraction was interrupted. Resume it with "
                f"`crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
            )
        return np.asarray(g["x"][...])

    def embedding_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        return dict(self._embedding_group(dataset, encoder, condition).attrs)

    def _embedding_group(self, dataset: str, encoder: str, condition: str) -> zarr.Group:
        self.dataset(dataset)  # raises the friendly error when the dataset is missing
        g = self.root["datasets"][dataset]
        key = condition_key(condition)
        if "embeddings" not in g or encoder not in g["embeddings"] or key not in g["embeddings"][encoder]:
            raise StoreError(
                f"no embeddings for encoder {encoder!r}, dataset {dataset!r}, condition {condition!r} in "
                f"{self.path!r}; run `crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
            )
        return g["embeddings"][encoder][key]

    # ------------------------------------------------------------- predictions
    def write_predictions(
        self, dataset: str, encoder: str, condition: str, probs: np.ndarray, attrs: dict[str, Any]
    ) -> None:
        """Test probabilities [seed, fraction, image, class] of the chosen probes (overwrites)."""
        base = self._datasets()[dataset].require_group("predictions").require_group(encoder)
        key = condition_key(condition)
        probs = np.asarray(probs, dtype=np.float32)
        chunks = (1,) + probs.shape[1:2] + (min(probs.shape[2], 16384) or 1, probs.shape[3])  # a seed per chunk
        arr = base.create_array(key, shape=probs.shape, dtype=np.float32, chunks=chunks, overwrite=True)
        arr[...] = probs
        arr.attrs.update({**attrs, "condition": condition, "written": now()})

    def read_predictions(self, dataset: str, encoder: str, condition: str) -> tuple[np.ndarray, dict[str, Any]]:
        g = self.root["datasets"][dataset] if self.has_dataset(dataset) else None
        key = condition_key(condition)
        if g is None or "predictions" not in g or encoder not in g["predictions"] or key not in g["predictions"][encoder]:
            raise StoreError(
                f"no test probabilities for {encoder}/{dataset}/{condition} in {self.path!r}; "
                f"run `crs probe --encoder {encoder} --dataset {dataset}`"
            )
        arr = g["predictions"][encoder][key]
        return np.asarray(arr[...]), dict(arr.attrs)


class EmbeddingArray:
    """One (dataset, encoder, condition) array being written chunk by chunk."""

    def __init__(self, group: zarr.Group, dataset: str, encoder: str, condition: str):
        self.group = group
        self.x = group["x"]
        self.done = group["done"]
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
        """Indices of chunks not yet written."""
        if self.n_chunks == 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(~np.asarray(self.done[:], dtype=bool))

    def chunk_rows(self, j: int) -> slice:
        return slice(j * self.chunk, min((j + 1) * self.chunk, self.x.shape[0]))

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
        self.done[j] = True  # only after the data is written

    def finalize(self) -> bool:
        """Mark complete when every chunk is written; returns whether it is."""
        if len(self.pending()) == 0:
            self.group.attrs["complete"] = True
            self.group.attrs["completed"] = now()
            return True
        return False
