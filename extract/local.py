"""The local executor's loop: units decoded ahead by DataLoader workers, each condition computed once
and embedded by every encoder that needs it, chunks committed in order by a background writer."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import NamedTuple

import torch

from crs.extract.cost import device_name
from crs.extract.timing import UNTIMED, DeviceClock
from crs.extract.units import (
    HOST_FAMILIES,
    DecodedUnits,
    Embedder,
    HostBuffers,
    Plan,
    PreparedUnits,
    Staged,
    Unit,
    after_commit,
    commit_failures,
    unit_conditions,
    unit_failures,
)
from crs.foundations.conditions import CLEAN, parse
from crs.store import Store


# ----------------------------------------------------------------------- decoding
def _loader(units: PreparedUnits, order: list[int], workers: int, pin: bool):
    subset = torch.utils.data.Subset(units, order)
    kwargs = {"num_workers": workers, "batch_size": None, "pin_memory": pin, "collate_fn": _as_is}
    if workers > 0:
        kwargs["prefetch_factor"] = 2
    return torch.utils.data.DataLoader(subset, **kwargs)


def _as_is(item):
    """The DataLoader's collate function: a unit as its worker made it (numpy positions stay numpy)."""
    return item


# ----------------------------------------------------------------------- writing
class _Writer:
    """A background thread that commits, in order of arrival, a unit's decoding failures and then
    its chunks (each with its done flag, once its rows have reached the host: ``HostBuffers``); errors
    surface in ``put``/``close``."""

    def __init__(self, store: Store, dataset: str, buffers: HostBuffers, timer=UNTIMED, depth: int = 8):
        self.store, self.dataset, self.buffers, self.timer = store, dataset, buffers, timer
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="crs-writer", daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            try:
                if self.error is not None:
                    continue
                if item[0] == "failures":
                    commit_failures(self.store, self.dataset, item[1])
                else:
                    _, array, j, staged = item
                    values = self.buffers.values(staged)
                    t = time.perf_counter()
                    array.write_chunk(j, values)  # the chunk, then its done flag
                    self.timer.add("store_write", time.perf_counter() - t)
                    after_commit()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                self.error = exc
            finally:
                if item[0] == "chunk":
                    self.buffers.release(item[3])  # also after an error: the main thread may wait for it

    def _put(self, item):
        if self.error is not None:
            raise self.error
        self.q.put(item)

    def put_failures(self, failures: list[tuple[str, str, str]]):
        """A unit's failures: put before its chunks, so they are committed before any of its done flags."""
        if failures:
            self._put(("failures", failures))

    def put(self, array, j, staged: Staged):
        if self.error is not None:
            self.buffers.release(staged)
            raise self.error
        self.q.put(("chunk", array, j, staged))

    def close(self):
        self.q.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def run_units_locally(store: Store, jobs: list, ds, *, workers, strict, progress, stages=None) -> None:
    """Decode each unit once and commit it condition by condition, for every (plan, model) of ``jobs``
    (one per encoder, same dataset and chunk): first the unit's decoding failures, then each
    condition, computed once, embedded by each encoder that has its chunk pending, each (encoder,
    chunk, condition) committed with its done flag as soon as it is embedded.

    Nothing in the loop waits for the device: each batch's embeddings are copied to a reused host buffer
    without waiting (``HostBuffers``) and the writer thread waits for that copy, so the device works on
    the next batches (up to the buffers' count) while the host decodes, launches and writes. ``stages``:
    a ``crs.extract.timing.StageTimes`` to fill (None: only the forward passes are timed)."""
    plan0 = jobs[0][0]
    units: dict[int, list] = {}  # j -> [(job index, unit)]
    for i, (plan, _) in enumerate(jobs):
        if plan.arrays[CLEAN].chunk != plan0.arrays[CLEAN].chunk:  # pragma: no cover - store.embedding refuses
            raise ValueError("extract_many: every encoder's arrays must have the same chunk length")
        plan.summary.device = device_name(jobs[i][1].device)
        for u in plan.units:
            units.setdefault(u.j, []).append((i, u))
    timer = UNTIMED if stages is None else stages
    device = jobs[0][1].device
    embeds = [_Embedding(Embedder(model, plan.batch), DeviceClock(device), plan, progress, _task(progress, plan))
              for plan, model in jobs]
    order = sorted(units)
    first = {j: units[j][0][1] for j in order}
    calls = {(i, j): forward_calls(jobs[i][0], u) for j in order for i, u in units[j]}
    conds = {j: [c for c in plan0.conds if any(c in call for i, _ in units[j] for call in calls[i, j])]
             for j in order}
    host = {j: [c for c in conds[j] if c != CLEAN and parse(c).family in HOST_FAMILIES] for j in order}
    prepared = PreparedUnits(DecodedUnits(ds, {j: first[j].source_rows for j in order}, ds.paths), first, host)
    buffers = HostBuffers(device)
    writer = _Writer(store, plan0.dataset, buffers, timer)
    try:
        batches = iter(_loader(prepared, order, workers, device.type == "cuda"))
        while True:
            with timer.waiting():
                item = next(batches, None)
            if item is None:
                break
            timer.add("decode", item.seconds[0])
            timer.add("host_perturb", item.seconds[1])
            writer.put_failures(unit_failures(first[item.j], item.failures, strict))
            need = units[item.j]
            for i, _ in need:
                jobs[i][0].summary.decodes += len(item.images)
            pending: dict[int, list] = {i: [] for i, _ in need}  # job -> [(condition, groups)] not yet embedded
            for cond, groups in unit_conditions(first[item.j], item.images, device, conds[item.j], item.host, timer):
                for i, u in need:
                    call = next((c for c in calls[i, item.j] if cond in c), None)
                    if call is not None:
                        pending[i].append((cond, groups))
                        if cond == call[-1]:  # every call ends on one of conds[item.j]: nothing is left over
                            _flush(embeds[i], pending[i], item.j, u.conds, buffers, writer, timer)
    finally:
        writer.close()  # what was embedded is committed, also on Ctrl-C (or SIGTERM, which the CLI makes one)
    for e in embeds:  # the device work is done (the writer waited for every copy)
        e.plan.summary.forward_seconds += e.clock.seconds("forward")
        e.plan.summary.batch = e.embed.batch
        timer.add("forward", e.clock.seconds("forward"))


