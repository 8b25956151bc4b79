"""The work units of an extraction, shared by the local run (``crs.extract.run``) and the Ray
executor (``crs.extract.ray_executor``): what a unit is, how its images are decoded
(``DecodedUnits``) and embedded (``Embedder``, ``embed_unit``), and how its decoding
failures are reported (``unit_failures``) and committed (``commit_failures``, before any of the
unit's done flags).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from crs.conditions import CLEAN, parse
from crs.errors import UserError
from crs.extract import perturb
from crs.extract.encoders import EncoderSpec
from crs.extract.images import ImageError
from crs.store import Store, dataset_lock


class StrictFailure(UserError):
    """--strict and an image could not be decoded."""


@dataclass
class ExtractSummary:
    encoder: str
    dataset: str
    images: int
    conditions: int
    chunks_written: int = 0
    chunks_skipped: int = 0
    forward_images: int = 0
    decodes: int = 0
    failures: int = 0
    batch: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    complete: bool = False
    lock_taken_over: str | None = None
    arrays: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class DecodedUnits(torch.utils.data.Dataset):
    """Item j: the decoded images of work unit j, as uint8 [m, S, S, 3] plus its failures."""

    def __init__(self, ds, unit_rows: dict[int, np.ndarray], paths: list | None):
        self.ds, self.unit_rows, self.paths = ds, unit_rows, paths

    def __len__(self):
        return len(self.unit_rows)

    def __getitem__(self, j):
        rows = self.unit_rows[j]
        failures = []  # (position in the unit, file, reason)
        if self.paths is not None:  # images read from files can fail one by one
            size = self.ds.image_size
            images = np.zeros((len(rows), size, size, 3), dtype=np.uint8)
            for k, r in enumerate(rows.tolist()):
                try:
                    img = np.asarray(self.ds.load_image(r))
                    if img.shape != (size, size, 3) or img.dtype != np.uint8:
                        raise ImageError(self._path(r), f"decoded to {img.dtype} {img.shape}, not uint8 "
                                                        f"({size}, {size}, 3)")
                    images[k] = img
                except ImageError as exc:
                    failures.append((k, exc.path, exc.reason))
        else:
            images = self.ds.images(rows)
        return j, torch.from_numpy(np.ascontiguousarray(images)), failures

    def _path(self, row):
        return str(self.paths[row]) if self.paths is not None else f"row {row}"


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class Embedder:
    """Forward passes in batches; halves the batch on out-of-memory and keeps the smaller one."""

    def __init__(self, model, batch: int):
        self.model, self.batch, self.backoffs = model, batch, 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        outs, i = [], 0
        while i < len(x):
            try:
                outs.append(self.model(x[i : i + self.batch]))
                i += self.batch
            except (torch.OutOfMemoryError, RuntimeError) as exc:
                if not _is_oom(exc) or self.batch == 1:
                    raise
                self.batch = max(1, self.batch // 2)
                self.backoffs += 1
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        return torch.cat(outs)


@dataclass
class Unit:
    """One work unit: chunk ``j`` of every pending array of one (dataset, encoder). Its images are
    decoded once and embedded clean and under each pending perturbation; it is the only writer
    of chunk ``j`` of those arrays."""

    j: int
    source_rows: np.ndarray  # [image] rows of the dataset object, in store order
    ids: list[str]  # [image] image ids (seed the perturbations)
    n_test: int  # the unit's first n_test images are test images (perturbed conditions cover those)
    conds: list[str]  # pending conditions, in the order of Plan.conds


@dataclass
class Plan:
    """What one (dataset, encoder) extraction has to do; arrays are created and the metadata written."""

    spec: EncoderSpec
    dataset: str
    conds: list[str]
    arrays: dict  # condition -> EmbeddingArray
    units: list[Unit]  # the units with at least one pending chunk
    batch: int
    summary: ExtractSummary


def embed_unit(unit: Unit, images: torch.Tensor, embed, device) -> Iterator[tuple[str, np.ndarray]]:
    """The per-chunk work both executors share: yields (condition, embeddings [image, feature]) for
    ``images`` (uint8 [image, S, S, 3], the unit's decoded images), clean and perturbed, one
    condition at a time, so that each is committed as soon as it is computed: a kill loses at most
    one (chunk, condition), not the whole unit (which is 1 + |suite| forward passes of the chunk)."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)  # decoded once for all
    for cond in unit.conds:
        if cond == CLEAN:
            xin = x
        else:
            c = parse(cond)  # the test rows of the unit come first
            xin = perturb.apply(x[: unit.n_test], c.family, c.severity, unit.ids[: unit.n_test])
        yield cond, embed(xin).cpu().numpy()


def commit_failures(store: Store, dataset: str, failures: list[tuple[str, str, str]]) -> None:
    """Record a unit's decoding failures (image id, file, reason) in the dataset's table. Called
    before any chunk of the unit is marked done: a unit whose chunks are done is never decoded
    again, so a failure not yet committed then would be lost to a kill, and its blank image scored."""
    if failures:
        with dataset_lock(store, dataset):
            store.add_failures(dataset, *zip(*failures))
        after_commit()


def after_commit() -> None:
    """Test-only hook: with CRS_TEST_KILL_AFTER_COMMITS=k in the environment, the process kills
    itself (SIGKILL) right after its k-th commit (a unit's failures, or one chunk with its done
    flag), so the kill-and-resume tests can stop an extraction at exact points. Unset: nothing."""
    global _commits
    limit = os.environ.get(KILL_AFTER_COMMITS)
    if not limit:
        return
    _commits += 1
    if _commits >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)


KILL_AFTER_COMMITS = "CRS_TEST_KILL_AFTER_COMMITS"
_commits = 0  # commits of this process, counted only while the test hook is set


def unit_failures(unit: Unit, failures, strict: bool) -> list[tuple[str, str, str]]:
    """(image id, file, reason) for a unit's decoding failures; --strict makes the first fatal."""
    if failures and strict:
        k, path, reason = failures[0]
        raise StrictFailure(f"image {unit.ids[k]!r} ({path}) cannot be used: {reason} (--strict)")
    return [(unit.ids[k], path, reason) for k, path, reason in failures]
