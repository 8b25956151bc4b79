"""The work units of an extraction, shared by the local run (``crs.extract.run``) and the Ray
executor (``crs.extract.ray_executor``): what a unit is, how its images are decoded
(``DecodedUnits``) and embedded (``Embedder``, ``embed_unit``), and how its decoding
failures are reported (``unit_failures``) and committed (``commit_failures``, before any of the
unit's done flags).
"""

from __future__ import annotations

import inspect
import os
import queue
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from crs.extract import perturb
from crs.extract.encoders import EncoderSpec
from crs.extract.images import ImageError
from crs.extract.timing import UNTIMED
from crs.foundations.conditions import CLEAN, parse
from crs.foundations.errors import UserError
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
        return outs[0] if len(outs) == 1 else torch.cat(outs)


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


# The families whose codec stays on the CPU (JPEG: nvjpeg decodes other pixels than libjpeg, see
# extract/perturb.py): the local pipeline runs them in the DataLoader workers, off the main thread
HOST_FAMILIES = ("jpeg",)


class Prepared(NamedTuple):
    """What a DataLoader worker hands the local pipeline for one unit (``PreparedUnits``)."""

    j: int
    images: object  # uint8 [m, S, S, 3], or a list of uint8 [S_i, S_i, 3] (``DecodedUnits``)
    failures: list
    host: dict  # condition -> [(positions in the unit, uint8 [k, 3, S, S])]: the host families' images
    seconds: tuple[float, float]  # (decoding, host-side perturbing), perf counters in the worker


class PreparedUnits(torch.utils.data.Dataset):
    """``DecodedUnits`` plus, in the same worker, the unit's conditions of ``HOST_FAMILIES``
    (``host_conds[j]``) on its test rows, through ``perturb.apply`` on the CPU as the main thread
    would (the same images bit for bit: uint8 in, uint8 out, as the codec's own)."""

    def __init__(self, decoded: DecodedUnits, units: dict[int, Unit], host_conds: dict[int, list[str]]):
        self.decoded, self.units, self.host_conds = decoded, units, host_conds

    def __len__(self):
        return len(self.decoded)

    def __getitem__(self, j) -> Prepared:
        t0 = time.perf_counter()
        _, images, failures = self.decoded[j]
        t1 = time.perf_counter()
        unit, host = self.units[j], {}
        for cond in self.host_conds.get(j, ()):
            c = parse(cond)
            host[cond] = [(pos, _as_uint8(perturb.apply(_as_float(imgs), c.family, c.severity,
                                                        [unit.ids[i] for i in pos.tolist()])))
                          for pos, imgs in test_groups(images, unit.n_test)]
        return Prepared(j, images, failures, host, (t1 - t0, time.perf_counter() - t1))


def _as_float(imgs: torch.Tensor) -> torch.Tensor:
    return imgs.permute(0, 3, 1, 2).float().div_(255)


def _as_uint8(x: torch.Tensor) -> torch.Tensor:
    """[n, 3, H, W] in [0, 1] holding k/255 values (a codec's output) back to uint8 [n, 3, H, W], exactly,
    in the codec's own (contiguous) layout: the layout reaches the encoder, whose float sums it orders."""
    return x.mul(255).round_().to(torch.uint8).contiguous()


def test_groups(images, n_test: int) -> list[tuple[np.ndarray, torch.Tensor]]:
    """``_by_size`` restricted to the unit's test rows (its first ``n_test``): each group's positions
    ascend, so its test rows are a prefix, a slice whose length the host knows (no mask, no gather)."""
    out = []
    for pos, imgs in _by_size(images):
        k = int(np.searchsorted(pos, n_test))
        if k:
            out.append((pos[:k], imgs[:k]))
    return out


def to_device(imgs: torch.Tensor, device, channels_first: bool = False) -> torch.Tensor:
    """uint8 [m, S, S, 3] (or [m, 3, S, S] with ``channels_first``) on the host, pinned on CUDA -> float
    [m, 3, S, S] in [0, 1] on ``device``, copied without waiting; the memory layout stays the input's."""
    x = imgs.to(device, non_blocking=True)
    return x.float().div_(255) if channels_first else _as_float(x)


