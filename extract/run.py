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
embedded. A kill therefore loses at most one forward call's conditions (one, or the few whose
test rows share a batch locally) and the unit's decoding, never a failure whose chunk is marked
done; and the half-written files a kill leaves (Zarr's ``*.partial``) are removed at the next start, under the locks.

Throughput: units are decoded ahead by DataLoader workers (``workers``; pinned memory
and non-blocking copies on CUDA), which also run the perturbations whose codec stays on the
CPU (JPEG); the loop never waits for the device: embeddings reach reused host buffers by an
asynchronous copy and go to disk on a background writer thread that waits for it, so
several batches are in flight; the batch halves on out-of-memory instead of failing, and
CUDA runs under bf16 autocast (``crs.extract.models``).

Safety: one lock per (dataset, encoder) in the store (pid + host; a lock left by a dead
process is taken over); a short lock per dataset guards its metadata and failures
table, so several encoders can write into one store at the same time (``crs.store.locks``).

This module holds the entry points and the locks; the jobs they run are in
``crs.extract.groups`` (which encoders load together), ``crs.extract.prepare`` (arrays,
provenance, pending units, recorded cost), ``crs.extract.local`` (the local loop) and
``crs.extract.ray_executor``.
"""

from __future__ import annotations

import contextlib
import os
import time

from crs.extract import datasets, encoders
from crs.extract.encoders import EncoderSpec
from crs.extract.groups import encoder_groups
from crs.extract.local import run_units_locally
from crs.extract.models import load, pick_device
from crs.extract.options import ExtractOptions
from crs.extract.prepare import prepare, record_cost
from crs.extract.ray_executor import run_units_on_ray
from crs.extract.units import ExtractSummary
from crs.store import Store, dataset_lock, extraction_lock


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
            run_units_locally(store, busy, ds, workers=options.workers, strict=options.strict, progress=progress,
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
    t0 = time.perf_counter()
    measured = run_units_on_ray(store, plan, ds, options, progress=progress)
    return t0, measured


def _is_partial(name: str) -> bool:
    """A file a killed writer left half-written: Zarr's local store writes ``KEY.<uuid4 hex>.partial``
    and renames it over KEY; ``crs.foundations.files.atomic_write`` writes ``.NAME.<random>.tmp``."""
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
