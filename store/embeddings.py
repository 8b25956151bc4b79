"""The embedding arrays of a store: created (or checked) for writing, listed, and read whole once complete."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from crs.store import generators
from crs.store.commits import Checks, shape_problem
from crs.store.datasets import DatasetTables
from crs.store.errors import StoreError, writes
from crs.store.files import StoredFiles
from crs.store.layout import condition_key, key_condition
from crs.store.location import StoreRoot
from crs.store.nodes import as_json, create_arrays, read_robust, require_group, set_attrs
from crs.store.repair import repair_hint
from crs.store.resume import EmbeddingArray


@dataclass(frozen=True)
class EmbeddingShape:
    """What an embedding array holds: which rows ('all' of the dataset, or its 'test' rows), how many, the
    embedding width, the rows a chunk and the stored dtype."""

    rows: str
    n_rows: int
    width: int
    chunk: int
    dtype: str = "float16"


def fully_created(g: zarr.Group) -> bool:
    """Whether an embedding group was created whole: its three arrays, then its attributes."""
    return "x" in g and "done" in g and "commit" in g and "n_chunks" in g.attrs


class Embeddings:
    """The embedding arrays of a store: ``root`` its root group, ``files`` its files, ``checks`` its checked reads,
    ``tables`` its dataset tables (an embedding array belongs to a stored dataset)."""

    def __init__(self, root: StoreRoot, files: StoredFiles, checks: Checks, tables: DatasetTables):
        self.root = root
        self.files = files
        self.checks = checks
        self.tables = tables
        self._generator_checked: set[str] = set()  # datasets whose perturbation generator was checked

    @property
    def path(self) -> str:
        return self.root.path

    @writes
    def embedding(self, dataset: str, encoder: str, condition: str, shape: EmbeddingShape,
                  attrs: dict[str, Any] | None = None) -> EmbeddingArray:
        """Open (or create) an embedding array for writing; a mismatch with what is there is an error."""
        key = condition_key(condition)
        with self.checks.reading(f"datasets/{dataset}/embeddings/{encoder}/{key}"):
            base = require_group(require_group(self.tables.datasets_group()[dataset], "embeddings"), encoder)
            if key in base and not fully_created(base[key]):
                del base[key]  # killed while creating it: nothing in it was marked written
            exists = key in base
        if exists:
            return self._existing_embedding(base[key], dataset, encoder, condition, shape, attrs)
        n_chunks = -(-shape.n_rows // shape.chunk) if shape.n_rows else 0
        self._one_generator(dataset, condition, attrs, None)
        # the group, then its arrays; its attributes (n_chunks) last, once they all are (``fully_created``)
        specs = {
            "x": dict(shape=(shape.n_rows, shape.width), dtype=shape.dtype, chunks=(shape.chunk, shape.width),
                      fill_value=0),
            "done": dict(shape=(max(n_chunks, 1),), dtype=bool, chunks=(1,), fill_value=False),
            "commit": dict(shape=(max(n_chunks, 1), 2), dtype=np.uint64, chunks=(1, 2), fill_value=0)}
        try:
            g, arrays = create_arrays(base, specs, group=key)
        except (zarr.errors.ContainsArrayError, zarr.errors.ContainsGroupError):
            # arrays in a folder whose group metadata is gone (deleted, or lost to a fault): with its attributes
            # gone nothing in it can be trusted (`crs store verify` says "created but never written"), so the
            # folder goes and the condition is made afresh; its chunks are extracted again
            self.files.remove(f"{base.path}/{key}")
            g, arrays = create_arrays(base, specs, group=key)
        if n_chunks == 0:
            arrays["done"][0] = True
        set_attrs(
            g, {**(attrs or {}), "condition": condition, "rows": shape.rows, "n_rows": shape.n_rows,
                "n_chunks": n_chunks, "complete": False}
        )
        return EmbeddingArray(g, dataset, encoder, condition, self.files, arrays)

    def _existing_embedding(self, g: zarr.Group, dataset: str, encoder: str, condition: str, shape: EmbeddingShape,
                            attrs: dict[str, Any] | None) -> EmbeddingArray:
        """The array already at ``g``, to write on, once it is checked to be the one asked for."""
        x = g["x"]
        if x.shape != (shape.n_rows, shape.width) or x.chunks[0] != shape.chunk or str(x.dtype) != shape.dtype:
            raise StoreError(
                f"{dataset}/{encoder}/{condition} exists in {self.path!r} with shape {x.shape}, chunk "
                f"{x.chunks[0]}, {x.dtype}; asked for {(shape.n_rows, shape.width)}, chunk {shape.chunk}, "
                f"{shape.dtype}. Delete that array, or use the same settings, or pass --store with a new path"
            )
        self._one_generator(dataset, condition, attrs, dict(g.attrs))
        old_spec = g.attrs.get("encoder_spec")
        new_spec = as_json((attrs or {}).get("encoder_spec"))
        if new_spec is not None and old_spec is not None and old_spec != new_spec:
            raise StoreError(
                f"{dataset}/{encoder}/{condition} in {self.path!r} was written by a different encoder "
                f"spec ({old_spec}); refusing to mix. Pass --store with a new path"
            )
        return EmbeddingArray(g, dataset, encoder, condition, self.files)

    def _one_generator(self, dataset: str, condition: str, attrs: dict | None, existing: dict | None) -> None:
        """Refuse to write a perturbed array whose ``perturbation_generator`` (in ``attrs``: the writer's) is not
        the one of the array there (``existing``: its attributes) or of the dataset's other perturbed arrays
        (looked at once per dataset and Store object). Writers that pass none are not checked."""
        generator = (attrs or {}).get(generators.ATTR)
        if generator is None or not generators.is_perturbed(condition):
            return
        if dataset not in self._generator_checked or (existing is not None
                                                       and generators.recorded(existing) != generator):
            problem = generators.refusal(self.path, dataset, generator, self.perturbation_generators(dataset))
            if problem:
                raise StoreError(problem)
            self._generator_checked.add(dataset)

    def perturbation_generators(self, dataset: str) -> dict[str, list[str]]:
        """{generator: ["ENCODER/CONDITION", ...]} over the dataset's perturbed embedding arrays, in key order
        (``crs.store.generators``: an array that records none is listed under ``generators.NONE``)."""
        found: dict[str, list[str]] = {}
        if dataset not in self.tables.datasets():
            return found
        with self.checks.reading(f"datasets/{dataset}/embeddings"):
            g = self.root.group["datasets"][dataset]
            groups = g["embeddings"] if "embeddings" in g else None
            for enc in sorted(groups.group_keys()) if groups is not None else []:
                for key, node in sorted(groups[enc].groups()):  # one listing: every array's attributes
                    attrs = dict(node.attrs)
                    # an array whose creation has not finished (its attributes come last, in one write) records
                    # nothing yet: another writer creating it now, or one killed then, not an older generator
                    if generators.is_perturbed(key_condition(key)) and "condition" in attrs:
                        found.setdefault(generators.recorded(attrs), []).append(f"{enc}/{key_condition(key)}")
        return found

    def open_embedding(self, dataset: str, encoder: str, condition: str) -> EmbeddingArray:
        """An existing embedding array, to write chunks into (the one writer of those chunks)."""
        if self.root.read_only:
            raise StoreError(f"{self.path!r} is open read-only")
        g = self.checks.node(f"datasets/{dataset}/embeddings/{encoder}/{condition_key(condition)}")
        return EmbeddingArray(g, dataset, encoder, condition, self.files)

    def embeddings(self, dataset: str | None = None,
                   encoder: str | None = None) -> Iterator[tuple[str, str, str, bool]]:
        """Yield (dataset, encoder, condition, complete) for every embedding array (of ``dataset`` and
        ``encoder`` only, where given)."""
        held = self.tables.datasets()
        for d in [dataset] if dataset else held:
            if d not in held:
                continue
            with self.checks.reading(f"datasets/{d}/embeddings"):
                g = self.root.group["datasets"][d]
                found = []
                if "embeddings" in g:
                    groups = g["embeddings"]
                    for enc in sorted(groups.group_keys()):
                        if encoder is not None and enc != encoder:
                            continue
                        nodes = dict(groups[enc].groups())  # one listing, not a lookup per condition
                        for key in sorted(nodes):
                            found.append((d, enc, key_condition(key), bool(nodes[key].attrs.get("complete", False))))
            yield from found

    def read_embedding(self, dataset: str, encoder: str, condition: str) -> np.ndarray:
        """The full [row, feature] array; refuses an incomplete or damaged one (naming the chunk and the repair)."""
        g = self.group(dataset, encoder, condition)
        what = f"embeddings {dataset}/{encoder}/{condition}"
        if not g.attrs.get("complete", False):
            left = int((~read_robust(g["done"], False).astype(bool)).sum())
            raise StoreError(
                f"{what} in {self.path!r} are incomplete ({left} of "
                f"{g.attrs.get('n_chunks')} chunks missing): the extraction was interrupted. Resume it with "
                f"`crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
            )
        if generators.is_perturbed(condition) and generators.ATTR not in g.attrs:
            raise StoreError(generators.unrecorded(self.path, dataset, encoder, condition))
        with self.checks.reading(g.path):
            if "x" not in g:
                raise StoreError(f"{what} in {self.path!r} lack their array's metadata ({g.path}/x/zarr.json is "
                                 f"missing). To repair: {repair_hint(self.path, g.path)}")
            x = g["x"]
        problem = shape_problem(x, int(g.attrs.get("n_chunks", 0)), g.attrs["n_rows"])
        if problem:
            raise StoreError(f"{what} in {self.path!r}: {problem}. To repair: "
                             f"{repair_hint(self.path, x.path, decoded=True)}")
        # A complete array has a file for every chunk, each of its committed size: one stat a chunk, against
        # the sizes ``finalize`` copied from the commit record into the attributes read above (reading the
        # record itself is a file a chunk). A chunk re-encoded to the same size with other values is left to
        # `crs store verify`, which compares each chunk's CRC-32.
        self.checks.committed(x, [[int(b)] for b in g.attrs["chunk_bytes"]], what)
        return self.checks.checked_read(x, what, listed=True)

    def embedding_attrs(self, dataset: str, encoder: str, condition: str) -> dict[str, Any]:
        return dict(self.group(dataset, encoder, condition).attrs)

    def group(self, dataset: str, encoder: str, condition: str) -> zarr.Group:
        """The group of one embedding array (its x, done and commit arrays); StoreError, with the command that
        writes it, where there is none."""
        key = f"datasets/{dataset}/embeddings/{encoder}/{condition_key(condition)}"
        try:
            return self.checks.node(key)  # one metadata read; the friendly errors below only when it is not there
        except KeyError:
            pass
        self.tables.dataset(dataset)  # raises when the dataset is missing or not fully written
        raise StoreError(
            f"no embeddings for encoder {encoder!r}, dataset {dataset!r}, condition {condition!r} in "
            f"{self.path!r}; run `crs extract --encoder {encoder} --dataset {dataset} --store {self.path}`"
        )
