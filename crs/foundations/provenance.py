"""What every output records about the tool that made it: version, git commit, date, libraries.

Cheap to call (no torch or JAX import: versions come from the installed distributions'
metadata), so the store, the run records, ``scores.json`` and the report all carry the
same block and two teams can tell whether their numbers came from the same code.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata as md
import platform
import subprocess
from pathlib import Path

from crs import __version__

LIBRARIES = ("torch", "torchvision", "timm", "transformers", "jax", "jaxlib", "flax", "optax", "numpy",
             "zarr", "polars", "huggingface-hub")


def library_versions(names=LIBRARIES) -> dict[str, str]:
    """The installed version of each library ("not installed" where it is absent)."""
    out = {}
    for lib in names:
        try:
            out[lib] = md.version(lib)
        except md.PackageNotFoundError:
            out[lib] = "not installed"
    return out


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout this package runs from (with ``+dirty`` if it has changes), else None."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def version_line() -> str:
    """What ``crs --version`` prints: the version, and the commit when run from a checkout."""
    commit = git_commit()
    return f"crs-bench {__version__}" + (f" (git {commit})" if commit else "")


def collect(settings: dict | None = None) -> dict:
    """The provenance block: tool version and commit, date, Python and library versions, the settings."""
    out = {
        "crs_bench": __version__,
        "git_commit": git_commit(),
        "created": now(),
        "python": platform.python_version(),
        "libraries": library_versions(),
    }
    if settings is not None:
        out["settings"] = settings
    return out