def forward_calls(plan: Plan, unit: Unit) -> list[list[str]]:
    """The conditions of ``unit`` that go through the encoder together, call by call: consecutive conditions of
    the plan's whole suite, each call closed once it holds ``plan.batch`` images, and only the calls holding a
    condition the unit has pending. The calls depend on the suite, never on what is pending, so that a resumed
    run repeats the uninterrupted run's forward passes exactly: a CPU kernel's float sums depend on the batch's
    shape, and a call made only of the pending conditions gave a resumed store 1-ulp differences. A call that
    holds a condition already written recomputes it and writes nothing for it."""
    whole, call, images = [], [], 0
    for cond in plan.conds:
        call.append(cond)
        images += len(unit.source_rows) if cond == CLEAN else unit.n_test
        if images >= plan.batch:
            whole.append(call)
            call, images = [], 0
    if call:
        whole.append(call)
    return [c for c in whole if any(cond in unit.conds for cond in c)]


def _flush(embedding, pending: list, j: int, write: list[str], buffers: HostBuffers, writer: _Writer,
           timer) -> None:
    """Embed the ``pending`` conditions of unit ``j`` for one encoder and hand those in ``write`` to the writer;
    empties ``pending``."""
    for cond, staged in embedding(pending, set(write), buffers, timer):
        writer.put(embedding.plan.arrays[cond], j, staged)
    pending.clear()


def _layout(x: torch.Tensor) -> tuple | None:
    """What tensors must share to go through the encoder as one: image shape and memory layout (the layout
    orders the encoder's float sums); None for a layout ``torch.cat`` would not keep."""
    if x.is_contiguous():
        return tuple(x.shape[1:]), "contiguous"
    if x.is_contiguous(memory_format=torch.channels_last):
        return tuple(x.shape[1:]), "channels_last"
    return None


def forward_together(embed, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """``embed`` of each of ``xs`` ([m_i, 3, S, S]), those of one shape and memory layout concatenated into
    one call, so that small sets of images (a condition of a few test rows) fill the encoder's batches."""
    out: list = [None] * len(xs)
    together: dict = {}
    for k, x in enumerate(xs):
        key = _layout(x)
        together.setdefault(key if key is not None else ("alone", k), []).append(k)
    for ks in together.values():
        parts = [xs[k] for k in ks]
        y = embed(parts[0] if len(parts) == 1 else torch.cat(parts))
        for k, part in zip(ks, y.split([len(p) for p in parts])):
            out[k] = part
    return out


class _Embedding(NamedTuple):
    """One encoder of a local run: its forward passes (timed on its own ``clock``), plan and progress."""

    embed: Embedder
    clock: DeviceClock
    plan: Plan
    progress: object
    task: object  # the encoder's progress task: one step per array chunk written (a chunk of one condition)

    def __call__(self, conds: list, write: set, buffers: HostBuffers, timer) -> Iterator[tuple[str, Staged]]:
        """Embed conditions of a unit ((condition, groups) each) in as few forward passes as their shapes
        allow; yields each condition in ``write`` with its rows on their way to the host (the caller hands each
        to the writer before the next takes a host buffer)."""
        flat = [(c, pos, x) for c, (_, groups) in enumerate(conds) for pos, x in groups]
        with self.clock.span("forward"):
            ys = forward_together(self.embed, [x for _, _, x in flat])
        summary = self.plan.summary
        for c, (cond, groups) in enumerate(conds):
            summary.forward_images += sum(len(pos) for pos, _ in groups)
            if cond not in write:  # already written: recomputed only to keep the call's shape
                continue
            staged = buffers.stage([(pos, y) for (k, pos, _), y in zip(flat, ys) if k == c], timer)
            summary.chunks_written += 1
            if self.task is not None:
                self.progress.advance(self.task)
            yield cond, staged


def _task(progress, plan):
    if progress is None:
        return None
    return progress.add_task(f"{plan.spec.name} × {plan.dataset}", total=sum(len(u.conds) for u in plan.units),
                             unit="chunks")
