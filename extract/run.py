"""``crs extract``: embed one dataset with one encoder (``extract``) or several (``extract_many``,
which decodes and perturbs each image and condition once for all of them), clean and perturbed,
into the store.

The work unit is one store chunk of rows. Rows are ordered test first, so chunk j of
the clean array and chunk j of every perturbed (test-only) array cover the same
images: each unit decodes its images once, then embeds them clean and under every
pending perturbation of the dataset's modality suite. Units whose chunks are all
written are skipped without decoding, so a re-run after a crash, kill -9 or Ctrl-C
finishes only what is missing, with the same numbers an uninterrupted run writes.

What is pending is what the store's ``EmbeddingArray.pending()`` says (chunks never
committed, and committed ones found damaged), so a re-run also repairs damaged chunks.

Commits, in this order within a unit: its decoding failures (into the dataset's failures
table), then each (chunk, condition) with its done flag as soon as that condition is
embedded. A kill therefore loses at most one (chunk, condition) of forward passes and the
unit's decoding, never a failure whose chunk is marked done; and the half-written files a
kill leaves (Zarr's ``*.partial``) are removed at the next start, under the locks.

Throughput: units are decoded ahead by DataLoader workers (``workers``; pinned memory
and non-blocking copies on CUDA), which also run the perturbations whose codec stays on the
CPU (JPEG); the loop never waits for the device: embeddings reach reused host buffers by an
asynchronous copy and go to disk on a background writer thread that waits for it, so
several batches are in flight; the batch halves on out-of-memory instead of failing, and
CUDA runs under bf16 autocast (``crs.extract.models``).

Safety: one lock per (dataset, encoder) in the store (pid + host; a lock left by a dead
process is taken over); a short lock per dataset guards its metadata and failures
table, so several encoders can write into one store at the same time (``crs.store.locks``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from typing import NamedTuple

import numpy as np
import torch

from crs.conditions import CLEAN, parse
from crs.extract import datasets, encoders, perturb
from crs.extract.cost import device_name, model_cost
from crs.extract.encoders import EncoderSpec
from crs.extract.models import load, pick_device
from crs.extract.options import ExtractOptions
from crs.names import SPLIT_CODE
from crs.store import DatasetTable, Store, StoreError, dataset_lock, extraction_lock, store_order
from crs.store.zarr_store import now, set_attrs
from crs.extract.timing import UNTIMED, DeviceClock
from crs.extract.units import (HOST_FAMILIES, DecodedUnits, Embedder, ExtractSummary, HostBuffers, Plan, PreparedUnits,
                               Staged, Unit, after_commit, commit_failures, unit_conditions, unit_failures)


log = logging.getLogger("crs.extract")


def dataset_table(ds) -> DatasetTable:
    """The dataset's metadata in store row order (test, val, train)."""
    t = ds.table()
    order = store_order(t.split)
    attrs = {
        "task": ds.task,
        "classes": list(ds.classes),
        "ordinal": bool(ds.ordinal),
        "shift_target": ds.shift_target,
        "description": ds.description,
        "source": ds.source,
        "size": ds.size,
        "seed": ds.seed,
        "image_size": ds.image_size,
        "modality": ds.modality,
    }
    if ds.provenance is not None:  # file-based datasets: root, CSV files, split kind and seed, label policy
        attrs.update(ds.provenance)
    return DatasetTable(
        name=ds.name,
        ids=np.asarray(t.ids)[order],
        labels=np.asarray(t.labels)[order],
        split=np.asarray(t.split)[order],
        group=np.asarray(t.group)[order],
        attrs={**attrs, "source_row": order.tolist()},
    )


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


# ----------------------------------------------------------------------- extract
def extract(store: Store, encoder: str | EncoderSpec, dataset, options: ExtractOptions | None = None, *, ds=None,
            progress=None, stages=None, **settings) -> ExtractSummary:
    """Embed ``dataset`` with ``encoder`` into ``store``; resumes whatever is incomplete (``extract_many``
    with one encoder). ``settings``: fields of ``ExtractOptions`` that change ``options``."""
    options = ExtractOptions.of(options, **settings)
    return extract_many(store, [encoder], dataset, options, ds=ds, progress=progress, stages=stages)[0]


