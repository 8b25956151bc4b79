"""Two writers creating the same store group at once (two `crs extract` into a new store)."""

from __future__ import annotations

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


def test_a_group_another_process_creates_between_zarrs_look_and_its_create_is_used(tmp_path, monkeypatch):
    """The same race through zarr itself: writer B's whole require_group is forced in between writer A's
    look for the group (absent) and its create of it, on every run; A gets B's group."""
    import asyncio
    import threading

    import zarr.core.group

    path = tmp_path / "s.zarr"
    zarr.open_group(path, mode="w")
    events, b_done = [], threading.Event()
    real = zarr.core.group.AsyncGroup.create_group

    def writer_b():
        require_group(zarr.open_group(path, mode="a"), "embeddings").attrs["by"] = "B"
        b_done.set()

    async def create_group(self, name, **kwargs):
        if not events:  # A's create, after its look found nothing: B creates the group first
            events.append("A looked")
            threading.Thread(target=writer_b).start()
            while not b_done.is_set():  # on zarr's event loop, which B's calls need too
                await asyncio.sleep(0.001)
            try:
                return await real(self, name, **kwargs)
            except zarr.errors.ContainsGroupError:
                events.append("A's create found B's group")
                raise
        return await real(self, name, **kwargs)

    monkeypatch.setattr(zarr.core.group.AsyncGroup, "create_group", create_group)
    got = require_group(zarr.open_group(path, mode="a"), "embeddings")
    assert events == ["A looked", "A's create found B's group"]
    assert isinstance(got, zarr.Group) and got.attrs["by"] == "B"
