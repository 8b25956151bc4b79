"""One embedding array written chunk by chunk, and resumed after a kill: what is pending, writing a chunk
with its commit record before its done flag, and marking the array complete."""

from __future__ import annotations

import numpy as np
import zarr

from crs.foundations.provenance import now
from crs.store.commits import chunk_keys, commit_record
from crs.store.errors import StoreError, writes
from crs.store.files import StoredFiles
from crs.store.nodes import read_robust, set_attrs, writing_every_chunk


class EmbeddingArray:
    """One (dataset, encoder, condition) array being written chunk by chunk, in ``group`` among the store's
    ``files``."""

    def __init__(self, group: zarr.Group, dataset: str, encoder: str, condition: str, files: StoredFiles,
                 arrays: dict[str, zarr.Array] | None = None):
        """``arrays``: x, done and commit as ``create_arrays`` just made them (else read from ``group``)."""
        self.group = group
        if arrays is not None:
            self.x, self.done, self.commit = arrays["x"], arrays["done"], arrays["commit"]
        else:
            self.x = writing_every_chunk(group["x"])  # a chunk without a file is a lost one
            self.done = group["done"]
            self.commit = group["commit"]
        self.files = files
        self.dataset, self.encoder, self.condition = dataset, encoder, condition

    @property
    def path(self) -> str:
        return self.files.path

    @property
    def chunk(self) -> int:
        return int(self.x.chunks[0])

    @property
    def n_chunks(self) -> int:
        return int(self.group.attrs["n_chunks"])

    @property
    def complete(self) -> bool:
        return bool(self.group.attrs.get("complete", False))

    def pending(self) -> np.ndarray:
        """Indices of chunks not yet written, or written but damaged since: a done chunk whose file is
        missing or not of its committed size. What `crs extract` re-does; a full decode of every chunk is
        ``crs store verify``'s job."""
        if self.n_chunks == 0:
            return np.zeros(0, dtype=np.int64)
        done = read_robust(self.done, False).astype(bool)[: self.n_chunks]
        if done.any():
            present = self.files.listing(self.x.path)
            sizes = np.array([present.get(k, -1) for k in chunk_keys(self.x)], dtype=np.int64)
            done &= sizes >= 0
            done &= sizes == read_robust(self.commit, 0)[: self.n_chunks, 0].astype(np.int64)
        return np.flatnonzero(~done)

    def chunk_rows(self, j: int) -> slice:
        return slice(j * self.chunk, min((j + 1) * self.chunk, self.x.shape[0]))

    @writes
    def write_chunk(self, j: int, values: np.ndarray) -> None:
        sl = self.chunk_rows(j)
        values = np.asarray(values)
        if values.shape != (sl.stop - sl.start, self.x.shape[1]):
            raise ValueError(f"chunk {j} needs shape {(sl.stop - sl.start, self.x.shape[1])}, got {values.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            cast = values.astype(self.x.dtype)
        if not np.all(np.isfinite(cast)):
            raise StoreError(
                f"{self.encoder} gave non-finite embeddings for {self.dataset}/{self.condition} chunk {j} "
                f"once cast to {self.x.dtype} (largest magnitude {np.nanmax(np.abs(values)):.3g}); "
                "pass --dtype float32 if the encoder's outputs exceed float16's range"
            )
        self.x[sl] = cast
        # the commit record, then the flag: both only after the data is written
        self.commit[j] = np.array(commit_record(self.files, self.x, (j, 0), cast), dtype=np.uint64)
        self.done[j] = True

    @writes
    def finalize(self) -> bool:
        """Mark complete when every chunk is written (a damaged chunk found since: not complete any more);
        returns whether it is."""
        if len(self.pending()) == 0:
            sizes = [int(b) for b in read_robust(self.commit, 0)[: self.n_chunks, 0]]
            if not self.complete:  # the time it became complete, not of every later run that found it so
                set_attrs(self.group, {"complete": True, "completed": now(), "chunk_bytes": sizes})
            elif self.group.attrs.get("chunk_bytes") != sizes:  # a chunk was written again since
                self.group.attrs["chunk_bytes"] = sizes
            return True
        if self.complete:
            self.group.attrs["complete"] = False
        return False