def extract_many(store: Store, encoders_: list[str | EncoderSpec], dataset, options: ExtractOptions | None = None,
                 *, ds=None, progress=None, stages=None) -> list[ExtractSummary]:
    """Embed ``dataset`` with each of ``encoders_`` into ``store``, as ``options`` says (default: the
    defaults); resumes whatever is incomplete. Returns one summary per encoder, in the order given (a
    name given twice runs once).

    Locally, each image is decoded once, and perturbed once per condition, for all the encoders:
    a work unit (chunk j) is decoded if any encoder has a chunk j pending, each of its conditions is
    computed when any encoder needs it and embedded by every encoder that does, each (encoder, chunk,
    condition) committed with its done flag as soon as it is embedded, as for one encoder. The
    models are loaded in groups (``encoder_groups``): at most ``options.max_models`` (None: ``MAX_MODELS``)
    whose float32 weights plus one batch's activations fit ``MEMORY_SHARE`` of the device's free memory
    (the host's on the CPU), so the whole registry (``--pretrained``) never loads at once; the groups run
    one after the other, each decoding and perturbing once for its encoders (sharing a decode among 8
    encoders leaves 1/8 of its cost per encoder; more saves little and holds more memory and locks). The
    images held are one unit's decoded ones plus one condition's perturbed ones. The locks of a group's
    (dataset, encoder) pairs are held while it runs.

    ``encoders_`` are registry names or records (``encoders.resolve``); ``dataset`` a name or an
    opened dataset object; ``ds`` an already opened dataset object (else ``datasets.get(dataset,
    size=options.size)``). ``progress`` is an optional ``rich.progress.Progress``; one task per encoder is
    added to it. ``options.executor`` 'ray' spreads the work units over a Ray cluster, one encoder after
    the other (``crs.extract.ray_executor``, as ``options.ray`` says). ``stages``: a
    ``crs.extract.timing.StageTimes`` the local run fills with its time per stage
    (benchmarks/extract_bench.py; None: not timed).
    """
    options = options or ExtractOptions()
    specs, dataset, ds = _resolved(encoders_, dataset, ds, options.size)
    if options.executor == "ray":  # one encoder after the other, each over the cluster
        return [_extract_on_ray(store, spec, dataset, ds, options, progress=progress) for spec in specs.values()]
    out = {}
    for group in encoder_groups(specs, options.device, options.max_models, options.batch):
        runs = _extract_locally(store, {n: specs[n] for n in group}, dataset, ds, options, progress=progress,
                                stages=stages)
        out.update(zip(group, runs))
    return [out[n] for n in specs]


def _resolved(encoders_, dataset, ds, size: float) -> tuple[dict, str, object]:
    """({name: record} of ``extract_many``'s encoders, a name given twice once; the dataset's name; the
    opened dataset: ``ds``, or ``dataset`` itself when it is an opened object, else ``datasets.get``)."""
    specs = {}
    for e in encoders_:
        spec = encoders.get(e) if isinstance(e, str) else e
        specs.setdefault(spec.name, spec)
    if not isinstance(dataset, str):  # an opened dataset object (a real dataset's adapter)
        ds, dataset = dataset, dataset.name
    return specs, dataset, ds if ds is not None else datasets.get(dataset, size=size)


MEMORY_SHARE = 0.8  # of the device's free memory (the host's available memory on the CPU) a group may take
MAX_MODELS = 8  # loaded together at most unless --max-models says otherwise (module docstring of extract_many)
BYTES_PER_PARAMETER = 4  # weights stay float32 (bf16 is autocast, crs.extract.models)
# one image's activations at their peak, per input pixel: 64 float32 values. The widest tensor of a forward
# pass holds ~16-21 values per input pixel (ViT-L/16 at 224: 197 tokens x 4096 MLP units = 16; SigLIP
# so400m at 384: 729 x 4304 = 21; ResNet-50's 64 x 112 x 112 stem output: 16); its input, output and the
# residual stream are alive together, and bf16 would halve it: 64 float32 is an upper estimate
ACTIVATION_BYTES_PER_PIXEL = 64 * 4


