"""The files under a store, local or at an fsspec URL: listing, sizes, reading and removing them
(integrity checks and repairs look at files, not at Zarr's view of them)."""

from __future__ import annotations

import os
import shutil

import fsspec

from crs.store.location import local_path, url_storage_options


class StoredFiles:
    """The files under the store at ``path`` (a local folder, a file:// URL or an fsspec URL opened with
    ``storage_options``)."""

    def __init__(self, path: str, storage_options: dict | None = None):
        self.path = str(path)
        self.storage_options = dict(storage_options or {})

    def filesystem(self):
        """(fsspec filesystem, root path in it) of an object-store URL, for files beside the Zarr
        hierarchy (locks); credentials as for the store itself."""
        fs, root = fsspec.core.url_to_fs(self.path, **url_storage_options(self.path, self.storage_options))
        return fs, root.rstrip("/")

    def local_root(self) -> str | None:
        """The store's folder on this machine; None for an object-store URL."""
        return local_path(self.path)

    def listing(self, prefix: str) -> dict[str, int]:
        """{key relative to ``prefix``: stored bytes} of every file under store key ``prefix`` (one listing;
        hidden names, such as a writer's temporary files, left out)."""
        out: dict[str, int] = {}
        root = self.local_root()
        if root is not None:
            base = os.path.join(root, prefix)
            for dirpath, _, names in os.walk(base):
                for name in names:
                    if name.startswith("."):
                        continue
                    full = os.path.join(dirpath, name)
                    try:
                        out[os.path.relpath(full, base).replace(os.sep, "/")] = os.path.getsize(full)
                    except FileNotFoundError:  # removed while listing
                        pass
            return out
        fs, r = self.filesystem()
        base = f"{r}/{prefix}".strip("/")
        try:
            found = fs.find(base, detail=True)
        except FileNotFoundError:
            return out
        for name, info in found.items():
            rel = name.strip("/")[len(base) :].lstrip("/")
            if rel and not rel.rsplit("/", 1)[-1].startswith("."):
                out[rel] = int(info.get("size") or 0)
        return out

    def file_size(self, key: str) -> int:
        """Stored bytes of the file at store key ``key`` (0 when there is none)."""
        root = self.local_root()
        try:
            if root is not None:
                return os.path.getsize(os.path.join(root, key))
            fs, r = self.filesystem()
            return int(fs.size(f"{r}/{key}") or 0)
        except FileNotFoundError:
            return 0

    def remove(self, key: str) -> None:
        """Delete the file or the subtree at store key ``key`` (repairs only)."""
        root = self.local_root()
        if root is not None:
            full = os.path.join(root, key)
            if os.path.isdir(full):
                shutil.rmtree(full)
            elif os.path.exists(full):
                os.remove(full)
            return
        fs, r = self.filesystem()
        if fs.exists(f"{r}/{key}"):
            fs.rm(f"{r}/{key}", recursive=True)

    def read_bytes(self, key: str) -> bytes:
        """The bytes of the file at store key ``key`` (FileNotFoundError where there is none)."""
        root = self.local_root()
        if root is not None:
            with open(os.path.join(root, key), "rb") as f:
                return f.read()
        fs, r = self.filesystem()
        return fs.cat_file(f"{r}/{key}")

    def missing_files(self, prefix: str, keys: list[str]) -> list[str]:
        """Those of ``keys`` (relative to store key ``prefix``) that have no file: a stat each on a local
        store (cheaper than listing a folder a chunk), one listing on an object store."""
        root = self.local_root()
        if root is not None:
            base = os.path.join(root, prefix)
            return [k for k in keys if not os.path.isfile(os.path.join(base, k))]
        present = self.listing(prefix)
        return [k for k in keys if k not in present]

    def linked(self, prefix: str, keys: list[str]) -> list[tuple[str, str]]:
        """(store key, target) of each symbolic link on the way to store key ``prefix`` (its folders, its
        ``zarr.json``) or among ``keys`` (files relative to it), on a local store; an lstat each. A store reads
        only its own files: a link's target can change or vanish under it."""
        root = self.local_root()
        if root is None:
            return []
        parts = prefix.strip("/").split("/")
        on_way = ["/".join(parts[: i + 1]) for i in range(len(parts))] + [f"{prefix}/zarr.json"]
        found = []
        for key in on_way + [f"{prefix}/{k}" for k in keys]:
            full = os.path.join(root, key)
            if os.path.islink(full):
                found.append((key, os.readlink(full)))
        return found

    def chunk_sizes(self, prefix: str, keys: list[str]) -> list[int | None]:
        """Stored bytes of each of ``keys`` (relative to store key ``prefix``; None: no file): a stat each on
        a local store, one listing on an object store."""
        root = self.local_root()
        if root is None:
            present = self.listing(prefix)
            return [present.get(k) for k in keys]
        base = os.path.join(root, prefix)
        sizes = []
        for k in keys:
            try:
                sizes.append(os.path.getsize(os.path.join(base, k)))
            except FileNotFoundError:
                sizes.append(None)
        return sizes
