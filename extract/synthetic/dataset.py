"""``SyntheticDataset``: one synthetic dataset at a size and seed, its table (the plan: rows, groups and
split) and its images on demand; ``get`` opens one by name."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from crs.extract import splits
from crs.extract.synthetic import prerender
from crs.extract.synthetic.draw import choice
from crs.extract.synthetic.registry import SPECS, spec_of
from crs.extract.synthetic.spec import GROUP_STREAM, RENDER_STREAM, SPLIT_STREAM, keyed_rng
from crs.extract.table import Table
from crs.foundations.labels import check_task
from crs.foundations.strata import finding_set_strata

_MIN_IMAGES = 40  # floor on a dataset's image count, whatever `size` asks for

_CHUNK = 256  # images rendered between conversions to uint8

SOURCE = "builtin synthetic benchmark"


@dataclass(frozen=True)
class SyntheticDataset:
    """One synthetic dataset at a size and seed: its metadata, and its images on demand.

    Satisfies ``crs.extract.datasets.Dataset``; what only files have (provenance, image
    paths, a shift target named by the user) is None."""

    name: str
    task: str  # 'multiclass' | 'multilabel'
    classes: tuple[str, ...]
    ordinal: bool
    shift_target: str | None  # the dataset whose test split is this one's shift condition
    image_size: int  # square images: image_size x image_size x 3
    description: str
    size: float = 1.0
    seed: int = 0
    source: ClassVar[str] = SOURCE
    shift_spec: ClassVar[None] = None
    provenance: ClassVar[None] = None
    paths: ClassVar[None] = None

    @property
    def modality(self) -> str:
        """'dermatology' | 'ophthalmology' | 'radiology': selects the perturbation suite."""
        return SPECS[self.name].modality

    def table(self) -> Table:
        return _plan(self.name, self.size, self.seed).table

    def images(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """uint8 [len(rows), H, W, 3]: the images of those rows of `table()` (from ``prerender`` where a
        helper rendered them ahead, the same pixels)."""
        plan = _plan(self.name, self.size, self.seed)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n_rows = len(plan.table.ids)
        if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
            raise IndexError(
                f"{self.name} has rows 0..{n_rows - 1}; asked for rows {rows.min()}..{rows.max()}"
            )
        ahead = prerender.take(self, rows)
        return ahead if ahead is not None else self.render_rows(rows)

    def render_rows(self, rows: np.ndarray) -> np.ndarray:
        """``images`` drawn here and now: each row from its own keyed stream, so any subset, in any order or
        process, gets the same pixels."""
        plan = _plan(self.name, self.size, self.seed)
        render = SPECS[self.name].render
        n = self.image_size
        out = np.empty((len(rows), n, n, 3), dtype=np.uint8)
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK].tolist()
            imgs = np.stack([
                render(n, plan.groups[plan.group_index[i]], plan.rows[i],
                       keyed_rng(self.name, self.seed, RENDER_STREAM, i))
                for i in chunk
            ])  # [B, C, H, W], C = 3 or 1 (grey, broadcast to RGB below), ~[0, 1]
            imgs = np.clip(imgs * 255 + 0.5, 0, 255).astype(np.uint8)
            out[start : start + len(chunk)] = imgs.transpose(0, 2, 3, 1)
        return out

    def load_image(self, row: int) -> np.ndarray:
        """uint8 [H, W, 3]: the image of one row of `table()`, the same as `images([row])[0]`."""
        return self.images([row])[0]


@dataclass(frozen=True)
class _Plan:
    table: Table
    groups: tuple[dict, ...]
    group_index: np.ndarray  # [N] int64
    rows: tuple[dict, ...]


@functools.lru_cache(maxsize=16)
def _plan(name: str, size: float, seed: int) -> _Plan:
    spec = spec_of(name)
    if not size > 0:
        raise ValueError(f"{name}: size must be > 0; got {size!r}")
    n_rows = max(_MIN_IMAGES, int(round(spec.n_images * size)))
    cdf = np.cumsum(spec.group_sizes)
    groups, group_index, rows = [], [], []
    while len(rows) < n_rows:
        g = len(groups)
        rng = keyed_rng(name, seed, GROUP_STREAM, g)
        m = 1 + choice(rng, cdf)
        group = spec.draw_group(rng)
        groups.append(group)
        for k in range(min(m, n_rows - len(rows))):
            rows.append(spec.draw_row(group, k, rng))
            group_index.append(g)
    group_index = np.array(group_index, dtype=np.int64)
    labels = np.array([r["label"] for r in rows], dtype=check_task(spec.task).label_dtype)
    if spec.test_only:
        split = np.full(n_rows, 2, dtype=np.int8)
    else:
        strata = finding_set_strata(labels, group_index, len(groups))
        sizes = np.bincount(group_index, minlength=len(groups))
        split = splits.deal_split(strata, sizes, keyed_rng(name, seed, SPLIT_STREAM))[group_index]
    group_ids = np.array([f"{name}-{spec.group_prefix}{g:05d}" for g in range(len(groups))])
    table = Table(
        ids=np.array([f"{name}-{i:06d}" for i in range(n_rows)]),
        labels=labels,
        split=split,
        group=group_ids[group_index],
    )
    for column in (table.ids, table.labels, table.split, table.group):
        column.flags.writeable = False  # the table is cached and shared by every caller
    return _Plan(table, tuple(groups), group_index, tuple(rows))


def get(name: str, size: float = 1.0, seed: int = 0) -> SyntheticDataset:
    """The synthetic dataset `name`, with `size` times its default number of images."""
    spec = spec_of(name)
    if not size > 0:
        raise ValueError(f"size must be > 0 (a multiple of the default image count); got {size!r}")
    return SyntheticDataset(
        name=spec.name,
        task=spec.task,
        classes=spec.classes,
        ordinal=spec.ordinal,
        shift_target=spec.shift_target,
        image_size=64,
        description=spec.description,
        size=float(size),
        seed=int(seed),
    )
