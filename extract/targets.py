"""A dataset opened as another dataset's shift target.

A shift target only supplies test images: the source dataset's probes are evaluated on
them as the condition ``shift:<target>``. It is never probed, perturbed or scored as a
dataset of its own (that would spend forward passes on conditions nobody reads and average
it into the CRS as if the user had asked for it). ``as_target`` turns any dataset into that
role the way the built-in ``demo_cxr_site2`` is made: every row it keeps is a test row, so
extraction embeds it clean only and ``crs probe`` finds nothing to train on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crs.extract.table import Table
from crs.foundations.names import SPLIT_CODE

TEST = SPLIT_CODE["test"]


def target_rows(split: np.ndarray, given: bool) -> np.ndarray:
    """The rows of a target's table that form the shift condition: its test split when the
    dataset gives its own split (an official one, or a csv ``split`` column), every row when the
    split would only be the tool's random one (a csv without ``split``: holding out 80 % of a
    target's images would only widen its interval)."""
    split = np.asarray(split)
    return np.flatnonzero(split == TEST) if given else np.arange(len(split))


class TargetView:
    """``ds`` restricted to its target rows, all of them marked test; every other member is ``ds``'s.

    Satisfies ``crs.extract.datasets.Dataset``; row ``i`` of this view is row ``rows[i]`` of ``ds``."""

    def __init__(self, ds, rows: np.ndarray, source_of: str):
        self._ds = ds
        self._rows = np.asarray(rows, np.int64)
        self.target_of = source_of
        self.shift_target = None  # a target names no target of its own
        self.shift_spec = None

    def __getattr__(self, name):  # everything not overridden here is the underlying dataset's
        return getattr(self._ds, name)

    @property
    def full(self):
        """The dataset in its own right (every row, its own split)."""
        return self._ds

    def table(self) -> Table:
        t, r = self._ds.table(), self._rows
        return Table(ids=np.asarray(t.ids)[r], labels=np.asarray(t.labels)[r],
                     split=np.full(len(r), TEST, np.int8), group=np.asarray(t.group)[r])

    def load_image(self, row: int, *args, **kwargs) -> np.ndarray:
        return self._ds.load_image(int(self._rows[int(row)]), *args, **kwargs)

    def images(self, rows) -> np.ndarray:
        return self._ds.images(self._rows[np.asarray(rows, np.int64).reshape(-1)])

    @property
    def paths(self) -> Sequence[str] | None:
        paths = self._ds.paths
        return None if paths is None else _Rows(paths, self._rows)

    @property
    def provenance(self) -> dict | None:
        base = self._ds.provenance
        role = {"role": "shift_target", "target_of": self.target_of,
                "target_rows": f"{len(self._rows)} of {len(self._ds.table().ids)}"}
        return role if base is None else {**base, **role}


class _Rows(Sequence):
    def __init__(self, paths: Sequence[str], rows: np.ndarray):
        self._paths, self._rows = paths, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._paths[int(r)] for r in self._rows[i]]
        return self._paths[int(self._rows[int(i)])]


def as_target(ds, source_of: str, given_split: bool):
    """``ds`` in the shift-target role for ``source_of``; ``ds`` itself where every row is already a
    test row (the built-in targets), so their stored tables stay as they were."""
    split = np.asarray(ds.table().split)
    if (split == TEST).all():
        return ds
    return TargetView(ds, target_rows(split, given_split), source_of)


def as_stored(ds, stored_role: str | None):
    """``ds`` as a store already holds it: a target the store holds as a dataset of its own (a run that
    named it with --dataset) is extracted as that dataset, so the store's table stays what it is (its
    test rows are still the shift condition)."""
    if isinstance(ds, TargetView) and stored_role is not None and stored_role != "shift_target":
        return ds.full
    return ds
