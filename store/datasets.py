"""The datasets of a store: each one's table (image ids, labels, splits, groups) and attributes, written once
and checked to be the same on every later write."""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from crs.foundations.provenance import now
from crs.store.commits import Checks, commit_records
from crs.store.errors import StoreError, writes
from crs.store.files import StoredFiles
from crs.store.location import StoreRoot
from crs.store.nodes import as_json, as_strings, create_array, require_group, set_attrs
from crs.store.repair import repair_hint
from crs.store.table import DatasetTable


def dataset_written(g: zarr.Group) -> bool:
    """Whether a dataset group's metadata was written whole: 'written' is the last of its attributes."""
    return "written" in g.attrs


DATASET_ARRAYS = ("image_id", "label", "split", "group")  # a dataset's arrays, each with its commit record


class DatasetTables:
    """The dataset tables of a store: ``root`` its root group, ``files`` its files, ``checks`` its checked reads."""

    def __init__(self, root: StoreRoot, files: StoredFiles, checks: Checks):
        self.root = root
        self.files = files
        self.checks = checks

    @property
    def path(self) -> str:
        return self.root.path

    def datasets_group(self) -> zarr.Group:
        """The store's ``datasets`` group (created where absent, unless the store is open read only)."""
        with self.checks.reading("datasets"):
            root = self.root.group
            return require_group(root, "datasets") if not self.root.read_only else root["datasets"]

    def datasets(self) -> list[str]:
        with self.checks.reading("datasets"):
            if "datasets" not in self.root.group:
                return []
            return sorted(self.root.group["datasets"].group_keys())

    def has_dataset(self, name: str) -> bool:
        return name in self.datasets()

    def dataset_attrs(self, name: str) -> dict[str, Any] | None:
        """A stored dataset's attributes without reading its arrays (which may be the damage a run repairs);
        None where it is not stored, not fully written, or its metadata cannot be read."""
        if not self.has_dataset(name):
            return None
        try:
            g = self.checks.node(f"datasets/{name}")
        except (StoreError, KeyError):
            return None
        return dict(g.attrs) if dataset_written(g) else None

    @writes
    def write_dataset(self, table: DatasetTable) -> None:
        """Write a dataset's metadata; if present, check it is the same (splits never change, nor the files
        it was made from) and rewrite any of its arrays that is damaged."""
        with self.checks.reading(f"datasets/{table.name}"):
            if self.has_dataset(table.name) and not dataset_written(self.root.group["datasets"][table.name]):
                self._drop_unwritten_dataset(table.name)  # killed while writing it: its attrs come last
            if not self.has_dataset(table.name):
                g = self.datasets_group().create_group(table.name)
                self._write_table_arrays(g, table, DATASET_ARRAYS)
                # attrs last: a dataset group with attrs is a complete one
                set_attrs(g, {**table.attrs, "n_images": len(table.ids), "row_order": "test, val, train",
                              "written": now()})
                return
            g = self.root.group["datasets"][table.name]
            old_attrs = dict(g.attrs)
        self._check_identity(table, old_attrs.get("identity"))
        values, damaged = {}, []
        for key in DATASET_ARRAYS:
            try:
                values[key] = self._dataset_array(g, table.name, key)
            except StoreError:
                damaged.append(key)
        new = {"image_id": np.asarray(table.ids, dtype=str), "label": np.asarray(table.labels),
               "split": np.asarray(table.split)}
        if not all(np.array_equal(values[k], new[k]) for k in new if k in values):
            self._refuse_other_rows(table, old_attrs)
        if damaged:  # rewritten as they were, when what is left shows the same rows in the same order
            same_rows = (old_attrs.get("n_images") == len(table.ids) and "source_row" in old_attrs
                         and old_attrs["source_row"] == as_json(table.attrs.get("source_row")))
            if not same_rows and "image_id" in damaged:
                self._dataset_array(g, table.name, "image_id")  # raises the damage, naming array and chunk
            self._write_table_arrays(g, table, damaged)

    def _refuse_other_rows(self, table: DatasetTable, old_attrs: dict) -> None:
        """The StoreError for a dataset asked for with other images, labels or splits than the stored ones."""
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

    def _drop_unwritten_dataset(self, name: str) -> None:
        """Delete a dataset group whose metadata a killed run left half-written (the caller holds its
        dataset lock). Its embeddings are created only after the metadata is whole, so such a group holds
        none; if it does, it is not ours to guess about: refuse rather than delete them."""
        g = self.root.group["datasets"][name]
        kept = sorted(k for k in g.group_keys() if k in ("embeddings", "predictions"))
        if kept:
            raise StoreError(
                f"dataset {name!r} in {self.path!r} holds {' and '.join(kept)} but its metadata was not fully "
                f"written, so its row order is unknown and nothing in it can be trusted. To repair: extract "
                f"into a new store (--store NEW_PATH), or delete 'datasets/{name}' from this one and run "
                f"`crs extract --dataset {name} ...` again")
        del self.root.group["datasets"][name]

    @staticmethod
    def _check_identity(table: DatasetTable, old: Any) -> None:
        """A file-based dataset's identity (image root, CSV digest, ...) must match the stored one."""
        new = as_json(table.attrs.get("identity"))
        if not isinstance(old, dict) or not isinstance(new, dict):
            return  # synthetic datasets record none: nothing more to compare
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            what = "; ".join(f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in differ)
            raise StoreError(
                f"dataset {table.name!r} in this store was extracted from other files ({what}). The images and "
                "CSV of a dataset never change inside a store, or its embeddings would mix different images: "
                "point the dataset at the files it was extracted from, or pass --store with a new path"
            )

    def _write_table_arrays(self, g: zarr.Group, table: DatasetTable, keys) -> None:
        """Write the arrays ``keys`` of ``table`` into dataset group ``g``, each followed by its commit record
        (the ``commit`` attribute: per chunk, stored bytes and CRC-32 of its values), checked on every read."""
        n = len(table.ids)
        chunk = max(1, min(n, 65536))
        for key in keys:
            if key in ("image_id", "group"):
                value = np.asarray(table.ids if key == "image_id" else table.group, dtype=str)
                arr = create_array(g, key, shape=(n,), dtype=str, chunks=(chunk,), overwrite=True)
            elif key == "label":
                value = np.asarray(table.labels)
                arr = create_array(g, "label", shape=value.shape, dtype=value.dtype,
                                   chunks=(chunk,) + value.shape[1:], overwrite=True)
            else:
                value = np.asarray(table.split).astype(np.int8)
                arr = create_array(g, "split", shape=(n,), dtype=np.int8, chunks=(chunk,), overwrite=True)
            arr[...] = value
            set_attrs(arr, {"commit": commit_records(self.files, arr, value)})  # last: an array without it is not whole

    def _dataset_array(self, g: zarr.Group, name: str, key: str) -> np.ndarray:
        """One of the dataset's arrays, refused (StoreError naming it and the repair) where it is missing,
        damaged, or not the values its commit record names (replaced, or rewritten through zarr)."""
        what = f"dataset {name!r} ({key})"
        where = f"datasets/{name}/{key}"
        with self.checks.reading(where):
            if key not in g:
                raise StoreError(f"{what}: array {where!r} is missing from {self.path!r}. "
                                 f"To repair: {repair_hint(self.path, where)}")
            arr = g[key]
            records = arr.attrs.get("commit")
        if records is None:
            raise StoreError(f"{what}: array {where!r} in {self.path!r} has no commit record (its writer was "
                             f"stopped, or it was written by other means). To repair: {repair_hint(self.path, where)}")
        values = self.checks.checked_read(arr, what)
        self.checks.committed(arr, records, what, values)
        return as_strings(values) if key in ("image_id", "group") else values

    def dataset(self, name: str) -> DatasetTable:
        if not self.has_dataset(name):
            known = ", ".join(self.datasets()) or "none"
            raise StoreError(
                f"dataset {name!r} is not in the store {self.path!r} (it has: {known}); "
                f"run `crs extract --dataset {name} --encoder ...` first"
            )
        g = self.checks.node(f"datasets/{name}")
        if not dataset_written(g):
            raise StoreError(f"dataset {name!r} in {self.path!r} was not fully written (a run was stopped while "
                             f"writing its metadata). To repair: run the same `crs extract --dataset {name} ...` "
                             "again; it rewrites the dataset's metadata before embedding anything")
        v = {key: self._dataset_array(g, name, key) for key in DATASET_ARRAYS}
        return DatasetTable(name=name, ids=v["image_id"], labels=v["label"], split=v["split"], group=v["group"],
                            attrs=dict(g.attrs))
