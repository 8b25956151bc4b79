"""What was committed, and reads checked against it: each chunk's commit record (stored bytes, CRC-32 of its
values), a chunk's presence and decoding, and the metadata files on the way to a node.

``Checks``, a part of ``Store``, refuses what does not match, naming the array, the chunk and the command that
repairs it (``crs.store.repair``)."""

from __future__ import annotations

import contextlib
import json
import zlib

import numpy as np
import zarr

from crs.foundations.errors import CrsError
from crs.store.errors import StoreError
from crs.store.files import StoredFiles
from crs.store.location import StoreRoot
from crs.store.repair import next_step, repair_hint


def chunk_keys(arr: zarr.Array) -> list[str]:
    """The store keys (relative to the array) of every chunk of ``arr``, in C order of chunk index."""
    return [arr.metadata.encode_chunk_key(c) for c in np.ndindex(*arr.cdata_shape)]


def values_crc(values: np.ndarray) -> int:
    """CRC-32 of an array's values in C order (the commit record's digest of what was written). Text (ids,
    groups) is digested as its UTF-8 words, each ended by a NUL: numpy's in-memory forms of text (fixed width,
    variable-width StringDType) hold other bytes for the same words."""
    values = np.asarray(values)
    if values.dtype.kind in "OUST":
        return zlib.crc32("".join(f"{v}\0" for v in values.ravel().tolist()).encode())
    return zlib.crc32(np.ascontiguousarray(values).tobytes())


def commit_record(files: StoredFiles, arr: zarr.Array, coords: tuple[int, ...], values: np.ndarray) -> list[int]:
    """The commit record of chunk ``coords`` of ``arr`` (among ``files``), just written with ``values``: [stored
    bytes of its file, CRC-32 of its values]. Every array whose values feed a number keeps one per chunk:
    embeddings in their ``commit`` array, predictions in their ``commit`` attribute."""
    return [files.file_size(f"{arr.path}/{arr.metadata.encode_chunk_key(coords)}"), values_crc(values)]


def commit_records(files: StoredFiles, arr: zarr.Array, values: np.ndarray) -> list[list[int]]:
    """The commit record of every chunk of ``arr`` (in C order), all of it just written with ``values``."""
    return [commit_record(files, arr, c, chunk_values(arr, values, c)) for c in np.ndindex(*arr.cdata_shape)]


def chunk_values(arr: zarr.Array, values: np.ndarray, coords: tuple[int, ...]) -> np.ndarray:
    """The part of ``values`` (all of ``arr``) that chunk ``coords`` holds."""
    return values[tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, arr.chunks))]


def record_problem(size: int | None, record, values: np.ndarray | None = None) -> str | None:
    """What is wrong with one chunk against its commit record (stored bytes, CRC-32 of its values), or None.
    ``size``: the bytes stored now (None: no file); ``values``: the decoded values, where they were read
    (else only the size is compared)."""
    if size is None:
        return "missing (its file was deleted)"
    if int(record[0]) != size:
        return f"not as committed ({size} bytes stored, {int(record[0])} committed: truncated or replaced)"
    if values is not None and int(record[1]) != values_crc(values):
        return "not as committed (the CRC-32 of its values differs: altered or replaced)"
    return None


