"""The Zarr embedding store (numpy + zarr only): schema, read, write, locks, integrity.

One job a module:

- ``layout``: the on-disk format (schema version, node names, row order); ``table``: a dataset's table;
- ``zarr_store``: ``Store``, composed of ``files`` (the files under it), ``commits`` (reads checked against
  the commit records), ``datasets``, ``failures``, ``embeddings``, ``resume`` (an embedding array written
  chunk by chunk and resumed) and ``predictions``; ``location`` opens its root, ``nodes`` creates arrays
  and groups the store's way, ``errors`` holds ``StoreError``;
- ``repair``: the commands a refusal names; ``integrity``: ``crs store verify [--repair]``;
- ``locks``: several runs writing into one store; ``generators``: one perturbation generator per dataset;
  ``keys``: path-safe names; ``info``: ``crs store info``.

The names below load on first use (PEP 562), so a module that needs only ``crs.store.keys`` (the
encoder registry, for `crs encoders`) does not pay for importing zarr."""

import importlib

from crs.names import SPLIT_CODE, SPLITS

_WHERE = {
    "Finding": "integrity", "format_findings": "integrity", "verify": "integrity",
    "store_key": "keys",
    "LockHeld": "locks", "dataset_lock": "locks", "extraction_lock": "locks", "hold_lock": "locks",
    "object_lock": "locks",
    "DEFAULT_STORE": "layout", "SCHEMA_VERSION": "layout", "condition_key": "layout", "store_order": "layout",
    "DatasetTable": "table", "Table": "table",
    "probe_command": "repair", "repair_hint": "repair",
    "EmbeddingArray": "resume", "EmbeddingShape": "embeddings", "Store": "zarr_store", "StoreError": "errors",
}

__all__ = ["SPLIT_CODE", "SPLITS", *sorted(_WHERE)]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'crs.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"crs.store.{module}"), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
