"""The Zarr embedding store (numpy + zarr only): schema, read, write, locks, integrity.

One job a module:

- ``layout``: the on-disk format (schema version, node names, row order); ``table``: a stored dataset's table;
- ``zarr_store``: ``Store``, the front door to its parts, each built from the ones it needs: ``files`` (the
  files under it), ``commits`` (reads checked against the commit records), ``datasets``, ``failures``,
  ``embeddings``, ``resume`` (an embedding array written chunk by chunk and resumed) and ``predictions``;
  ``location`` opens its root, ``nodes`` creates arrays and groups the store's way, ``errors`` holds
  ``StoreError``;
- ``repair``: the commands a refusal names; ``integrity``: ``crs store verify [--repair]``;
- ``locks``: several runs writing into one store; ``generators``: one perturbation generator per dataset;
  ``keys``: path-safe names; ``info``: ``crs store info``.

Importing any of it imports zarr: a command that must start at once (``crs encoders``) imports it inside the
function that needs it."""

from crs.foundations.names import SPLIT_CODE, SPLITS
from crs.store.errors import StoreError
from crs.store.integrity import Finding, format_findings, verify
from crs.store.keys import store_key
from crs.store.layout import DEFAULT_STORE, SCHEMA_VERSION, condition_key, store_order
from crs.store.locks import LockHeld, dataset_lock, extraction_lock, hold_lock, object_lock
from crs.store.repair import probe_command, repair_hint
from crs.store.resume import EmbeddingArray
from crs.store.table import DatasetTable, Table
from crs.store.zarr_store import EmbeddingShape, Store

__all__ = ["DEFAULT_STORE", "SCHEMA_VERSION", "SPLITS", "SPLIT_CODE", "DatasetTable", "EmbeddingArray",
           "EmbeddingShape", "Finding", "LockHeld", "Store", "StoreError", "Table", "condition_key", "dataset_lock",
           "extraction_lock", "format_findings", "hold_lock", "object_lock", "probe_command", "repair_hint",
           "store_key", "store_order", "verify"]
