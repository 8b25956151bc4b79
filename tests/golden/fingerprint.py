"""Fingerprints of every output of a small ``crs run``, to show that a change left them bit for bit alone.

``fingerprint(folder)`` maps each output (run records, probe selection, subsets, every
stored embedding and prediction array with its attributes) to a SHA-256 of its canonical
content: tables by column values in a fixed row order, JSON with its keys sorted. Only
what records when or how long is left out (``written``/``seconds``/timing keys).

The scores tables and scores.json are kept as their values instead and compared to a
relative 1e-12 (``same``): the scoring code sums some floats in an order that varies
between runs (``ece_ts`` of two identical runs differs by about 1e-17), so those outputs
were never bit-stable, even before any refactor. ``python tests/golden/fingerprint.py --write``
runs ``crs run small.toml`` in a temporary folder and rewrites ``small.json``: do that
only when a change is meant to alter the outputs, and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "small.toml"
GOLDEN = HERE / "small.json"
VOLATILE = {"written", "seconds", "timings_s", "created", "started", "finished", "elapsed_s", "time",
            "generation",  # generation: a random id per probe or score run (issue 15)
            "provenance",  # tool, git commit, library versions: the machine's, not the run's numbers
            "images_per_s"}  # extraction throughput measured on this machine


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _digest_json(obj) -> str:
    text = json.dumps(_strip(obj), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(path: Path):
    """A Parquet table without volatile columns, columns sorted by name, rows by key columns then values."""
    import polars as pl

    df = pl.read_parquet(path)
    df = df.select(sorted(c for c in df.columns if c not in VOLATILE))
    keys = [c for c in df.columns if df[c].dtype in (pl.String, pl.Int64, pl.Int32, pl.Boolean)]
    return df.sort(keys + [c for c in df.columns if c not in keys], nulls_last=True) if df.height else df


def _digest_table(path: Path) -> str:
    df = _canonical(path)
    h = hashlib.sha256()
    for c in df.columns:
        s = df[c]
        h.update(f"{c}:{s.dtype}:".encode())
        if s.dtype.is_numeric():
            h.update(np.ascontiguousarray(s.to_numpy()).tobytes())
        else:
            h.update(json.dumps(s.to_list(), default=str).encode())
    return h.hexdigest()


def _table_values(path: Path) -> dict:
    df = _canonical(path)
    return {"columns": df.columns, "dtypes": [str(t) for t in df.dtypes],
            "rows": json.loads(json.dumps(df.rows(), default=str))}


def same(a, b, rel: float = 1e-12) -> bool:
    """Equal values, floats to a relative ``rel`` (NaN equals NaN)."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or isinstance(a, bool):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    return a == b


def _digest_array(arr) -> str:
    values = np.ascontiguousarray(np.asarray(arr[...]))
    h = hashlib.sha256(f"{values.dtype}:{values.shape}:".encode())
    h.update(values.tobytes())
    h.update(_digest_json(dict(arr.attrs)).encode())
    return h.hexdigest()


def fingerprint(folder: Path) -> dict:
    """``{output name: sha256}`` for the store and results of ``small.toml`` run in ``folder``."""
    import zarr

    folder = Path(folder)
    out: dict[str, str] = {}
    results = folder / "results"
    for sub in ("run_records", "probe_selection", "subsets"):
        for f in sorted((results / sub).glob("*.parquet")):
            out[f"results/{sub}/{f.name}"] = _digest_table(f)
    for f in sorted((results / "scores").glob("*.parquet")):
        out[f"results/scores/{f.name}"] = _table_values(f)
    scores = json.loads((results / "scores" / "scores.json").read_text())
    out["results/scores/scores.json"] = json.loads(json.dumps(_strip(scores), default=str))
    root = zarr.open_group(str(folder / "store.zarr"), mode="r")
    for dname, dgroup in sorted(root["datasets"].groups()):
        for path, arr in _arrays(dgroup, f"store/{dname}"):
            out[path] = _digest_array(arr)
    return out


def _arrays(group, prefix):
    for name, arr in sorted(group.arrays()):
        yield f"{prefix}/{name}", arr
    for name, sub in sorted(group.groups()):
        yield from _arrays(sub, f"{prefix}/{name}")


def run_small(folder: Path) -> None:
    """``crs run small.toml --force`` with its store and results in ``folder``."""
    import shutil

    from typer.testing import CliRunner

    from crs.cli import app

    folder = Path(folder)
    shutil.copy(CONFIG, folder / "small.toml")
    result = CliRunner().invoke(app, ["run", str(folder / "small.toml"), "--quiet"])
    if result.exit_code != 0:
        raise RuntimeError(f"crs run small.toml exited {result.exit_code}:\n{result.output}\n{result.exception!r}")


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/golden/fingerprint.py --write  (re-pins the outputs of small.toml)")
    with tempfile.TemporaryDirectory() as tmp:
        run_small(Path(tmp))
        prints = fingerprint(Path(tmp))
    GOLDEN.write_text(json.dumps(prints, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {len(prints)} fingerprints to {GOLDEN}")
