"""Whether a bootstrap fits in memory, checked before it starts.

Every replicate is held at once (the seed draw, the resampled seed means, each replicate's q and pairwise
dominance margins, and, for the image draw, its multiplicities), so the memory grows linearly in the
number of replicates. ``bytes_per_replicate`` adds up what ``crs.scoring.replicates.run_bootstrap``
allocates per replicate; ``check_fits`` refuses a count whose need exceeds the memory available now,
naming the largest count that fits.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from crs.foundations.errors import BadInput
from crs.scoring.axes import AXES
from crs.scoring.comparison import Comparison

# float64 arrays [encoder, dataset, axis] a replicate holds while it is scored: the resampled seed means, q per
# dataset and its parts, the overall q, the axis means and the components (crs.scoring.crs.score)
SCORE_COPIES = 8
# float64 arrays [encoder, encoder, axis] of the pairwise dominance margins and their degrees
PAIR_COPIES = 3
# bytes per test image per replicate of one image draw: the drawn indices and their offsets (int64), the
# bincount (int64), the multiplicities (int32, and int16 for the AUROC pass), their float64 transpose
# (AurocDraws.counts_t) and the weighted calibration sums over it (two float64)
IMAGE_BYTES = 8 + 8 + 8 + 4 + 2 + 8 + 16
# bytes per replicate of each distinct probability array's values kept by the draw (AUROC and ECE, float64)
ARRAY_BYTES = 16
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")


def available_bytes() -> int | None:
    """The memory this process may still take: the kernel's MemAvailable (else the free pages), less what a
    cgroup v2 memory limit leaves; None where neither can be read."""
    found = []
    try:
        for line in MEMINFO.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            pass
    try:
        limit = (CGROUP / "memory.max").read_text(encoding="ascii").strip()
        if limit != "max":
            found.append(int(limit) - int((CGROUP / "memory.current").read_text(encoding="ascii")))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def bytes_per_replicate(cmp: Comparison, image_draw: bool) -> int:
    """What one replicate of the bootstrap holds, in bytes (module docstring).

    With E encoders, D datasets, S seeds and A axes: 16 S for the seed draw and its weights,
    8 A E (SCORE_COPIES D + PAIR_COPIES E) while the replicates are scored; with the image draw also
    8 E D S A for the resampled axes, and for the dataset whose draws are largest IMAGE_BYTES per image
    of its test split and its shift targets (the run records' n_eval) and ARRAY_BYTES per array it reads."""
    e, d, s, a = len(cmp.encoders), len(cmp.datasets), len(cmp.seeds), len(AXES)
    need = 16 * s + 8 * a * e * (SCORE_COPIES * d + PAIR_COPIES * e)
    if not image_draw:
        return need
    rows = cmp.used
    images = (rows.group_by("dataset", "condition").agg(pl.col("n_eval").max()).group_by("dataset")
              .agg(pl.col("n_eval").sum(), pl.len().alias("conditions")) if "n_eval" in rows.columns else None)
    per_dataset = [0] if images is None or not images.height else [
        IMAGE_BYTES * int(n or 0) + ARRAY_BYTES * int(c) * e * s for n, c in
        images.select("n_eval", "conditions").iter_rows()]
    return need + 8 * e * d * s * a + max(per_dataset)


def check_fits(cmp: Comparison, n_bootstrap: int, image_draw: bool, available: int | None = None) -> None:
    """BadInput (exit 2) where ``n_bootstrap`` replicates need more memory than is ``available``
    (``available_bytes()`` where not given; nothing is checked where that cannot be read)."""
    available = available_bytes() if available is None else available
    if available is None:
        return
    per = bytes_per_replicate(cmp, image_draw)
    if n_bootstrap * per <= available:
        return
    fits = available // per
    draw = "seeds and test images" if image_draw else "seeds"
    fix = (f"the largest count that fits is {fits}: pass --bootstrap {fits} or fewer (score.bootstrap in a config "
           "file)" if fits >= 1 else "not one replicate fits") + \
        (", or --bootstrap-unit seed, which draws no images" if image_draw else "") + ", or free memory and re-run"
    raise BadInput(
        f"--bootstrap {n_bootstrap} needs about {_size(n_bootstrap * per)} of memory ({len(cmp.encoders)} encoders, "
        f"{len(cmp.datasets)} datasets, {len(cmp.seeds)} seeds, {draw} resampled) and {_size(available)} is "
        f"available now; {fix}")


def _size(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
