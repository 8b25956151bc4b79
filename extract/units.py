"""The work units of an extraction, shared by the local run (``crs.extract.run``) and the Ray
executor (``crs.extract.ray_executor``): what a unit is, how its images are decoded
(``DecodedUnits``) and embedded (``Embedder``, ``embed_unit``), and how its decoding
failures are reported (``unit_failures``) and committed (``commit_failures``, before any of the
unit's done flags).
"""

from __future__ import annotations

import inspect
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
    decodes: int = 0  # images decoded for this encoder's units (shared by the encoders of one extract_many)
    forward_seconds: float = 0.0  # in the encoder's forward passes (resize, normalise, model; no decoding)
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
    """Item j: the decoded images of work unit j, as uint8 [m, S, S, 3] plus its failures; a list of
    uint8 [S_i, S_i, 3] where files decode to different working sizes (a dataset whose
    ``load_image`` takes ``upscale``: images smaller than its ``image_size`` are not enlarged)."""

    def __init__(self, ds, unit_rows: dict[int, np.ndarray], paths: list | None):
        self.ds, self.unit_rows, self.paths = ds, unit_rows, paths
        self.native = _takes_upscale(ds)

    def __len__(self):
        return len(self.unit_rows)

    def __getitem__(self, j):
        rows = self.unit_rows[j]
        failures = []  # (position in the unit, file, reason)
        if self.paths is not None:  # images read from files can fail one by one
            size = self.ds.image_size
            images: list = [None] * len(rows)
            for k, r in enumerate(rows.tolist()):
                try:
                    img = np.asarray(self.ds.load_image(r, upscale=False) if self.native else self.ds.load_image(r))
                    s = img.shape[0]
                    if img.dtype != np.uint8 or img.shape != (s, s, 3) or not (s <= size if self.native
                                                                                else s == size):
                        raise ImageError(self._path(r), f"decoded to {img.dtype} {img.shape}, not uint8 "
                                                        f"({size}, {size}, 3)" + (" or smaller" if self.native
                                                                                  else ""))
                    images[k] = img
                except ImageError as exc:
                    failures.append((k, exc.path, exc.reason))
            shapes = {img.shape for img in images if img is not None}
            blank = np.zeros(min(shapes) if shapes else (size, size, 3), dtype=np.uint8)  # failed: not scored
            images = [blank if img is None else img for img in images]
            if len(shapes) <= 1:
                return j, torch.from_numpy(np.ascontiguousarray(np.stack(images) if images else
                                                                np.zeros((0, size, size, 3), np.uint8))), failures
            return j, [torch.from_numpy(np.array(img, copy=True)) for img in images], failures
        images = self.ds.images(rows)
        return j, torch.from_numpy(np.ascontiguousarray(images)), failures

    def _path(self, row):
        return str(self.paths[row]) if self.paths is not None else f"row {row}"


def _takes_upscale(ds) -> bool:
    """Whether ``ds.load_image`` takes ``upscale`` (file datasets decoded by ``crs.extract.images.decode``)."""
    try:
        return "upscale" in inspect.signature(ds.load_image).parameters
    except (AttributeError, TypeError, ValueError):
        return False


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


def unit_conditions(unit: Unit, images, device, conds: list[str] | None = None
                    ) -> Iterator[tuple[str, list[tuple[np.ndarray, torch.Tensor]]]]:
    """Yields (condition, groups) for ``conds`` (default: the unit's pending ones), one condition at a
    time: the unit's images clean or perturbed, each condition computed once (for every encoder that
    embeds it) and let go before the next. ``images`` is uint8 [image, S, S, 3], or a list of uint8
    [S_i, S_i, 3] when the unit's images were decoded at different working sizes (no image is
    upscaled for perturbing); ``groups`` are (positions in the unit, float [m, 3, S, S] in [0, 1]), one per
    size, positions restricted to the test rows under a perturbation."""
    groups = []
    for pos, imgs in _by_size(images):  # decoded (and moved to the device) once for all conditions
        groups.append((pos, imgs.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)))
    for cond in unit.conds if conds is None else conds:
        if cond == CLEAN:
            yield cond, groups
            continue
        c = parse(cond)  # the test rows of the unit come first
        out = []
        for pos, x in groups:
            keep = pos < unit.n_test
            if keep.any():
                ids = [unit.ids[i] for i in pos[keep].tolist()]
                out.append((pos[keep], perturb.apply(x[torch.from_numpy(keep).to(x.device)], c.family, c.severity,
                                                     ids)))
        yield cond, out


def _by_size(images) -> list[tuple[np.ndarray, torch.Tensor]]:
    """(positions, uint8 [m, S, S, 3]) per image size, positions ascending; one group for a tensor."""
    if isinstance(images, torch.Tensor):
        return [(np.arange(len(images)), images)]
    sizes: dict[tuple, list[int]] = {}
    for i, img in enumerate(images):
        sizes.setdefault(tuple(img.shape), []).append(i)
    return [(np.asarray(pos), torch.stack([torch.as_tensor(images[i]) for i in pos])) for pos in sizes.values()]


def embed_groups(groups: list[tuple[np.ndarray, torch.Tensor]], embed) -> np.ndarray:
    """Embeddings [image, feature] of ``groups`` (from ``unit_conditions``), rows in unit order."""
    if len(groups) == 1 and np.array_equal(groups[0][0], np.arange(len(groups[0][0]))):
        return embed(groups[0][1]).cpu().numpy()
    parts = [(pos, embed(x).cpu().numpy()) for pos, x in groups]
    n = sum(len(pos) for pos, _ in parts)
    out = np.empty((n, parts[0][1].shape[1]), dtype=parts[0][1].dtype)
    order = np.argsort(np.concatenate([pos for pos, _ in parts]))  # positions are 0..n-1 for clean, 0..n_test-1
    out[:] = np.concatenate([v for _, v in parts])[order]
    return out


def embed_unit(unit: Unit, images, embed, device) -> Iterator[tuple[str, np.ndarray]]:
    """The per-chunk work both executors share: yields (condition, embeddings [image, feature]) for
    ``images`` (the unit's decoded images, see ``unit_conditions``), clean and perturbed, one
    condition at a time, so that each is committed as soon as it is computed: a kill loses at most
    one (chunk, condition), not the whole unit (which is 1 + |suite| forward passes of the chunk)."""
    for cond, groups in unit_conditions(unit, images, device):
        yield cond, embed_groups(groups, embed)


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
