"""Where a store lives: a local folder, a file:// URL or any fsspec URL, and opening its root group."""

from __future__ import annotations

import json
import os
import re
import warnings

import fsspec
import zarr
from zarr.core.group import AsyncGroup, GroupMetadata
from zarr.storage import FsspecStore, LocalStore, StorePath

from crs.store.errors import NoStore, StoreError

# zarr writes each metadata file through a temporary "<name>.<hex>.partial" beside it (also to check
# that a parent group exists, on every array it creates), so a listing of that folder by another
# thread (``crs.stages.steps.probe`` runs small pairs side by side) can meet one and warns that it is
# not part of the hierarchy; it never is, and the listing is right without it. Other strays still warn.
warnings.filterwarnings("ignore", message=r"Object at .*\.partial is not recognized as a component",
                        category=zarr.errors.ZarrUserWarning)

_ZARR_TEMPORARY = re.compile(r"zarr\.[0-9a-f]{32}\.partial")  # zarr's atomic write of a zarr.json


def local_path(path: str) -> str | None:
    """The file-system path of a store at ``path`` (a path or file:// URL); None for a remote URL."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if is_url(path) else path


def is_url(path: str) -> bool:
    """Whether ``path`` names an fsspec URL (s3://, gs://, az://, ...) rather than a local folder."""
    return "://" in path and not path.startswith("file://")


def url_storage_options(path: str, storage_options: dict | None = None) -> dict:
    """fsspec options for an object-store URL: ours are never credentials (those come from each
    system's own environment variables and config files: AWS_*, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS,
    AZURE_STORAGE_*, ...). Directory listings are not cached, because other processes (another
    run, Ray workers) add arrays and chunks behind this one's back."""
    if not is_url(path) or path.startswith("memory://"):
        return dict(storage_options or {})
    own = {"use_listings_cache": False}
    if path.split("://", 1)[0] in ("s3", "s3a"):
        # s3fs asks for an object's size (a HEAD request) before every whole-object read, to split reads
        # larger than its block size (50 MiB) over several connections. Nearly all of a store's objects
        # (metadata, embedding chunks of a few MiB) are far smaller, so that HEAD would double the round
        # trips of every read. Only a prediction chunk (up to 64 MiB) can be larger; it is read in one stream
        own["max_concurrency"] = 1
    return {**own, **(storage_options or {})}


def open_root(path: str, mode: str, storage_options: dict | None = None) -> zarr.Group:
    """The root group of the store at ``path``; a path that is not a store (or not a readable one) is a
    StoreError saying what to pass instead."""
    if path.startswith("file://"):
        path = path[len("file://") :]  # a local path: the local store writes chunks atomically
    remote = "://" in path
    storage_options = url_storage_options(path, storage_options)
    if not remote:
        _check_folder(path, mode)
    else:
        _check_url(path, mode, storage_options)
    kwargs = {"storage_options": storage_options} if storage_options else {}
    try:
        try:
            return zarr.open_group(store=path, mode=mode, **kwargs)
        except zarr.errors.ContainsGroupError:
            # another process created the new store between our look and our create: open theirs
            return zarr.open_group(store=path, mode=mode, **kwargs)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
        raise NoStore(f"no CRS store at {path!r}; run `crs extract` first (or pass --store)") from exc
    except Exception as exc:  # zarr raises several types for a node that is an array, bad metadata, ...
        if root_problem(path, storage_options):
            raise StoreError(damaged_root_message(path, exc)) from exc
        raise StoreError(f"{path!r} cannot be opened as a CRS store: {exc}. If it is one, run "
                         f"`crs store verify {path}`, which says what is damaged") from exc


def damaged_root_message(path: str, exc: BaseException | None = None) -> str:
    """The refusal of a store whose root metadata (its ``zarr.json``) is damaged or missing, with the repair."""
    why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    return (f"the store {path!r} has damaged root metadata: its zarr.json is not Zarr v3 group metadata"
            f"{why}; the arrays below it are not lost. To repair: run `crs store verify --repair {path}` (it writes "
            "that file anew, with a new store identity, and checks every array below it)")


def root_problem(path: str, storage_options: dict | None = None) -> str | None:
    """What is wrong with the root metadata of the store at ``path`` ('damaged', or 'missing' where the
    store's ``datasets`` group is there without it), or None (sound, or no store there at all)."""
    fs, root = fsspec.core.url_to_fs(path, **url_storage_options(path, storage_options))
    root = root.rstrip("/")
    try:
        meta = json.loads(fs.cat_file(f"{root}/zarr.json"))
    except FileNotFoundError:
        return "missing" if fs.exists(f"{root}/datasets/zarr.json") else None
    except (ValueError, UnicodeDecodeError):
        return "damaged"
    sound = isinstance(meta, dict) and meta.get("zarr_format") == 3 and meta.get("node_type") == "group"
    return None if sound else "damaged"


def open_below_root(path: str, storage_options: dict | None = None) -> zarr.Group:
    """The root group of the store at ``path``, read only, without reading its own metadata (which is damaged):
    its nodes below read as usual. For ``crs store verify``, which checks what it can."""
    local = local_path(path)
    if local is not None:
        where = LocalStore(local, read_only=True)
    else:
        options = url_storage_options(path, storage_options)
        where = FsspecStore.from_url(path, storage_options=options or None, read_only=True)
    return zarr.Group(AsyncGroup(metadata=GroupMetadata(), store_path=StorePath(where, "")))


class StoreRoot:
    """The root group of the store at ``path``, shared by the parts of a ``Store``: ``group`` is replaced whole
    by ``reopen`` (after files changed under it: a repair), and every part sees the new one."""

    def __init__(self, path: str, group: zarr.Group, *, read_only: bool, storage_options: dict | None = None):
        self.path = str(path)
        self.group = group
        self.read_only = read_only
        self.storage_options = dict(storage_options or {})

    def opened_again(self) -> zarr.Group:
        """The root group opened anew, which sees the files as they are now."""
        kwargs = {"storage_options": self.storage_options} if self.storage_options else {}
        path = self.path[len("file://"):] if self.path.startswith("file://") else self.path
        return zarr.open_group(store=path, mode="r" if self.read_only else "a", **kwargs)

    def reopen(self) -> None:
        self.group = self.opened_again()


def _check_folder(path: str, mode: str) -> None:
    """A local path must be a store, a new or empty folder, or (to write) one another process is creating."""
    if os.path.isfile(path):
        raise StoreError(f"{path!r} is a file, not a CRS store; pass --store with a directory path")
    # another process creating this store at the same moment has only its zarr.json's temporary
    # file there yet ("zarr.<hex>.partial"): that directory is a store being made, not a stranger's
    held = [e for e in os.listdir(path) if not _ZARR_TEMPORARY.fullmatch(e)] if os.path.isdir(path) else []
    if held and root_problem(path) == "missing":
        raise StoreError(damaged_root_message(path))
    if held and not os.path.exists(os.path.join(path, "zarr.json")):
        raise StoreError(
            f"{path!r} is a non-empty directory that is not a Zarr store; refusing to write into it. "
            "Pass --store with a new or existing CRS store path"
        )
    if mode == "r" and not os.path.exists(os.path.join(path, "zarr.json")):
        raise NoStore(f"no CRS store at {path!r}; run `crs extract` first (or pass --store)")


def _check_url(url: str, mode: str, storage_options: dict) -> None:
    """The object-store counterpart of the local checks: an existing prefix must be a Zarr store."""
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except (ImportError, ValueError) as exc:  # no fsspec backend for that protocol (s3fs, gcsfs, adlfs)
        raise StoreError(f"cannot open the store URL {url!r}: {exc}. For s3:// install crs-bench[s3] "
                         "(s3fs); gs:// needs gcsfs and az:// adlfs") from exc
    root = root.rstrip("/")
    try:
        has_meta = fs.exists(f"{root}/zarr.json")
        has_other = not has_meta and fs.exists(root) and bool(fs.ls(root, detail=False))
    except FileNotFoundError:
        has_meta = has_other = False
    except PermissionError as exc:
        raise StoreError(f"no permission to read {url!r} ({exc}); check the credentials in the environment "
                         "(e.g. AWS_PROFILE or AWS_ACCESS_KEY_ID for s3://)") from exc
    if has_other:
        raise StoreError(f"{url!r} holds objects but no Zarr store; refusing to write into it. Pass --store "
                         "with a new or existing CRS store URL")
    if mode == "r" and not has_meta:
        raise NoStore(f"no CRS store at {url!r}; run `crs extract` first (or pass --store)")
