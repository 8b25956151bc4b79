"""Two writers creating the same store group at once (two `crs extract` into a new store)."""

from __future__ import annotations

import multiprocessing

import zarr

from crs.store.nodes import require_group


def test_a_group_created_by_another_writer_meanwhile_is_used(tmp_path):
    """zarr raises ContainsGroupError when the group appears between its check and its write."""
    mine = zarr.open_group(tmp_path / "s.zarr", mode="w")
    theirs = zarr.open_group(tmp_path / "s.zarr", mode="a")
    theirs.require_group("embeddings").attrs["by"] = "the other writer"

    class Late:  # the check ran before the other writer's group existed
        def require_group(self, name):
            raise zarr.errors.ContainsGroupError(f"A group exists in store at path {name!r}")

        def __getitem__(self, name):
            return mine[name]

    got = require_group(Late(), "embeddings")
    assert isinstance(got, zarr.Group) and got.attrs["by"] == "the other writer"


def _create(path: str) -> str:
    try:
        require_group(zarr.open_group(path, mode="a"), "embeddings")
        return ""
    except Exception as exc:  # noqa: BLE001 - reported by the test
        return f"{type(exc).__name__}: {exc}"


def test_processes_racing_to_create_a_group_all_get_it(tmp_path):
    paths = []
    for k in range(60):
        zarr.open_group(tmp_path / f"{k}.zarr", mode="w")
        paths += [str(tmp_path / f"{k}.zarr")] * 4
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        errors = [e for e in pool.map(_create, paths, chunksize=1) if e]
    assert errors == []
    assert all("embeddings" in zarr.open_group(p, mode="r") for p in set(paths))
