"""The Zarr embedding store (numpy + zarr only)."""

from crs.store.zarr_store import (
    DEFAULT_STORE,
    SCHEMA_VERSION,
    SPLIT_CODE,
    SPLITS,
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
    "Store",
    "StoreError",
    "condition_key",
    "store_order",
]
