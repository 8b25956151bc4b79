"""The Zarr embedding store (numpy + zarr only): schema, read, write, locks, integrity."""

from crs.names import SPLIT_CODE, SPLITS
from crs.store.integrity import Finding, format_findings, verify
from crs.store.keys import store_key
from crs.store.locks import LockHeld, dataset_lock, extraction_lock, hold_lock, object_lock
from crs.store.zarr_store import (
    DEFAULT_STORE,
    SCHEMA_VERSION,
    DatasetTable,
    EmbeddingArray,
    Store,
    StoreError,
    condition_key,
    store_order,
)

__all__ = [
    "DEFAULT_STORE",
    "SCHEMA_VERSION",
    "SPLIT_CODE",
    "SPLITS",
    "DatasetTable",
    "EmbeddingArray",
    "Finding",
    "LockHeld",
    "Store",
    "StoreError",
    "condition_key",
    "dataset_lock",
    "extraction_lock",
    "format_findings",
    "hold_lock",
    "object_lock",
    "store_key",
    "store_order",
    "verify",
]