def shape_problem(x, n_chunks: int, n_rows: int) -> str | None:
    """What is wrong with an embedding array's metadata (``x``'s shape against the row count and chunk count
    it was created with, kept in its group's attributes), or None. An altered ``zarr.json`` that is still
    valid JSON is only caught this way."""
    rows, chunk = int(x.shape[0]), int(x.chunks[0])
    if rows != int(n_rows):
        return f"its metadata says {rows} rows but it was created with {n_rows} (the zarr.json was altered)"
    if rows and -(-rows // chunk) != n_chunks:
        return (f"its metadata says {rows} rows in chunks of {chunk} but it was created with {n_chunks} chunks "
                "(the zarr.json was altered)")
    return None


class Checks:
    """Reads of a store checked against what was committed: ``files`` are the store's files, ``root`` its root
    group."""

    def __init__(self, files: StoredFiles, root: StoreRoot):
        self.files = files
        self.root = root

    @property
    def path(self) -> str:
        return self.files.path

    def committed(self, arr: zarr.Array, records, what: str, values: np.ndarray | None = None) -> None:
        """Refuse ``arr`` (StoreError naming the chunk and the repair) where a chunk's file is missing or
        differs from its commit record (``records``: one [bytes, CRC-32] per chunk in C order, or only
        [bytes]); ``values``, all of ``arr`` where already read, also has each chunk's CRC compared."""
        keys = chunk_keys(arr)
        self.refuse_links(arr, keys, what)
        sizes = self.files.chunk_sizes(arr.path, keys)
        found: dict[str, list[str]] = {}
        for i, (coords, key, size) in enumerate(zip(np.ndindex(*arr.cdata_shape), keys, sizes)):
            part = None if values is None else chunk_values(arr, values, coords)
            problem = record_problem(size, records[i], part)
            if problem:
                found.setdefault(problem, []).append(key)
        for problem, bad in found.items():
            raise self._damage(arr.path, bad, problem, what, decoded=values is not None)

    def missing_chunks(self, arr: zarr.Array) -> list[str]:
        """Chunk keys of ``arr`` with no stored file."""
        return self.files.missing_files(arr.path, chunk_keys(arr))

    def bad_chunks(self, arr: zarr.Array) -> list[str]:
        """Chunk keys of ``arr`` whose stored bytes do not decode (checksum mismatch, truncated, garbled)."""
        bad = []
        for coords, key in zip(np.ndindex(*arr.cdata_shape), chunk_keys(arr)):
            try:
                arr.blocks[coords]
            except (MemoryError, OSError):
                raise
            except Exception:  # noqa: BLE001 - any decoder's complaint about these bytes is damage
                bad.append(key)
        return bad

    def checked_read(self, arr: zarr.Array, what: str, *, listed: bool = False) -> np.ndarray:
        """All of ``arr``, refused with a StoreError naming the array, the chunk and the repair when a chunk
        is missing or does not decode. ``what`` names the array for the user; ``listed``: the caller has
        checked already that every chunk's file is there."""
        if not listed:  # else the caller checked the files (``committed``)
            self.refuse_links(arr, chunk_keys(arr), what)
        missing = [] if listed else self.missing_chunks(arr)
        if missing:
            raise self._damage(arr.path, missing, "missing (its file was deleted)", what)
        try:
            return np.asarray(arr[...])
        except (MemoryError, OSError, CrsError):
            raise
        except Exception as exc:  # noqa: BLE001 - confirmed below: damage only if a chunk fails on its own
            bad = self.bad_chunks(arr)
            if not bad:
                raise
            raise self._damage(arr.path, bad, f"damaged ({exc})", what, decoded=True) from exc

    def refuse_links(self, arr: zarr.Array, keys: list[str], what: str) -> None:
        """Refuse ``arr`` (StoreError naming the link and the repair) where a folder on the way to it, its
        metadata or one of its chunk files ``keys`` is a symbolic link (docs/pipeline.md: a store reads only its
        own files)."""
        links = self.files.linked(arr.path, keys)
        if links:
            key, target = links[0]
            more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
            raise StoreError(
                f"{what}: {key!r} in {self.path!r} is a symbolic link (to {target}){more}, and a store reads only "
                f"its own files. To repair: run `crs store verify --repair {self.path}` (it removes the link), "
                f"then {next_step(self.path, arr.path)}")

    def _damage(self, key: str, chunks: list[str], problem: str, what: str, decoded: bool = False) -> StoreError:
        shown = ", ".join(chunks[:5]) + (f" and {len(chunks) - 5} more" if len(chunks) > 5 else "")
        return StoreError(
            f"{what}: chunk {shown} of array {key!r} in {self.path!r} is {problem}. "
            f"To repair: {repair_hint(self.path, key, decoded=decoded)}"
        )

    # ------------------------------------------------------------------ metadata
    def damaged_metadata(self, prefix: str = "") -> list[str]:
        """Store keys of the ``zarr.json`` files under ``prefix`` that do not parse as Zarr metadata."""
        prefix = prefix.strip("/")
        keys = (f"{prefix}/{rel}".strip("/") for rel in sorted(self.files.listing(prefix))
                if rel.rsplit("/", 1)[-1] == "zarr.json")
        return [k for k in keys if self.damaged_metadata_file(k)]

    def damaged_metadata_file(self, key: str) -> bool:
        """Whether the file at store key ``key`` is there and does not parse as Zarr v3 metadata."""
        try:
            meta = json.loads(self.files.read_bytes(key))
        except FileNotFoundError:
            return False
        except (ValueError, UnicodeDecodeError):
            return True
        return not (isinstance(meta, dict) and meta.get("zarr_format") == 3
                    and meta.get("node_type") in ("group", "array"))

    def metadata_error(self, exc: BaseException, key: str) -> StoreError | None:
        """A StoreError naming the damaged ``zarr.json`` files on the way to ``key`` or under it, if any
        (else None: the error was not damaged metadata)."""
        parts = key.strip("/").split("/") if key.strip("/") else []
        bad = []
        for i in range(len(parts) + 1):  # the root, each ancestor, the node itself
            meta = "/".join(parts[:i] + ["zarr.json"])
            if self.files.file_size(meta) and self.damaged_metadata_file(meta):
                bad.append(meta)
        if not bad:
            bad = self.damaged_metadata(key.strip("/"))
        if not bad:
            return None
        return StoreError(
            f"damaged Zarr metadata in {self.path!r}: {', '.join(bad)} ({type(exc).__name__}: {exc}). "
            f"To repair: {repair_hint(self.path, bad[0].rsplit('/', 1)[0] if '/' in bad[0] else '', decoded=True)}"
        )

    def node(self, key: str):
        """The group or array at ``key``; damaged metadata on the way is a StoreError naming the file."""
        with self.reading(key):
            return self.root.group[key]

    @contextlib.contextmanager
    def reading(self, key: str = ""):
        """Damaged metadata met inside the block (on the way to ``key`` or under it) becomes a StoreError
        naming the file; other errors pass unchanged."""
        try:
            yield
        except (MemoryError, OSError, CrsError, KeyError):
            raise
        except Exception as exc:  # noqa: BLE001 - confirmed by parsing the metadata files themselves
            err = self.metadata_error(exc, key)
            if err is None:
                raise
            raise err from exc