def model_bytes(spec, batch: int) -> tuple[int | None, int]:
    """(float32 weights in bytes, from the record's parameter count on the meta device: None where unknown
    before loading; one batch's activations, ``batch * input_size**2 * ACTIVATION_BYTES_PER_PIXEL``)."""
    from crs.extract.cost import parameters

    p = parameters(spec)
    return (None if p is None else BYTES_PER_PARAMETER * p), batch * spec.input_size ** 2 * ACTIVATION_BYTES_PER_PIXEL


def memory_budget(device: str | None) -> int:
    """``MEMORY_SHARE`` of what ``device`` has free now: a CUDA device's free memory, else the host's."""
    dev = pick_device(device)
    if dev.type == "cuda":
        return int(MEMORY_SHARE * torch.cuda.mem_get_info(dev)[0])
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX host
        free = 8 << 30
    return int(MEMORY_SHARE * free)


def encoder_groups(specs: dict, device: str | None, max_models: int | None, batch: int = 64,
                   budget: int | None = None) -> list[list[str]]:
    """The names of ``specs`` in groups to load together (``model_groups``): each group's float32 weights
    plus one batch's activations (``model_bytes``) within ``budget`` bytes (default ``memory_budget``),
    and at most ``max_models`` models (None: ``MAX_MODELS``). Says in the log how many load together."""
    names = list(specs)
    if len(names) <= 1:
        return [names] if names else []
    budget = memory_budget(device) if budget is None else budget
    sizes, acts = zip(*(model_bytes(specs[n], batch) for n in names))
    cap = MAX_MODELS if max_models is None else max_models
    groups = [[names[i] for i in g] for g in model_groups(list(sizes), budget=budget, max_models=cap,
                                                         activations=list(acts))]
    log.info("extract: %d encoders in %d groups, at most %d models loaded together (budget %.2f GB: float32 "
             "weights plus one batch of %d images' activations; at most %d models)", len(names), len(groups),
             max(map(len, groups)), budget / 1e9, batch, cap)
    return groups


def model_groups(sizes: list[int | None], *, budget: int | None, max_models: int | None,
                 activations: list[int] | None = None) -> list[list[int]]:
    """Consecutive groups of the indices of ``sizes`` (bytes of each model's weights), in order: a group
    closes when the next model would take it past ``budget`` bytes -- its weights summed plus the largest
    of its ``activations`` (one batch's, default 0: the models run one after the other) -- or past
    ``max_models`` models (None: no such limit). A model of unknown size (None), or one over the budget
    alone, gets a group of its own."""
    if max_models is not None and max_models < 1:
        raise ValueError(f"max_models must be at least 1, not {max_models}")
    acts = activations or [0] * len(sizes)
    groups: list[list[int]] = []
    weights, peak, closed = 0, 0, True
    for i, size in enumerate(sizes):
        alone = budget is not None and (size is None or size + acts[i] > budget)
        room = (not closed and not alone and (max_models is None or len(groups[-1]) < max_models)
                and (budget is None or weights + size + max(peak, acts[i]) <= budget))
        if room:
            groups[-1].append(i)
            weights, peak = weights + (size or 0), max(peak, acts[i])
        else:
            groups.append([i])
            weights, peak = size or 0, acts[i]
        closed = alone
    return groups


