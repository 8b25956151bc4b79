"""Creating and writing Zarr nodes the way every part of the store does: each array with a checksum in every
chunk and every chunk stored, attributes merged in one write, groups that another writer may create at once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import zarr
from zarr.codecs import ZstdCodec
from zarr.core.group import GroupMetadata

# Every array this store creates: zstd with its checksum of each chunk's content, and every chunk stored
# (a chunk equal to the fill value too), so that a missing chunk file means damage.
CHECKED = {"compressors": (ZstdCodec(level=0, checksum=True),), "config": {"write_empty_chunks": True}}


def create_array(parent: zarr.Group, name: str, **kwargs) -> zarr.Array:
    """``parent.create_array(name, **kwargs)`` with ``CHECKED``."""
    return parent.create_array(name, **kwargs, **CHECKED)


def writing_every_chunk(arr: zarr.Array) -> zarr.Array:
    """``arr`` opened to store every chunk it writes (one equal to the fill value too), as ``CHECKED`` asks."""
    return arr.with_config(CHECKED["config"])


def set_attrs(node: zarr.Group | zarr.Array, values: dict[str, Any]) -> None:
    """Merge ``values`` into ``node``'s attributes in one write of its metadata file.

    zarr 3's ``node.attrs.update(d)`` is MutableMapping's: it rewrites the whole ``zarr.json`` once per
    key, so a kill between two keys leaves only the first ones written (a dataset with its task and
    classes but no row order, which a resumed run would read as complete). ``update_attributes``
    writes them all at once; every write of more than one attribute in this store goes through here."""
    node.update_attributes(dict(values))


def create_arrays(parent: zarr.Group, specs: dict[str, dict], *, overwrite: bool = False,
                  group: str | None = None) -> tuple[zarr.Group, dict[str, zarr.Array]]:
    """Create the arrays ``specs`` (name -> ``create_array`` keywords; ``CHECKED`` is added) under ``parent``, or
    under ``group``, a new group of it written just before them, writing each node's metadata file once;
    ``overwrite`` replaces what is there (chunks too). Returns (the group holding them, the arrays by name).

    zarr's ``create_array`` and ``create_group`` first check, and write where missing, the metadata of every
    group above the new node, two requests per level and node: on object storage some fifty round trips to
    create one embedding condition five levels down. ``create_hierarchy`` reads each group above once for
    all the nodes and writes them side by side, in no set order; a new ``group`` and its arrays read only
    their own metadata files (``_write_nodes``). The new group is written first, on its own (as create_group
    then create_array do), and a caller that needs more order writes what must come last afterwards. The
    arrays' metadata is built in memory by ``create_array`` itself, so the files are byte for byte the ones
    it writes; the arrays come back writing every chunk, as ``CHECKED`` asks."""
    memory = zarr.storage.MemoryStore()
    nodes = {name: zarr.create_array(memory, name=name, **kw, **CHECKED).metadata for name, kw in specs.items()}
    if group and not overwrite:
        # the group first, on its own: arrays whose group was never written would block a re-run's creating it
        holder = _write_nodes(parent, {group: GroupMetadata()})[group]
        made = _write_nodes(holder, nodes)
    elif group:
        holder = dict(parent.create_hierarchy({group: GroupMetadata()}, overwrite=overwrite))[group]
        made = dict(holder.create_hierarchy(nodes, overwrite=overwrite))
    else:
        holder, made = parent, dict(parent.create_hierarchy(nodes, overwrite=overwrite))
    return holder, {name: made[name].with_config(CHECKED["config"]) for name in specs}


def _write_nodes(parent: zarr.Group, nodes: dict) -> dict:
    """Write the metadata of ``nodes`` (name -> metadata) into ``parent``, where none of them exists, and
    return the nodes by name.

    ``create_hierarchy`` first reads every group above the new nodes and each node's own metadata file, to
    refuse what exists: on object storage about 50 requests to create one embedding condition (a group and
    its three arrays five levels down), most of a new extraction's requests. The groups above are there
    (``parent`` was opened), so only each node's own metadata file is looked for (ContainsGroupError or
    ContainsArrayError where one is found, as ``create_hierarchy`` raises), and the nodes are then written
    as ``create_hierarchy`` ends by writing them (zarr's ``create_nodes``). Where this zarr has no
    ``create_nodes``, ``create_hierarchy`` does it all."""
    try:
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.group import _parse_async_node, create_nodes
        from zarr.core.sync import sync
    except ImportError:  # another zarr 3 layout: the reads are only slower
        return dict(parent.create_hierarchy(nodes))
    prefix = f"{parent.path}/" if parent.path else ""
    paths = {name: prefix + name for name in nodes}

    async def there() -> list:  # a read, not exists(): on object storage a missing key costs a HEAD and a LIST
        return await asyncio.gather(*(parent.store.get(f"{path}/zarr.json", prototype=default_buffer_prototype())
                                      for path in paths.values()))

    for (name, meta), found in zip(nodes.items(), sync(there())):
        if found is not None:  # never over a node, as create_hierarchy refuses (one request for each node)
            errors = zarr.errors
            error = errors.ContainsGroupError if isinstance(meta, GroupMetadata) else errors.ContainsArrayError
            raise error(f"a node exists in store {parent.store!r} at path {paths[name]!r}")

    async def written() -> dict:
        return {key[len(prefix):]: node async for key, node in
                create_nodes(store=parent.store, nodes={paths[name]: meta for name, meta in nodes.items()})}

    made = sync(written())
    return {name: _parse_async_node(made[name]) for name in nodes}


def require_group(parent: zarr.Group, name: str) -> zarr.Group:
    """``parent``'s group ``name``, created if absent.

    Two writers creating the same group at once (two ``crs extract`` runs of different encoders into a
    new store both create ``datasets/<d>/embeddings``) make zarr's ``require_group`` raise
    ContainsGroupError in the slower one: the group it found is the one it asked for, so it is used.
    """
    try:
        return parent.require_group(name)
    except zarr.errors.ContainsGroupError:
        return parent[name]


def as_strings(values) -> np.ndarray:
    """Stored strings as a fixed-width numpy unicode array (numpy's StringDType casts poorly)."""
    values = np.asarray(values).tolist()
    return np.array(values, dtype=str) if values else np.zeros(0, dtype=str)


def as_json(value: Any) -> Any:
    """A value as it reads back from JSON attributes (tuples become lists)."""
    return json.loads(json.dumps(value))


def read_robust(arr: zarr.Array, fill) -> np.ndarray:
    """All of a small record array, chunks that do not decode read as ``fill`` (i.e. not committed)."""
    try:
        return np.asarray(arr[...])
    except (MemoryError, OSError):
        raise
    except Exception:  # noqa: BLE001 - a damaged record chunk means "not committed": that chunk is redone
        out = np.full(arr.shape, fill, dtype=arr.dtype)
        for coords in np.ndindex(*arr.cdata_shape):
            sl = tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, arr.chunks))
            try:
                out[sl] = arr.blocks[coords]
            except (MemoryError, OSError):
                raise
            except Exception:  # noqa: BLE001
                pass
        return out