def unit_conditions(unit: Unit, images, device, conds: list[str] | None = None, host: dict | None = None,
                    timer=UNTIMED) -> Iterator[tuple[str, list[tuple[np.ndarray, torch.Tensor]]]]:
    """Yields (condition, groups) for ``conds`` (default: the unit's pending ones), one condition at a
    time: the unit's images clean or perturbed, each condition computed once (for every encoder that
    embeds it) and let go before the next. ``images`` is uint8 [image, S, S, 3], or a list of uint8
    [S_i, S_i, 3] when the unit's images were decoded at different working sizes (no image is
    upscaled for perturbing); ``groups`` are (positions in the unit, float [m, 3, S, S] in [0, 1]), one per
    size, positions restricted to the test rows under a perturbation. ``host`` holds conditions already
    computed on the host (``PreparedUnits``), moved to the device as they are; ``timer`` a
    ``crs.extract.timing.StageTimes`` (default: nothing timed). Nothing here waits for the device."""
    with timer.device("host_to_device"):  # decoded (and moved to the device) once for all conditions
        groups = [(pos, to_device(imgs, device)) for pos, imgs in _by_size(images)]
    for cond in unit.conds if conds is None else conds:
        if cond == CLEAN:
            yield cond, groups
            continue
        if host and cond in host:
            with timer.device("host_to_device"):
                out = [(pos, to_device(imgs, device, channels_first=True)) for pos, imgs in host[cond]]
            yield cond, out
            continue
        c = parse(cond)  # the test rows of the unit come first
        with timer.device("device_perturb"):
            out = []
            for pos, x in groups:
                k = int(np.searchsorted(pos, unit.n_test))
                if k:
                    out.append((pos[:k], perturb.apply(x[:k], c.family, c.severity,
                                                       [unit.ids[i] for i in pos[:k].tolist()])))
        yield cond, out


def _by_size(images) -> list[tuple[np.ndarray, torch.Tensor]]:
    """(positions, uint8 [m, S, S, 3]) per image size, positions ascending; one group for a tensor."""
    if isinstance(images, torch.Tensor):
        return [(np.arange(len(images)), images)]
    sizes: dict[tuple, list[int]] = {}
    for i, img in enumerate(images):
        sizes.setdefault(tuple(img.shape), []).append(i)
    return [(np.asarray(pos), torch.stack([torch.as_tensor(images[i]) for i in pos])) for pos in sizes.values()]


def _unit_order(parts) -> np.ndarray | None:
    """The permutation taking the rows of ``parts`` (groups, concatenated) to unit order; None when they
    are in it already."""
    pos = np.concatenate([p for p, _ in parts]) if parts else np.zeros(0, np.int64)
    return None if np.array_equal(pos, np.arange(len(pos))) else np.argsort(pos)


def embed_groups(groups: list[tuple[np.ndarray, torch.Tensor]], embed) -> np.ndarray:
    """Embeddings [image, feature] of ``groups`` (from ``unit_conditions``), rows in unit order; waits for
    the device (the Ray replicas' path: the local one stages them, ``HostBuffers``)."""
    values = torch.cat([embed(x) for _, x in groups]).cpu().numpy()
    order = _unit_order(groups)
    return values if order is None else values[order]


class Staged(NamedTuple):
    """Embeddings on their way to the host: rows of ``buffer`` (a reused host buffer) that an
    asynchronous copy fills, done when ``ready`` (a CUDA event; None: done) is."""

    buffer: torch.Tensor  # [image, feature], the groups' rows concatenated
    order: np.ndarray | None  # their permutation to unit order (None: in it)
    ready: object
    slot: int


class HostBuffers:
    """``slots`` host buffers (pinned on CUDA), reused, into which finished embeddings are copied without
    waiting: the only device-to-host traffic of the local loop (``stage``). The writer thread reads a
    buffer once its copy is done (``values``) and hands it back (``release``); ``stage`` waits for a
    free one, so at most ``slots`` batches are between the device and the store."""

    def __init__(self, device, slots: int = 4):
        self.cuda = torch.device(device).type == "cuda"
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(slots):
            self.free.put(i)
        self.buffers: list[torch.Tensor | None] = [None] * slots

    def stage(self, parts: list[tuple[np.ndarray, torch.Tensor]], timer=UNTIMED) -> Staged:
        """Start copying the embeddings ``parts`` ((positions, [m, feature] on the device), as
        ``unit_conditions``'s groups) to the host."""
        x = parts[0][1] if len(parts) == 1 else torch.cat([v for _, v in parts])
        with timer.waiting():
            slot = self.free.get()
        buf = self._buffer(slot, x)
        with timer.device("device_to_host"):
            buf.copy_(x, non_blocking=self.cuda)
        ready = None
        if self.cuda:
            ready = torch.cuda.Event()
            ready.record()
        return Staged(buf, _unit_order(parts), ready, slot)

    def _buffer(self, slot: int, x: torch.Tensor) -> torch.Tensor:
        nbytes = x.numel() * x.element_size()
        buf = self.buffers[slot]
        if buf is None or buf.numel() < nbytes:
            buf = self.buffers[slot] = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=self.cuda)
        return buf[:nbytes].view(x.dtype).view(x.shape)

    @staticmethod
    def values(staged: Staged) -> np.ndarray:
        """The staged rows in unit order, once their copy is done (the writer thread waits here)."""
        if staged.ready is not None:
            staged.ready.synchronize()
        v = staged.buffer.numpy()
        return v if staged.order is None else v[staged.order]

    def release(self, staged: Staged) -> None:
        self.free.put(staged.slot)


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
