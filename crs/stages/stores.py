"""A store as the store commands see it: its integrity checked (and repaired) and what it holds."""

from __future__ import annotations


def verify(path: str, *, repair: bool = False, changed: list[str] | None = None) -> list:
    """Every array, chunk and metadata file of the store at ``path`` against what was committed
    (``crs.store.integrity.verify``): the findings; ``repair`` repairs what can be in place and appends what
    it changed to ``changed``."""
    from crs.store import integrity  # zarr: crs --help loads no store

    return list(integrity.verify(path, repair=repair, changed=changed))


def format_findings(findings: list, changed: list[str]) -> str:
    """The findings of ``verify`` and what a repair changed, as text with the command that fixes each."""
    from crs.store import integrity  # zarr: crs --help loads no store

    return integrity.format_findings(findings, changed)


def describe(path: str) -> list[dict]:
    """Per dataset of the store at ``path``: its images, encoders, arrays and perturbation generators."""
    from crs.store import Store  # zarr: crs --help loads no store
    from crs.store.info import describe as rows  # zarr: crs --help loads no store

    return rows(Store(path, mode="r"))
