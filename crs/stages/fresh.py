"""A store that an extraction made and then wrote no embedding into is removed again when it fails.

``crs extract`` opens (and so creates) its store before a model is loaded, since the store says which
chunks are pending and so whether a model is needed at all. When the load then fails (a broken
checkpoint, an architecture timm does not know), a new store would be left holding dataset tables and
empty arrays: later commands would find it at the default path and take it for the user's outputs (`crs
probe --all` would say 'nothing to probe' instead of finding the demo's). Weights that cannot be had are refused
before the store is opened (``crs.extract.models.preflight``); this is for the rest.

Only a local store this run created is removed, and only while it holds no committed chunk of any
embedding or prediction array and no other live run holds one of its locks (a lock file names its
holder while held and is emptied on release: ``crs.store.locks``).
"""

from __future__ import annotations

import os
import shutil


def is_new(path: str) -> bool:
    """Whether ``path`` names a local store that does not exist yet (an object store URL: False)."""
    from crs.store.location import local_path  # zarr, fsspec: crs --help loads no store

    here = local_path(str(path))
    return here is not None and not os.path.exists(os.path.join(here, "zarr.json"))


def remove_if_unused(path: str) -> bool:
    """Remove the local store at ``path`` where it holds nothing committed and no live lock; True if removed."""
    from crs.store.location import local_path  # zarr, fsspec: crs --help loads no store

    here = local_path(str(path))
    if here is None or not os.path.isdir(here):
        return False
    locks = os.path.join(here, ".crs-locks")
    for name in os.listdir(locks) if os.path.isdir(locks) else []:
        try:
            with open(os.path.join(locks, name), "rb") as f:
                if f.read(1):
                    return False  # held by another run (ours are released by now)
        except OSError:
            return False
    datasets = os.path.join(here, "datasets")
    for d in os.listdir(datasets) if os.path.isdir(datasets) else []:
        for kind in ("embeddings", "predictions"):  # arrays are created with metadata only (zarr.json)
            for _, _, files in os.walk(os.path.join(datasets, d, kind)):
                if any(f != "zarr.json" for f in files):
                    return False  # a chunk was written: the store holds data
    shutil.rmtree(here, ignore_errors=True)
    return True
