"""``Store``: a CRS embedding store at a local path or any fsspec URL (the layout: ``crs.store.layout``).

``Store`` is the front door: the methods the stages call, each handed to the part that does the work. The parts
are built in order, each from the ones it needs, and each can be used alone: the files under the store
(``files.StoredFiles``), reads checked against what was committed (``commits.Checks``), dataset tables
(``datasets.DatasetTables``), and on top of those the failures tables (``failures.Failures``), embedding arrays
(``embeddings.Embeddings``, written and resumed through ``resume``) and predictions (``predictions.Predictions``).
This module adds opening a store, its identity and the digest of its content; it also names what other layers
import from here."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr

from crs import __version__ as TOOL_VERSION
from crs.foundations.provenance import now
from crs.store.commits import Checks
from crs.store.datasets import DatasetTables
from crs.store.embeddings import Embeddings, EmbeddingShape
from crs.store.errors import StoreError
from crs.store.failures import Failures
from crs.store.files import StoredFiles
from crs.store.layout import DEFAULT_STORE, SCHEMA_VERSION, WHEN, condition_key, store_order
from crs.store.location import StoreRoot, is_url, local_path, open_below_root, open_root
from crs.store.nodes import as_json, set_attrs
from crs.store.predictions import Predictions
from crs.store.repair import repair_hint
from crs.store.resume import EmbeddingArray
from crs.store.table import DatasetTable

__all__ = ["DEFAULT_STORE", "SCHEMA_VERSION", "DatasetTable", "EmbeddingArray", "EmbeddingShape", "Store",
           "StoreError", "condition_key", "local_path", "now", "repair_hint", "set_attrs", "store_order"]


def _open_stamped(path: str, read_only: bool, storage_options: dict | None) -> zarr.Group:
    """The root group of the CRS store at ``path``: a new one (writable, nothing there yet) is stamped with its
    schema version, creation time, package version and identity; a Zarr group that is not a CRS store, or one
    of another schema version, is refused."""
    root = open_root(path, "r" if read_only else "a", storage_options)
    meta = root.attrs.get("crs_store")
    if meta is None and not read_only and len(list(root.keys())) > 0:
        # our metadata may predate another process's stamping of the store it just created
        root = open_root(path, "a", storage_options)
        meta = root.attrs.get("crs_store")
    if meta is None:
        if read_only or len(list(root.keys())) > 0:
            raise StoreError(
                f"{path!r} is a Zarr group but not a CRS store (no 'crs_store' attribute); "
                "nothing was changed. Pass --store with a new path"
            )
        root.attrs["crs_store"] = {
            "schema_version": SCHEMA_VERSION,
            "created": now(),
            "tool_version": TOOL_VERSION,
            "store_id": uuid.uuid4().hex,
        }
    else:
        version = meta.get("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{path!r} was written with store schema version {version}; this crs reads "
                f"version {SCHEMA_VERSION}. Nothing was changed: use a crs that matches the store, "
                "or pass --store with a new path and extract again"
            )
    return root


class Store:
    """A CRS embedding store at a local path or any fsspec URL.

    Its parts: ``files`` (``StoredFiles``), ``checks`` (``Checks``), ``tables`` (``DatasetTables``),
    ``failure_tables`` (``Failures``), ``embedding_arrays`` (``Embeddings``), ``prediction_arrays``
    (``Predictions``); ``location`` holds the root group they share. Each method below is its part's method of
    the same name, documented there."""

    def __init__(self, path: str = DEFAULT_STORE, mode: str = "a", storage_options: dict | None = None):
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', not {mode!r}")
        read_only = mode == "r"
        group = _open_stamped(str(path), read_only, storage_options)
        self._compose(StoreRoot(str(path), group, read_only=read_only, storage_options=storage_options))

    @classmethod
    def below_damaged_root(cls, path: str, storage_options: dict | None = None) -> Store:
        """The store at ``path``, read only, whose root metadata is damaged: its nodes below read as usual (for
        ``crs store verify``, which checks what it can); it has no identity."""
        store = cls.__new__(cls)
        group = open_below_root(str(path), storage_options)
        store._compose(StoreRoot(str(path), group, read_only=True, storage_options=storage_options))
        return store

    def _compose(self, location: StoreRoot) -> None:
        self.location = location
        self.files = StoredFiles(location.path, location.storage_options)
        self.checks = Checks(self.files, location)
        self.tables = DatasetTables(location, self.files, self.checks)
        self.failure_tables = Failures(location, self.checks, self.tables)
        self.embedding_arrays = Embeddings(location, self.files, self.checks, self.tables)
        self.prediction_arrays = Predictions(location, self.files, self.checks, self.tables)

    @property
    def path(self) -> str:
        return self.location.path

    @property
    def read_only(self) -> bool:
        return self.location.read_only

    @property
    def storage_options(self) -> dict:
        return self.location.storage_options

    @property
    def root(self) -> zarr.Group:
        """The store's root Zarr group."""
        return self.location.group

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

    # ------------------------------------------------------------------ datasets (``tables``)
    def datasets(self) -> list[str]:
        return self.tables.datasets()

    def has_dataset(self, name: str) -> bool:
        return self.tables.has_dataset(name)

    def dataset(self, name: str) -> DatasetTable:
        return self.tables.dataset(name)

    def dataset_attrs(self, name: str) -> dict[str, Any] | None:
        return self.tables.dataset_attrs(name)

    def write_dataset(self, table: DatasetTable) -> None:
        self.tables.write_dataset(table)

    # ------------------------------------------------------------------ failures (``failure_tables``)
    def failures(self, dataset: str) -> dict[str, np.ndarray]:
        return self.failure_tables.failures(dataset)

    def add_failures(self, dataset: str, image_ids, files, reasons) -> None:
        self.failure_tables.add_failures(dataset, image_ids, files, reasons)

    def excluded_rows(self, dataset: str) -> np.ndarray:
        return self.failure_tables.excluded_rows(dataset)

    # ------------------------------------------------------------------ embeddings (``embedding_arrays``)
    def embedding(self, dataset: str, encoder: str, condition: str, shape: EmbeddingShape,
                  attrs: dict[str, Any] | None = None) -> EmbeddingArray:
        return self.embedding_arrays.embedding(dataset, encoder, condition, shape, attrs)

    def open_embedding(self, dataset: str, encoder: str, condition: str) -> EmbeddingArray:
        return self.embedding_arrays.open_embedding(dataset, encoder, condition)

    def embeddings(self, dataset: str | None = None,
                   encoder: str | None = None) -> Iterator[tuple[str, str, str, bool]]:
        return self.embedding_arrays.embeddings(dataset, encoder)

    def read_embedding(self, dataset: str, encoder: str, condition: str) -> np.ndarray:
        return self.embedding_arrays.read_embedding(dataset, encoder, condition)

    def embedding_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        return self.embedding_arrays.embedding_attrs(dataset, encoder, condition)

    def perturbation_generators(self, dataset: str) -> dict[str, list[str]]:
        return self.embedding_arrays.perturbation_generators(dataset)

    # ------------------------------------------------------------------ predictions (``prediction_arrays``)
    def prediction_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        return self.prediction_arrays.prediction_attrs(dataset, encoder, condition)

    def write_predictions(self, dataset: str, encoder: str, condition: str, probs: np.ndarray,
                          attrs: dict[str, Any]) -> None:
        self.prediction_arrays.write_predictions(dataset, encoder, condition, probs, attrs)

    def commit_predictions(self, dataset: str, encoder: str, generation: str, conditions) -> None:
        self.prediction_arrays.commit_predictions(dataset, encoder, generation, conditions)

    def read_predictions(self, dataset: str, encoder: str, condition: str) -> tuple[np.ndarray, dict[str, Any]]:
        return self.prediction_arrays.read_predictions(dataset, encoder, condition)

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
                emb = self.embedding_arrays.group(ds, enc, cond)
                what = f"the commit record of embeddings {ds}/{enc}/{cond}"
                h.update(cond.encode())
                h.update(np.asarray(self.checks.checked_read(emb["done"], what), dtype=bool).tobytes())
                h.update(np.asarray(self.checks.checked_read(emb["commit"], what)[:, 1], dtype="<u8").tobytes())
                attrs = {k: v for k, v in dict(emb.attrs).items() if k not in WHEN | {"chunk_bytes"}}
                h.update(json.dumps(as_json(attrs), sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]
