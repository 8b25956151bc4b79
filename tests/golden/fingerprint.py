"""Fingerprints of every output of a small ``crs run``, to show that a change left them alone.

Two checks, because floating point is the machine's as much as the code's:

* ``fingerprint(folder)`` maps each output (run records, probe selection, subsets, every
  stored embedding and prediction array with its attributes) to a SHA-256 of its canonical
  content: tables by column values in a fixed row order, JSON with its keys sorted. Only
  what records when or how long is left out (``written``/``seconds``/timing keys). The scores
  tables and scores.json are kept as their values and compared to a relative 1e-12 (``same``):
  scoring sums some floats in an order that varies between runs (about 1e-17). These
  digests hold bit for bit only on the platform that pinned them: torch's kernels, XLA's
  generated code and OpenBLAS each pick instructions by CPU (AVX-512 or AVX2 rounds the same
  sum differently), so ``small.json`` keeps them under its platform key (``platform()``).
* ``values(folder)`` keeps what a different CPU must reproduce to within its rounding, and
  ``compare`` checks it with tolerances (``_tol``): subsets and every integer, string and flag
  exactly; the probe's smooth outputs (losses, Brier, NLL, L2, and the stored probabilities and
  embeddings as sketches) to a relative 2e-3; what counts discrete events (AUROC, accuracy,
  binned ECE, ties: one pair of images, one bin edge or one argmax moves them by 1/n) and the
  solver's step counts to what a few such events move; the scores to 0.05 plus 5 %.

``python tests/golden/fingerprint.py --write`` runs ``crs run small.toml`` in a temporary folder
and rewrites ``small.json`` (the values, and the digests of this platform only): do that only
when a change is meant to alter the outputs, and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "small.toml"
GOLDEN = HERE / "small.json"
VOLATILE = {"written", "seconds", "timings_s", "created", "started", "finished", "elapsed_s", "time",
            "generation",  # generation: a random id per probe or score run
            "provenance",  # tool, git commit, library versions: the machine's, not the run's numbers
            "images_per_s",  # extraction throughput measured on this machine
            "commit", "chunk_bytes",  # commit records: bytes and CRC-32 of float values, the machine's bits
            "digest"}  # scores.json's digest of itself: covers its generation and provenance


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _digest_json(obj) -> str:
    text = json.dumps(_strip(obj), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(path: Path, loose: bool = False):
    """A Parquet table without volatile columns, columns sorted by name, rows by key columns then values.

    ``loose`` (``values``): rows by the columns another CPU reproduces exactly (strings, flags,
    integers but the solver's step counts), in a stable sort, so that no rounding reorders them."""
    import polars as pl

    df = pl.read_parquet(path)
    df = df.select(sorted(c for c in df.columns if c not in VOLATILE))
    if not df.height:
        return df
    if loose:
        keys = [c for c in df.columns if c != "iterations" and (df[c].dtype in (pl.String, pl.Boolean)
                                                               or df[c].dtype.is_integer())]
        return df.sort(keys, nulls_last=True, maintain_order=True) if keys else df
    keys = [c for c in df.columns if df[c].dtype in (pl.String, pl.Int64, pl.Int32, pl.Boolean)]
    return df.sort(keys + [c for c in df.columns if c not in keys], nulls_last=True)


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


def _table_values(path: Path, loose: bool = False) -> dict:
    df = _canonical(path, loose)
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


# ------------------------------------------------------------------ across platforms
class Tol(NamedTuple):
    atol: float
    rtol: float


SMOOTH = Tol(1e-6, 2e-3)  # continuous functions of the probe's solution: losses, Brier, NLL, temperature
SOLVED = Tol(1e-6, 1e-2)  # validation loss of every probe of the grid: a weak-L2 one stops at a 1e-3 objective gap
COUNTED = Tol(0.02, 0.0)  # ranks, bins and ties: one pair, one edge or one argmax moves them by up to 1/n
STEPS = Tol(5, 0.25)  # L-BFGS steps to the same tolerance from a differently rounded path
SCORES = Tol(0.05, 0.05)  # the scores combine counted metrics through the bootstrap: a sanity bound
SKETCH = 5e-3  # a stored array's sketch, in units of its RMS (a chosen probe's probabilities: as SMOOTH)
COUNTED_NAMES = {"auroc", "val_auroc", "accuracy", "balanced_accuracy", "ece", "classwise_ece", "ece_ts",
                 "tie_share", "aurc", "kappa_quadratic"}


def _tol(group: str, name: str) -> Tol | None:
    """The tolerance of column or key ``name`` of an output of ``group``; None: exact."""
    if group == "exact":
        return None
    if group == "scores":
        return SCORES
    if name == "iterations":
        return STEPS
    if name == "val_loss":
        return SOLVED
    return COUNTED if name in COUNTED_NAMES else SMOOTH


def platform() -> str:
    """What decides the bits of a run: CPU model, vector extensions, cores and the numeric libraries."""
    import os
    import platform as pf
    from importlib import metadata

    cpu, flags = pf.processor() or pf.machine(), ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        ids = [ln.split(":", 1)[1].strip() for ln in text.splitlines()[:12]
               if ln.split(":", 1)[0].strip() in ("vendor_id", "cpu family", "model", "model name", "CPU part")]
        cpu = " ".join(ids) or cpu
        line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
        flags = " ".join(sorted(f for f in line.split(":", 1)[-1].split()
                                if f.startswith(("avx", "fma", "sse", "f16c", "amx", "asimd", "sve", "neon"))))
    except OSError:
        pass
    libs = []
    for lib in ("numpy", "scipy", "jax", "jaxlib", "torch", "torchvision", "timm", "polars", "zarr", "pillow"):
        try:
            libs.append(f"{lib}=={metadata.version(lib)}")
        except metadata.PackageNotFoundError:
            libs.append(f"{lib}: none")
    text = f"{pf.machine()}|{cpu}|{flags}|{os.cpu_count()}|{' '.join(libs)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _signs(n: int, k: int) -> np.ndarray:
    """A fixed pseudo-random +-1 vector (a multiplicative hash of the index: no RNG whose stream may change)."""
    i = np.arange(n, dtype=np.uint64) + np.uint64(1)
    h = (i * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(((k + 1) * 0xBF58476D1CE4E5B9) % 2**64)
    h = (h ^ (h >> np.uint64(31))) * np.uint64(0x94D049BB133111EB)
    return 1.0 - 2.0 * ((h >> np.uint64(40)) & np.uint64(1)).astype(np.float64)


def _sketch(values: np.ndarray) -> dict:
    """A float array as its NaN count, mean, RMS, extremes and 8 random-sign projections (each / sqrt(n)).

    Rounding that moves elements by d moves each projection by at most rms(d); any real change to
    the array (another probe, another row order, another perturbation) moves them by O(rms(x))."""
    x = values.astype(np.float64).ravel()
    nan = np.isnan(x)
    x = np.where(nan, 0.0, x)
    n = max(x.size, 1)
    stats = [x.mean() if x.size else 0.0, float(np.sqrt((x * x).mean())) if x.size else 0.0,
             x.min() if x.size else 0.0, x.max() if x.size else 0.0]
    stats += [float(x @ _signs(x.size, k)) / math.sqrt(n) for k in range(8)]
    return {"nan": int(nan.sum()), "stats": [float(v) for v in stats]}


def _array_value(arr) -> dict:
    values = np.asarray(arr[...])
    out = {"dtype": str(values.dtype), "shape": list(values.shape), "attrs": _strip(dict(arr.attrs))}
    if arr.name.rsplit("/", 1)[-1] == "commit":
        # (stored bytes, CRC-32) per chunk: digests of float values, so only which chunks are committed
        out["committed"] = (values[..., 0] != 0).astype(int).tolist() if values.size else []
    elif values.dtype.kind == "f":
        out["sketch"] = _sketch(values)
    else:
        out["sha256"] = hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()
    return out


def values(folder: Path) -> dict:
    """``{output name: value}`` of ``small.toml`` run in ``folder``, for ``compare`` on any platform."""
    import zarr

    folder = Path(folder)
    out: dict = {}
    results = folder / "results"
    for sub in ("run_records", "probe_selection", "subsets", "scores"):
        for f in sorted((results / sub).glob("*.parquet")):
            out[f"results/{sub}/{f.name}"] = _table_values(f, loose=True)
    out["results/scores/scores.json"] = _strip(json.loads((results / "scores" / "scores.json").read_text()))
    root = zarr.open_group(str(folder / "store.zarr"), mode="r")
    for dname, dgroup in sorted(root["datasets"].groups()):
        out[f"store/{dname}"] = {"attrs": _strip(dict(dgroup.attrs))}
        for path, arr in _arrays(dgroup, f"store/{dname}"):
            out[path] = _array_value(arr)
    return out


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a, b, tol: Tol | None) -> bool:
    """Equal, or numbers within ``tol`` (None: exact; integers exact but step counts and scores)."""
    if tol is None or not (_number(a) and _number(b)):
        return a == b
    if isinstance(a, int) and isinstance(b, int) and tol not in (STEPS, SCORES):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol.atol + tol.rtol * max(abs(a), abs(b))


def _diff(want, got, where: str, group: str, name: str, out: list[str]) -> None:
    """Append to ``out`` where ``got`` differs from ``want`` beyond the tolerance of ``group``/``name``."""
    if len(out) >= 40:
        return
    if isinstance(want, dict) and isinstance(got, dict):
        if set(want) != set(got):
            out.append(f"{where}: keys {sorted(set(want) ^ set(got))} are in one run only")
        for k in sorted(set(want) & set(got)):
            _diff(want[k], got[k], f"{where}/{k}", group, k if not k.isdigit() else name, out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append(f"{where}: {len(want)} entries pinned, {len(got)} now")
        for i, (w, g) in enumerate(zip(want, got)):
            _diff(w, g, f"{where}[{i}]", group, name, out)
    elif group == "scores" and isinstance(want, str) and isinstance(got, str) and any(ch.isdigit() for ch in want):
        return  # a number formatted into a sentence: its value is compared where it is a number
    elif not _close(want, got, _tol(group, name)):
        out.append(f"{where}: pinned {want!r}, now {got!r}")


def _table_diff(want: dict, got: dict, where: str, group: str, out: list[str]) -> None:
    if want["columns"] != got["columns"] or want["dtypes"] != got["dtypes"]:
        out.append(f"{where}: columns {want['columns']} pinned, {got['columns']} now")
        return
    if len(want["rows"]) != len(got["rows"]):
        out.append(f"{where}: {len(want['rows'])} rows pinned, {len(got['rows'])} now")
        return
    for i, (w, g) in enumerate(zip(want["rows"], got["rows"])):
        for c, a, b in zip(want["columns"], w, g):
            _diff(a, b, f"{where} row {i} {c}", group, c, out)


def compare(want: dict, got: dict) -> list[str]:
    """Every difference between pinned and new ``values`` beyond what another CPU's rounding explains."""
    out = [f"{k}: pinned, not written now" for k in sorted(set(want) - set(got))]
    out += [f"{k}: written now, not pinned" for k in sorted(set(got) - set(want))]
    for k in sorted(set(want) & set(got)):
        group = "scores" if k.startswith("results/scores/") else "probe"
        if k.startswith("results/subsets/"):
            group = "exact"
        if isinstance(want[k], dict) and "rows" in want[k]:
            _table_diff(want[k], got[k], k, group, out)
        elif isinstance(want[k], dict) and "sketch" in want[k] and "sketch" in got[k]:
            _diff({**want[k], "sketch": None}, {**got[k], "sketch": None}, k, group, "", out)
            _sketch_diff(want[k]["sketch"], got[k]["sketch"], k, out)
        else:
            _diff(want[k], got[k], k, group, "", out)
    return out


def _sketch_diff(want: dict, got: dict, where: str, out: list[str]) -> None:
    scale = SKETCH * max(want["stats"][1], 1e-6)
    if want["nan"] != got["nan"]:
        out.append(f"{where}: {want['nan']} NaN pinned, {got['nan']} now")
    gap = max(abs(a - b) for a, b in zip(want["stats"], got["stats"]))
    if gap > scale:
        out.append(f"{where}: its sketch moved by {gap:.3g}, more than {SKETCH:g} of its RMS ({scale:.3g})")


def pin(folder: Path) -> dict:
    """What ``small.json`` holds: the values, and this platform's digests."""
    digests = fingerprint(folder)
    return {"values": values(folder), "exact": {platform(): digests}}


if __name__ == "__main__":
    import tempfile

    if len(sys.argv) == 3 and sys.argv[1] == "--run":  # tests/test_golden_run.py: the run alone, in FOLDER
        run_small(Path(sys.argv[2]))
        sys.exit(0)
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/golden/fingerprint.py --write  (re-pins the outputs of small.toml)\n"
                 "       python tests/golden/fingerprint.py --run FOLDER  (runs small.toml in FOLDER)")
    with tempfile.TemporaryDirectory() as tmp:
        run_small(Path(tmp))
        pinned = pin(Path(tmp))
    GOLDEN.write_text(json.dumps(pinned, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {len(pinned['values'])} values and the digests of platform {platform()} to {GOLDEN}")