def _extract_locally(store, specs: dict, dataset: str, ds, options: ExtractOptions, *, progress,
                     stages=None) -> list[ExtractSummary]:
    """``extract_many`` in this process: every encoder's locks and models at once, each unit decoded once."""
    with contextlib.ExitStack() as locks:
        stale = {}
        for name in specs:
            stale[name] = locks.enter_context(extraction_lock(store, dataset, name))
            remove_partial_files(store, dataset, name)  # left by a killed run: nothing of ours is writing
        jobs = [prepare(store, spec, dataset, ds, options) for spec in specs.values()]
        for i, (plan, model) in enumerate(jobs):
            if plan.units and model is None:
                jobs[i] = (plan, load(plan.spec, pick_device(options.device), weights=options.weights,
                                      trust_remote_code=options.trust_remote_code, precision=options.precision))
        t0 = time.perf_counter()  # the models are loaded
        busy = [(plan, model) for plan, model in jobs if plan.units]
        if busy:
            _run_units_locally(store, busy, ds, workers=options.workers, strict=options.strict, progress=progress,
                               stages=stages)
        out = []
        for (plan, model), name in zip(jobs, specs):
            out.append(_finish(store, plan, t0, stale[name]))
            if plan.summary.forward_images:
                record_cost(plan, model)
        return out


def _extract_on_ray(store, spec, dataset, ds, options: ExtractOptions, *, progress):
    with extraction_lock(store, dataset, spec.name) as stale:
        remove_partial_files(store, dataset, spec.name)
        plan, model = prepare(store, spec, dataset, ds, options)
        t0 = time.perf_counter()
        measured = None
        if plan.units:
            t0, measured = _run_units(store, plan, ds, options, progress)
            remove_partial_files(store, dataset, spec.name)  # a Ray replica that died mid-write leaves one
        summary = _finish(store, plan, t0, stale)
        if plan.summary.forward_images:  # as the local executor: the replicas' weights, cost and forward rate
            record_cost(plan, measured=measured or {})
        return summary


def _run_units(store, plan, ds, options: ExtractOptions, progress) -> tuple[float, dict | None]:
    """Run the pending units of ``plan`` on Ray; returns (when the extraction itself began, the
    replicas' ``model_cost``: None where none could be had)."""
    from crs.extract.ray_executor import run_units_on_ray

    t0 = time.perf_counter()
    measured = run_units_on_ray(store, plan, ds, options, progress=progress)
    return t0, measured


def _is_partial(name: str) -> bool:
    """A file a killed writer left half-written: Zarr's local store writes ``KEY.<uuid4 hex>.partial``
    and renames it over KEY; ``crs.files.atomic_write`` writes ``.NAME.<random>.tmp``."""
    return name.endswith(".partial") or (name.startswith(".") and name.endswith(".tmp"))


def remove_partial_files(store: Store, dataset: str, encoder: str) -> list[str]:
    """Delete the half-written files a killed extraction of (``dataset``, ``encoder``) left in a local
    store: in its embedding arrays (the caller holds their extraction lock) and in what the dataset
    lock guards (the dataset's group, its per-image arrays and its failures table); never elsewhere
    (other encoders' arrays, predictions), where another run may be writing now. Object stores put
    whole objects: nothing to do. Returns the paths removed."""
    if store.is_url:
        return []
    root = store.path[len("file://"):] if store.path.startswith("file://") else store.path
    base = os.path.join(root, "datasets", dataset)
    if not os.path.isdir(base):
        return []
    removed = _remove_partials(os.path.join(base, "embeddings", encoder))
    with dataset_lock(store, dataset):
        removed += _remove_partials(base, recurse=False)
        for key in ("image_id", "label", "split", "group", "failures"):
            removed += _remove_partials(os.path.join(base, key))
    return removed


def _remove_partials(folder: str, recurse: bool = True) -> list[str]:
    removed = []
    for top, _, files in os.walk(folder):
        for name in files:
            if _is_partial(name):
                path = os.path.join(top, name)
                try:
                    os.unlink(path)
                    removed.append(path)
                except FileNotFoundError:
                    pass
        if not recurse:
            break
    return removed


def _finish(store: Store, plan, t0: float, stale: str | None) -> ExtractSummary:
    """The summary of a run whose units are done: failures, time, and which arrays are complete."""
    summary = plan.summary
    summary.failures = len(store.failures(plan.dataset)["image_id"])
    summary.seconds = time.perf_counter() - t0
    summary.complete = all(arr.finalize() for arr in plan.arrays.values())
    summary.arrays = list(plan.arrays)
    summary.lock_taken_over = stale
    return summary


