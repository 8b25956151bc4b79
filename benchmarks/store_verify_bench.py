"""Reading cost of the store's integrity checks, side by side with a read that checks nothing.

One store holds a dataset with a clean embedding array and ``--conditions`` test-only arrays,
float16, chunked as ``crs extract`` does (256 rows a chunk by default), written as the store
writes now (zstd with its content checksum; every chunk stored; a commit record per chunk) and
read with ``Store.read_embedding``: one listing of the chunk files (every chunk present), and
zstd's check of each chunk's checksum in the decode. The same values are copied into a store
written as before the integrity work (zstd, no checksum) and read the store's way to each array
(``Store.embedding_arrays.group``) then ``x[...]``: the same path without any check. A third copy
with Zarr's crc32c codec after zstd, read that bare way, is the alternative the store did not
take (``crc32c_*``).

The page cache is warm for all (the best of ``--repeat`` reads each, in alternating order).
``overhead`` = checked / plain - 1 is the reading cost of the checks, next to the 5 % the
issue allows of a probe run's read time; ``*_cpu`` the same in CPU time of all threads
(steadier than wall time on a machine shared with others). Also timed: ``pending()`` of every
array (what each `crs extract` start pays) and a full ``verify`` (decodes every chunk).
The last line is one JSON object. Usage:

    python benchmarks/store_verify_bench.py [--rows 20000] [--width 768] [--conditions 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from zarr.codecs import Crc32cCodec, ZstdCodec

from crs.store import DatasetTable, EmbeddingShape, Store, nodes, store_order, verify


def dataset_table(n: int) -> DatasetTable:
    rng = np.random.default_rng(0)
    split = rng.choice(np.array([0, 1, 2], dtype=np.int8), size=n, p=[0.2, 0.1, 0.7])
    order = store_order(split)
    return DatasetTable(
        name="bench", ids=np.array([f"img{i:07d}" for i in range(n)])[order], labels=(np.arange(n) % 5)[order],
        split=split[order], group=np.array([f"p{i // 3}" for i in range(n)])[order],
        attrs={"task": "multiclass", "classes": list("abcde"), "ordinal": False, "shift_target": None},
    )


def build(path: Path, n: int, width: int, chunk: int, conditions: int) -> tuple[Store, list[str]]:
    """The checked store, written through the store's own writer."""
    store = Store(str(path))
    table = dataset_table(n)
    store.write_dataset(table)
    rng = np.random.default_rng(1)
    names = ["clean"] + [f"gaussian_noise@{i}" for i in range(1, conditions + 1)]
    for cond in names:
        rows = n if cond == "clean" else table.n_test
        arr = store.embedding("bench", "enc", cond, EmbeddingShape(rows="all" if cond == "clean" else "test",
                                                                   n_rows=rows, width=width, chunk=chunk))
        for j in arr.pending():
            sl = arr.chunk_rows(j)
            arr.write_chunk(j, rng.standard_normal((sl.stop - sl.start, width), dtype=np.float32))
        assert arr.finalize()
    return store, names


def copy(store: Store, names: list[str], path: Path, compressors) -> Store:
    """The same values in a store whose arrays have other ``compressors`` (``CHECKED`` swapped while written)."""
    saved = nodes.CHECKED
    nodes.CHECKED = {**saved, "compressors": compressors}
    try:
        out = Store(str(path))
        out.write_dataset(store.dataset("bench"))
        for cond in names:
            x = store.read_embedding("bench", "enc", cond)
            chunk = store.root[f"datasets/bench/embeddings/enc/{cond}/x"].chunks[0]
            arr = out.embedding("bench", "enc", cond, EmbeddingShape(rows="all" if cond == "clean" else "test",
                                                                     n_rows=len(x), width=x.shape[1], chunk=chunk))
            for j in arr.pending():
                arr.write_chunk(j, x[arr.chunk_rows(j)])
            assert arr.finalize()
    finally:
        nodes.CHECKED = saved
    return out


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of every thread of this process) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def best(fn, repeat: int) -> float:
    return min(timed(fn)[0] for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--conditions", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, names = build(Path(tmp) / "checked.zarr", args.rows, args.width, args.chunk, args.conditions)
        plain = copy(store, names, Path(tmp) / "plain.zarr", (ZstdCodec(level=0),))  # as before the checks
        crc = copy(store, names, Path(tmp) / "crc32c.zarr", (ZstdCodec(level=0), Crc32cCodec()))
        reader = Store(str(Path(tmp) / "checked.zarr"), mode="r")

        def read_checked():
            return sum(float(reader.read_embedding("bench", "enc", c)[0, 0]) for c in names)

        def bare(root: Store):  # the store's own way to the array, then x[...]: no listing, no checksum
            return lambda: sum(float(np.asarray(root.embedding_arrays.group("bench", "enc", c)["x"][...])[0, 0])
                               for c in names)

        assert read_checked() == bare(plain)() == bare(crc)()  # the same values
        inf = (float("inf"), float("inf"))
        checked = plain_s = crc_s = inf
        pairs = []  # CPU ratio checked / plain of reads taken one after the other: steadier under others' load
        for _ in range(args.repeat):  # alternate, so that none gets a warmer machine
            c, p = timed(read_checked), timed(bare(plain))
            checked, plain_s = tuple(map(min, checked, c)), tuple(map(min, plain_s, p))
            crc_s = tuple(map(min, crc_s, timed(bare(crc))))
            pairs.append(c[1] / p[1])
        writer = Store(str(Path(tmp) / "checked.zarr"))
        arrays = [writer.embedding("bench", "enc", c, EmbeddingShape(
                                   rows="all" if c == "clean" else "test",
                                   n_rows=writer.root[f"datasets/bench/embeddings/enc/{c}/x"].shape[0],
                                   width=args.width, chunk=args.chunk)) for c in names]
        pending_s = best(lambda: [a.pending() for a in arrays], args.repeat)
        t = time.perf_counter()
        findings = verify(str(Path(tmp) / "checked.zarr"))
        verify_s = time.perf_counter() - t
        assert findings == []
        n_chunks = sum(a.n_chunks for a in arrays)
        mb = sum(np.asarray(reader.read_embedding("bench", "enc", c)).nbytes for c in names) / 2**20
    out = {
        "bench": "store_verify", "rows": args.rows, "width": args.width, "chunk": args.chunk,
        "arrays": len(names), "chunks": n_chunks, "mib": round(mb, 1),
        "read_plain_s": round(plain_s[0], 4), "read_checked_s": round(checked[0], 4),
        "overhead": round(checked[0] / plain_s[0] - 1, 4),
        "read_plain_cpu_s": round(plain_s[1], 4), "read_checked_cpu_s": round(checked[1], 4),
        "overhead_cpu": round(checked[1] / plain_s[1] - 1, 4),
        "overhead_cpu_median_pair": round(float(np.median(pairs)) - 1, 4),
        "crc32c_read_s": round(crc_s[0], 4), "crc32c_overhead_cpu": round(crc_s[1] / plain_s[1] - 1, 4),
        "pending_all_arrays_s": round(pending_s, 4),
        "verify_s": round(verify_s, 3),
    }
    print(f"read {out['mib']} MiB in {n_chunks} chunks: plain {plain_s[0]:.3f} s, checked {checked[0]:.3f} s "
          f"({100 * out['overhead']:+.1f} % wall, {100 * out['overhead_cpu']:+.1f} % CPU; with crc32c instead "
          f"{100 * out['crc32c_overhead_cpu']:+.1f} % CPU); pending() of every "
          f"array {pending_s:.3f} s; verify {verify_s:.2f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
