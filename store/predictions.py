"""The test probabilities of the chosen probes: one array per (dataset, encoder, condition), written whole with
a commit record per chunk and checked against it on every read."""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from crs.foundations.provenance import now
from crs.store.commits import Checks, commit_records
from crs.store.datasets import DatasetTables
from crs.store.errors import StoreError, writes
from crs.store.files import StoredFiles
from crs.store.layout import condition_key
from crs.store.location import StoreRoot
from crs.store.nodes import create_arrays, require_group, set_attrs
from crs.store.repair import probe_command, repair_hint

PREDICTION_CHUNK_BYTES = 64 << 20  # the most one chunk of test probabilities holds (float32)


def prediction_chunks(shape: tuple[int, ...], cap: int | None = None) -> tuple[int, ...]:
    """The chunks of a prediction array [seed, fraction, image, class]: the whole array in one chunk where it
    fits in ``cap`` bytes (scoring reads every array whole: one chunk halves zarr's cost of a read against a
    chunk per seed), else as many whole seeds as fit, and a seed's images split where one seed alone does
    not."""
    cap = PREDICTION_CHUNK_BYTES if cap is None else cap
    seeds, fractions, images, classes = (max(int(d), 1) for d in shape)
    row = fractions * classes * 4  # bytes of one image of one seed
    rows = images if row * images <= cap else max(cap // row, 1)
    return (min(seeds, max(cap // (row * rows), 1)), fractions, rows, classes)


COMMITTED = "committed"  # the attribute of a predictions/ENCODER group naming what its last probe run wrote


class Predictions:
    """The prediction arrays of a store: ``root`` its root group, ``files`` its files, ``checks`` its checked reads,
    ``tables`` its dataset tables (predictions belong to a stored dataset)."""

    def __init__(self, root: StoreRoot, files: StoredFiles, checks: Checks, tables: DatasetTables):
        self.root = root
        self.files = files
        self.checks = checks
        self.tables = tables

    @property
    def path(self) -> str:
        return self.root.path

    def prediction_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        """The attributes of a stored prediction array without reading its values: KeyError where none is
        stored, StoreError (naming the file and the repair) where its metadata is damaged."""
        key = f"datasets/{dataset}/predictions/{encoder}/{condition_key(condition)}"
        return dict(self.checks.node(key).attrs)

    @writes
    def write_predictions(
        self, dataset: str, encoder: str, condition: str, probs: np.ndarray, attrs: dict[str, Any]
    ) -> None:
        """Test probabilities [seed, fraction, image, class] of the chosen probes (overwrites)."""
        base = require_group(require_group(self.tables.datasets_group()[dataset], "predictions"), encoder)
        key = condition_key(condition)
        probs = np.asarray(probs, dtype=np.float32)
        spec = dict(shape=probs.shape, dtype=np.float32, chunks=prediction_chunks(probs.shape), fill_value=0.0)
        arr = create_arrays(base, {key: spec}, overwrite=True)[1][key]
        arr[...] = probs
        commit = commit_records(self.files, arr, probs)
        # attrs last: an array with its 'condition' attribute was written whole
        set_attrs(arr, {**attrs, "condition": condition, "commit": commit, "written": now()})

    @writes
    def commit_predictions(self, dataset: str, encoder: str, generation: str, conditions) -> None:
        """Record, once all are written, which prediction arrays one probe run of (``dataset``, ``encoder``)
        wrote: the ``committed`` attribute of the encoder's predictions group, {generation, conditions}.
        ``crs store verify`` compares what is stored with it: a committed array that is gone is damage, not
        a smaller run."""
        g = self.checks.node(f"datasets/{dataset}/predictions/{encoder}")
        set_attrs(g, {COMMITTED: {"generation": generation, "conditions": sorted(conditions)}})

    def read_predictions(self, dataset: str, encoder: str, condition: str) -> tuple[np.ndarray, dict[str, Any]]:
        key = condition_key(condition)
        where = f"datasets/{dataset}/predictions/{encoder}/{key}"
        what = f"test probabilities {encoder}/{dataset}/{condition}"
        with self.checks.reading(where):
            try:  # one lookup by path, not a walk through the groups (a metadata read each)
                arr = self.root.group[where]
            except KeyError:
                arr = None
            if not isinstance(arr, zarr.Array):
                raise StoreError(
                    f"no {what} in {self.path!r}; run {probe_command(self.path, dataset, encoder)}"
                )
            attrs = dict(arr.attrs)
        if "condition" not in attrs:
            raise StoreError(f"{what} in {self.path!r} were not written whole (the run that wrote them was "
                             f"interrupted). To repair: {repair_hint(self.path, where)}")
        values = self.checks.checked_read(arr, what)
        self.checks.committed(arr, attrs["commit"], what, values)
        return values, attrs