def prepare(store, spec, dataset, ds, options: ExtractOptions):
    """Write the dataset's metadata, create (or check) every array and list the pending units, as
    ``options`` says (chunk, dtype, perturbations and severities, and how to load a model).

    Returns (plan, model): the model is loaded here only when the spec does not say its width."""
    table = dataset_table(ds)
    with dataset_lock(store, dataset):
        store.write_dataset(table)
    table = store.dataset(dataset)  # the stored order is the truth
    modality = ds.modality
    conds = [CLEAN] + _perturbed_conditions(dataset, table, modality, options.perturbations, options.severities)

    model = None
    if spec.width == 0:  # a timm:/hf: id: the model tells its width
        model = load(spec, pick_device(options.device), weights=options.weights,
                     trust_remote_code=options.trust_remote_code, precision=options.precision)
        spec = model.spec

    provenance = {**_provenance(spec, options.weights, modality, options.settings()),
                  "dataset": _identity(table.attrs)}
    n, n_test = len(table.ids), table.n_test
    arrays = {
        cond: store.embedding(
            dataset, spec.name, cond, rows="all" if cond == CLEAN else "test",
            n_rows=n if cond == CLEAN else n_test, width=spec.width, chunk=options.chunk, dtype=options.dtype,
            attrs={**provenance, "perturbation": _perturbation(cond), **perturb.generator_attrs(cond)},
        )
        for cond in conds
    }
    summary = ExtractSummary(encoder=spec.name, dataset=dataset, images=n, conditions=len(conds),
                             batch=options.batch)
    units, summary.chunks_skipped = _pending_units(table, conds, arrays)
    return Plan(spec=spec, dataset=dataset, conds=conds, arrays=arrays, units=units, batch=options.batch,
                summary=summary), model


def _perturbed_conditions(dataset: str, table: DatasetTable, modality, perturbations: bool, severities) -> list[str]:
    """The modality suite's conditions, where the dataset has train and test images to probe and test."""
    has_train = bool((table.split == SPLIT_CODE["train"]).any())
    if not (perturbations and has_train and table.n_test):
        return []
    if modality is None:
        raise StoreError(f"dataset {dataset!r} has no modality, so no perturbation suite; pass --no-perturb")
    return perturb.conditions(modality, tuple(severities))


# the dataset attributes a command line names it by (crs.store.zarr_store's repair commands)
IDENTITY = ("csv", "root", "size", "modality", "shift_target", "split_seed", "uncertain", "identity")


def _identity(attrs: dict) -> dict:
    """The dataset's attributes that name it on the command line, kept with each embedding array too, so
    that a repair command can still name it when the dataset's own metadata is damaged."""
    return {k: attrs[k] for k in IDENTITY if attrs.get(k) is not None}


def _perturbation(cond: str) -> dict | None:
    """The parameters of a condition's perturbation, as recorded with its array (None when clean)."""
    if cond == CLEAN:
        return None
    c = parse(cond)
    return perturb.parameters(c.family, c.severity)


def _provenance(spec: EncoderSpec, weights: str | None, modality, settings: dict | None = None) -> dict:
    """What every array of one extraction records about how its embeddings were made, when created
    (``record_cost`` adds the encoder's weights and cost once it has embedded)."""
    from crs import provenance

    return {
        "encoder_spec": spec.as_dict(),
        "weight_source": spec.weight_source if weights is None else f"local file {weights}",
        "revision": spec.revision,
        "preprocessing": {
            "input_size": spec.input_size,
            "mean": list(spec.mean),
            "std": list(spec.std),
            "interpolation": spec.interpolation,
            "pooling": spec.pooling,
            "order": PREPROCESSING_ORDER,
        },
        "modality": modality,
        "libraries": provenance.library_versions(EXTRACT_LIBRARIES),
        "tool": provenance.collect({"extract": settings or {}}),
        "created": now(),
    }


EXTRACT_LIBRARIES = ("crs-bench", "torch", "torchvision", "timm", "transformers", "numpy", "zarr")
PREPROCESSING_ORDER = ("decode (shorter side to the dataset's image size, never upscaled) -> [0,1] float -> "
                       "perturb at that working size -> resize to the input size -> normalise")


