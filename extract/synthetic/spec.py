"""A synthetic dataset's record (``Spec``: how its groups, rows and images are drawn) and the keyed
random generators every draw comes from (the package docstring says how they are keyed)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

GROUP_STREAM, RENDER_STREAM, SPLIT_STREAM = 0, 1, 2  # generator streams


@functools.cache
def _stable_int(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def keyed_rng(name: str, seed: int, stream: int, index: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_stable_int(name), seed, stream, index])))


@dataclass(frozen=True)
class Spec:
    name: str
    task: str
    classes: tuple[str, ...]
    ordinal: bool
    modality: str  # one of crs.foundations.names.MODALITIES: selects the perturbation suite
    shift_target: str | None
    n_images: int  # at size 1.0
    group_sizes: tuple[float, ...]  # P(a group holds 1, 2, ... images)
    group_prefix: str  # 'L' lesion, 'P' patient
    test_only: bool
    draw_group: Callable[[np.random.Generator], dict]  # -> group parameters
    draw_row: Callable[[dict, int, np.random.Generator], dict]  # (group, k-th image of it) -> row, incl. 'label'
    render: Callable[[int, dict, dict, np.random.Generator], np.ndarray]  # -> float32 [C, H, W]
    description: str
