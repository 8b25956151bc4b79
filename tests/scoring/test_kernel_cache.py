"""The compiled AUROC pass with a damaged cache of its machine code: the right values and a warning, and
the next process rewrites the cache (``crs.scoring.kernels._run``). Subprocesses: numba reads its cache
folder (``NUMBA_CACHE_DIR``, here a temporary one) when it is imported."""

from __future__ import annotations

import os
import subprocess

import forkrun  # tests/forkrun.py

SCRIPT = """
import numpy as np
from crs.scoring import kernels, metrics, resample
rng = np.random.default_rng(0)
n, k = 80, 3
p = np.round(rng.random((n, k)) * 10).astype(np.float32) / 10
target = np.eye(k, dtype=np.int8)[rng.integers(0, k, n)]
known = rng.random((n, k)) < 0.9
counts = resample.image_counts(n, 20, rng)
srt = resample.sort_classes(p)
got = kernels.auroc_rows(srt.scores, srt.order, *resample.class_masks(target, known), resample.small_counts(counts))
want = np.stack([metrics.weighted_auroc(p[:, j], target[:, j] == 1, counts, known[:, j]) for j in range(k)])
assert np.array_equal(got, want, equal_nan=True), "wrong values"
print("values ok")
"""


def _run(cache_dir) -> subprocess.CompletedProcess:
    """SCRIPT in a process of its own (tests/forkrun.py: forked from a server that has not imported numba)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    return forkrun.run(["-c", SCRIPT], env=env, timeout=300)


def test_a_damaged_kernel_cache_gives_the_right_values_a_warning_and_is_rewritten(tmp_path):
    first = _run(tmp_path)
    assert first.returncode == 0 and "values ok" in first.stdout, first.stderr
    for damage in ("truncated machine code", "a garbage index"):
        files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
        data = [p for p in files if p.suffix == ".nbc"]
        index = [p for p in files if p.suffix == ".nbi"]
        assert data and index, f"numba wrote no cache under {tmp_path}: {files}"
        for p in (data if damage.startswith("truncated") else index):
            p.write_bytes(p.read_bytes()[:64] if damage.startswith("truncated") else b"not a pickle")
        second = _run(tmp_path)
        assert second.returncode == 0 and "values ok" in second.stdout, (damage, second.stderr)
        assert "compiled code cache of crs.scoring.kernels" in second.stderr, damage
        assert "could not be read" in second.stderr, damage
        third = _run(tmp_path)  # the cache was rewritten: read without complaint
        assert third.returncode == 0 and "values ok" in third.stdout, (damage, third.stderr)
        assert "could not be read" not in third.stderr, damage
