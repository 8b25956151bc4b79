"""The failures table of a dataset: the images that could not be decoded, with their file and the reason.

Their rows hold the embedding of a blank image; later stages leave them out (``excluded_rows``)."""

from __future__ import annotations

import numpy as np

from crs.foundations.provenance import now
from crs.store.commits import Checks
from crs.store.datasets import DatasetTables
from crs.store.errors import StoreError, writes
from crs.store.location import StoreRoot
from crs.store.nodes import as_strings, create_array, require_group, set_attrs
from crs.store.repair import repair_hint

FAILURE_COLUMNS = ("image_id", "file", "reason")


class Failures:
    """The failures tables of a store: ``root`` its root group, ``checks`` its checked reads, ``tables`` its
    dataset tables (a failures table belongs to a stored dataset)."""

    def __init__(self, root: StoreRoot, checks: Checks, tables: DatasetTables):
        self.root = root
        self.checks = checks
        self.tables = tables

    @property
    def path(self) -> str:
        return self.root.path

    def failures(self, dataset: str) -> dict[str, np.ndarray]:
        """Images of ``dataset`` that could not be decoded: {'image_id', 'file', 'reason'} (empty if none)."""
        empty = {k: np.zeros(0, dtype=str) for k in FAILURE_COLUMNS}
        if not self.tables.has_dataset(dataset):
            return empty
        key = f"datasets/{dataset}/failures"
        with self.checks.reading(key):
            if "failures" not in self.root.group["datasets"][dataset]:
                return empty
            g = self.root.group[key]
            missing = [k for k in FAILURE_COLUMNS if k not in g]
            arrays = {k: g[k] for k in FAILURE_COLUMNS if k in g}
        if missing:
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} lacks its column(s) "
                             f"{', '.join(missing)}. To repair: {repair_hint(self.path, key)}")
        if g.attrs.get("writing"):
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} was being rewritten when a run "
                             f"was stopped, so which images failed is not known. To repair: "
                             f"{repair_hint(self.path, key)}")
        out = {k: as_strings(self.checks.checked_read(arrays[k], f"the failures table of {dataset!r} ({k})"))
               for k in FAILURE_COLUMNS}
        if len({v.size for v in out.values()}) > 1 or out["image_id"].size != g.attrs.get("rows"):
            raise StoreError(f"the failures table of {dataset!r} in {self.path!r} has columns of different lengths "
                             f"(a torn write). To repair: {repair_hint(self.path, key)}")
        return out

    @writes
    def add_failures(self, dataset: str, image_ids, files, reasons) -> None:
        """Merge failures into the dataset's table (one row per image id; the newest reason wins)."""
        old = self.failures(dataset)
        rows = {i: (f, r) for i, f, r in zip(old["image_id"].tolist(), old["file"].tolist(), old["reason"].tolist())}
        rows.update({str(i): (str(f), str(r)) for i, f, r in zip(image_ids, files, reasons)})
        if not rows:
            return
        ids = sorted(rows)
        g = require_group(self.tables.datasets_group()[dataset], "failures")
        # the three columns are rewritten one after another: a kill between them leaves a table that
        # ``writing`` marks as torn (refused on read, repaired by resetting the dataset's chunks), never one
        # that reads as a shorter list of failures
        g.attrs["writing"] = True
        columns = (("image_id", ids), ("file", [rows[i][0] for i in ids]), ("reason", [rows[i][1] for i in ids]))
        for k, values in columns:
            arr = create_array(g, k, shape=(len(ids),), dtype=str, chunks=(max(1, len(ids)),), overwrite=True)
            arr[:] = np.asarray(values, dtype=str)
        set_attrs(g, {"writing": False, "rows": len(ids), "written": now()})

    def excluded_rows(self, dataset: str) -> np.ndarray:
        """Store rows (test, val, train order) of images listed in the failures table."""
        failed = set(self.failures(dataset)["image_id"].tolist())
        if not failed:
            return np.zeros(0, dtype=np.int64)
        ids = self.tables.dataset(dataset).ids
        return np.flatnonzero(np.isin(ids, list(failed)))
