"""The dataset registry: names a user can pass to ``--dataset`` and how to load each.

Today: the built-in synthetic benchmark (``crs.extract.synthetic``). Adapters for the
real datasets as they ship (ISIC 2019, APTOS 2019, CheXpert, MIMIC-CXR-JPG) plug in
here with the same interface: ``name``, ``task``, ``classes``, ``ordinal``,
``shift_target``, ``table()`` and ``images(rows)``.
"""

from __future__ import annotations

from crs.extract import synthetic

BUILTIN = synthetic.DATASETS


def names() -> list[str]:
    return list(BUILTIN)


def get(name: str, *, size: float = 1.0, seed: int = 0):
    if name not in BUILTIN:
        raise KeyError(f"unknown dataset {name!r}; valid datasets: {', '.join(BUILTIN)}")
    if not size > 0:
        raise ValueError(f"--size must be positive, not {size!r}")
    return synthetic.get(name, size=size, seed=seed)