def record_cost(plan: Plan, model=None, *, measured: dict | None = None) -> None:
    """After a run that embedded something: write into every array of ``plan`` the encoder's weights
    (``weights_info``) and cost (``crs.extract.cost.measure``) -- ``model_cost(model)``, or ``measured``
    when it was worked out elsewhere (a Ray replica) -- with the forward rate measured in this run
    (images/s in the forward passes, model load, decoding and perturbing excluded), the device seconds
    of those forward passes (``seconds``) and the device; the same on either executor.
    Written after the data, as the rate is known only then; a run with nothing to do writes nothing,
    so it keeps the store's content digests."""
    summary = plan.summary
    measured = model_cost(model) if measured is None else measured
    cost = dict(measured.get("cost") or {})
    rate = summary.forward_images / summary.forward_seconds if summary.forward_seconds > 0 else None
    # seconds: the device's in this run's forward passes (a Ray run's replicas summed), what the run cost
    cost.update({"images_per_s": None if rate is None else round(rate, 3), "seconds": round(summary.forward_seconds, 3),
                 "device": summary.device})
    update = {"weights": measured.get("weights"), "cost": cost}
    for arr in plan.arrays.values():
        set_attrs(arr.group, update)


def _pending_units(table: DatasetTable, conds: list[str], arrays: dict) -> tuple[list[Unit], int]:
    """(the units with a pending chunk, how many chunks of all arrays are written already)."""
    source_row = np.asarray(table.attrs["source_row"])
    n_test = table.n_test
    pending = {cond: set(arr.pending().tolist()) for cond, arr in arrays.items()}
    units = []
    for j in range(arrays[CLEAN].n_chunks):
        todo = [c for c in conds if j in pending[c]]
        if todo:
            sl = arrays[CLEAN].chunk_rows(j)
            units.append(Unit(j=j, source_rows=source_row[sl.start : sl.stop], ids=table.ids[sl].tolist(),
                              n_test=int(max(0, min(sl.stop, n_test) - sl.start)), conds=todo))
    skipped = sum(a.n_chunks for a in arrays.values()) - sum(len(p) for p in pending.values())
    return units, skipped


def _run_units_locally(store: Store, jobs: list, ds, *, workers, strict, progress, stages=None) -> None:
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
    conds = {j: [c for c in plan0.conds if any(c in u.conds for _, u in units[j])] for j in order}
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
            for cond, groups in unit_conditions(first[item.j], item.images, device, conds[item.j], item.host, timer):
                for i, u in need:
                    if cond in u.conds:
                        writer.put(embeds[i].plan.arrays[cond], item.j, embeds[i](groups, buffers, timer))
    finally:
        writer.close()  # what was embedded is committed, also on Ctrl-C (or SIGTERM, which the CLI makes one)
    for e in embeds:  # the device work is done (the writer waited for every copy)
        e.plan.summary.forward_seconds += e.clock.seconds("forward")
        e.plan.summary.batch = e.embed.batch
        timer.add("forward", e.clock.seconds("forward"))


class _Embedding(NamedTuple):
    """One encoder of a local run: its forward passes (timed on its own ``clock``), plan and progress."""

    embed: Embedder
    clock: DeviceClock
    plan: Plan
    progress: object
    task: object  # the encoder's progress task: one step per array chunk written (a chunk of one condition)

    def __call__(self, groups, buffers: HostBuffers, timer) -> Staged:
        """Embed one condition of a unit; its rows start on their way to the host."""
        with self.clock.span("forward"):
            parts = [(pos, self.embed(x)) for pos, x in groups]
        staged = buffers.stage(parts, timer)
        summary = self.plan.summary
        summary.chunks_written += 1
        summary.forward_images += sum(len(pos) for pos, _ in groups)
        if self.task is not None:
            self.progress.advance(self.task)
        return staged


def _task(progress, plan):
    if progress is None:
        return None
    return progress.add_task(f"{plan.spec.name} × {plan.dataset}", total=sum(len(u.conds) for u in plan.units),
                             unit="chunks")
