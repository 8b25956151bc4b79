"""``Store``: a CRS embedding store at a local path or any fsspec URL (the layout: ``crs.store.layout``).

The class is composed of one part per job: the files under the store (``files``), reads checked against
what was committed (``commits``), dataset tables (``datasets``) and their failures (``failures``), embedding
arrays (``embeddings``, written and resumed through ``resume``) and predictions (``predictions``). This
module adds opening a store, its identity and the digest of its content; it also names what other layers
import from here."""

from __future__ import annotations

import hashlib
import json
import uuid

import numpy as np

from crs import __version__ as TOOL_VERSION
from crs.provenance import now
from crs.store.commits import Checks
from crs.store.datasets import DatasetTables
from crs.store.embeddings import Embeddings, EmbeddingShape
from crs.store.errors import StoreError
from crs.store.failures import Failures
from crs.store.files import StoredFiles
from crs.store.layout import DEFAULT_STORE, SCHEMA_VERSION, WHEN, condition_key, store_order
from crs.store.location import is_url, local_path, open_below_root, open_root
from crs.store.nodes import as_json, set_attrs
from crs.store.predictions import Predictions
from crs.store.repair import repair_hint
from crs.store.resume import EmbeddingArray
from crs.store.table import DatasetTable

__all__ = ["DEFAULT_STORE", "SCHEMA_VERSION", "DatasetTable", "EmbeddingArray", "EmbeddingShape", "Store",
           "StoreError", "condition_key", "local_path", "now", "repair_hint", "set_attrs", "store_order"]


class Store(StoredFiles, Checks, DatasetTables, Failures, Embeddings, Predictions):
    """A CRS embedding store at a local path or any fsspec URL."""

    def __init__(self, path: str = DEFAULT_STORE, mode: str = "a", storage_options: dict | None = None):
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', not {mode!r}")
        self.path = str(path)
        self.read_only = mode == "r"
        self.storage_options = dict(storage_options or {})
        self._generator_checked: set[str] = set()  # datasets whose perturbation generator was checked (embedding)
        self.root = open_root(self.path, "r" if self.read_only else "a", storage_options)
        meta = self.root.attrs.get("crs_store")
        if meta is None and not self.read_only and len(list(self.root.keys())) > 0:
            # our metadata may predate another process's stamping of the store it just created
            self.root = open_root(self.path, "a", storage_options)
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
                "tool_version": TOOL_VERSION,
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

    @classmethod
    def below_damaged_root(cls, path: str, storage_options: dict | None = None) -> Store:
        """The store at ``path``, read only, whose root metadata is damaged: its nodes below read as usual (for
        ``crs store verify``, which checks what it can); it has no identity."""
        store = cls.__new__(cls)
        store.path, store.read_only, store.storage_options = str(path), True, dict(storage_options or {})
        store._generator_checked = set()
        store.root = open_below_root(store.path, storage_options)
        return store

    @property
    def is_url(self) -> bool:
        return is_url(self.path)

    @property
    def tool_version(self) -> str | None:
        """The version of CRS-Bench that created this store; a root that names it ``crs_version`` is read too.
        None where the root records neither."""
        meta = self.root.attrs["crs_store"]
        return meta.get("tool_version", meta.get("crs_version"))

    @property
    def store_id(self) -> str:
        """This store's identity, independent of how its path is spelled."""
        return str(self.root.attrs["crs_store"]["store_id"])

    def content_digest(self, dataset: str, encoder: str | None = None) -> str:
        """A digest of what later stages read: the store's identity, the dataset's table and, with
        ``encoder``, the commit records of its arrays (per chunk: written or not, and the CRC-32 of
        the values written). Equal digests mean the same content, however the store's path is
        spelled; rewriting a chunk with other values changes it."""
        h = hashlib.sha256(self.store_id.encode())
        table = self.dataset(dataset)
        attrs = {k: v for k, v in table.attrs.items() if k not in WHEN}
        h.update(json.dumps(as_json(attrs), sort_keys=True, default=str).encode())
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
                h.update(np.asarray(self.checked_read(emb["commit"], what)[:, 1], dtype="<u8").tobytes())
                attrs = {k: v for k, v in dict(emb.attrs).items() if k not in WHEN | {"chunk_bytes"}}
                h.update(json.dumps(as_json(attrs), sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]
