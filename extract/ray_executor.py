"""``crs extract --executor ray``: the work units of one (dataset, encoder) spread over a Ray cluster.

The driver (the ``crs extract`` process) holds the (dataset, encoder) lock, writes the
dataset's metadata and creates every array (``crs.extract.prepare.prepare``), exactly as the
local executor does. Then each work unit -- chunk ``j`` of every pending array, i.e. one
store chunk of one (dataset, encoder, condition group) -- goes to one model replica: a Ray
actor that loaded the weights once (one GPU each where the cluster has GPUs). The replica
decodes the unit's images, embeds them clean and under every pending perturbation with the
same code as the local executor (``embed_unit``) and commits, as the local executor does,
first the unit's decoding failures (under the dataset lock), then each chunk with its done
flag as soon as it is embedded. Every chunk has exactly one writer, so no lock is needed
below the (dataset, encoder) one.

A unit whose replica dies (a crash, a killed worker, a pre-empted node) is sent again by Ray
to the restarted replica (``max_restarts=-1``), up to ``retries`` more times. Writing a chunk twice
writes the same values (the embedding of a unit does not depend on where it runs; on the
CPU bit for bit), and a done flag is set only after its chunk, so a retried or re-run unit
leaves the store exactly as a local run does. The driver marks the arrays complete.

The store must be one every node can reach: an object-store URL (s3://, gs://, az://) or a
folder on a shared file system. Weights given with ``--weights`` must be at the same path
on every node; hub weights come from each node's HF cache (``HF_HOME``).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque

import torch

from crs.extract.cost import device_name, model_cost
from crs.extract.models import load, pick_device
from crs.extract.options import ExtractOptions, RayOptions
from crs.extract.units import (
    DecodedUnits,
    Embedder,
    Plan,
    Unit,
    after_commit,
    commit_failures,
    embed_groups,
    unit_conditions,
    unit_failures,
)
from crs.foundations.errors import CrsError, UserError
from crs.store import Store

IN_FLIGHT_PER_ACTOR = 2  # one unit decoding while the other runs on the device


class RayUnavailable(UserError):
    """--executor ray without Ray installed, or a cluster that cannot be reached."""


class UnitFailed(CrsError):
    """A work unit failed on every attempt (its replica kept dying)."""


def _import_ray():
    try:
        import ray  # ray: an optional extra (crs-bench[ray])
    except ImportError:
        raise RayUnavailable("--executor ray needs Ray: pip install 'crs-bench[ray]' "
                             "(or use the default --executor local)") from None
    return ray


class Replica:
    """A model replica (a Ray actor): loads the weights once, then embeds and writes whole units."""

    def __init__(self, store_path, storage_options, plan_spec, dataset, ds, *, options: ExtractOptions, batch,
                 threads):
        if threads:
            torch.set_num_threads(threads)

        self.store = Store(store_path, mode="a", storage_options=storage_options)
        self.model = load(plan_spec, pick_device(options.device), weights=options.weights,
                          trust_remote_code=options.trust_remote_code, precision=options.precision)
        self.embed = Embedder(self.model, batch)
        self.encoder, self.dataset, self.ds, self.strict = plan_spec.name, dataset, ds, options.strict
        self.arrays = {}
        self.device_lock = threading.Lock()  # two units in flight: one decodes while the other embeds

    def run(self, unit: Unit) -> dict:
        units = DecodedUnits(self.ds, {unit.j: unit.source_rows}, self.ds.paths)
        _, images, failures = units[unit.j]
        failed = unit_failures(unit, failures, self.strict)
        commit_failures(self.store, self.dataset, failed)  # before any of the unit's done flags
        conditions = unit_conditions(unit, images, self.model.device)  # as embed_unit, the forward passes timed
        forward = chunks = 0
        seconds = 0.0
        while True:
            with self.device_lock:  # held while one condition is embedded, not while it is written
                cond, groups = next(conditions, (None, None))
                if cond is None:
                    break
                t = time.perf_counter()
                values = embed_groups(groups, self.embed)
                seconds += time.perf_counter() - t
            if cond not in self.arrays:
                self.arrays[cond] = self.store.open_embedding(self.dataset, self.encoder, cond)
            self.arrays[cond].write_chunk(unit.j, values)  # chunk first, then its done flag
            after_commit()
            forward += len(values)
            chunks += 1
        return {"j": unit.j, "failures": failed, "chunks": chunks, "forward_images": forward,
                "forward_seconds": seconds, "decodes": len(images), "batch": self.embed.batch,
                "device": device_name(self.model.device)}

    def cost(self) -> dict:
        """``crs.extract.cost.model_cost`` of this replica's model (its weights_info and measured cost)."""
        return model_cost(self.model)


def connect(address: str | None = None):
    """The Ray module, connected: to ``address`` ('auto' or ray://HOST:PORT), to the cluster this
    process already joined, or (None) to a new local instance."""
    ray = _import_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot reach a Ray cluster at --address {address!r}: {exc}") from exc
    return ray


def run_units_on_ray(store: Store, plan: Plan, ds, options: ExtractOptions, progress=None) -> dict | None:
    """Run ``plan.units`` on Ray replicas, as ``options`` (its ``ray`` record: default ``RayOptions()``)
    says; fills ``plan.summary`` as the local run does (each replica commits its units' decoding failures
    itself, before their chunks; the forward seconds are the replicas' summed, so the rate is one
    replica's). Returns one replica's ``cost.model_cost`` (weights and cost, for ``prepare.record_cost``), or
    None where that replica could not give it.

    ``actors`` defaults to one per GPU of the cluster (``gpus_per_actor`` 1) or, without GPUs
    (or with device 'cpu'), one per ``cpus_per_actor`` CPUs; never more than there are units.
    ``options.workers`` (DataLoader processes) does not apply: each replica decodes its own units."""
    ray_options = options.ray or RayOptions()
    ray = connect(ray_options.address)
    n_actors, gpus_per_actor = _actor_count(ray, store, plan, options.device, ray_options)
    cpus_per_actor, retries = ray_options.cpus_per_actor, ray_options.retries
    # CPU replicas run as many intra-op threads as this process's torch, whatever OMP_NUM_THREADS Ray
    # gives its workers: a matrix product's float sums depend on how it is split over threads, and
    # this keeps a Ray run on the CPU equal bit for bit to a local run from the same driver
    threads = torch.get_num_threads() if not gpus_per_actor else 0
    remote = ray.remote(max_restarts=-1, max_task_retries=retries)(Replica)
    ds_ref = ray.put(ds)
    pool = [remote.options(num_cpus=cpus_per_actor, num_gpus=gpus_per_actor, max_concurrency=IN_FLIGHT_PER_ACTOR)
            .remote(store.path, store.storage_options, plan.spec, plan.dataset, ds_ref, options=options,
                    batch=plan.batch, threads=threads)
            for _ in range(n_actors)]
    task = (progress.add_task(f"{plan.spec.name} × {plan.dataset} (ray, {n_actors} replicas)",
                              total=sum(len(u.conds) for u in plan.units), unit="chunks")
            if progress is not None else None)

    def advance(chunks: int) -> None:
        if task is not None:
            progress.advance(task, chunks)

    try:
        batches = _drain(ray, pool, plan, retries, advance)
        plan.summary.batch = min(batches) if batches else plan.batch
        try:  # asked after the units, so a measurement never delays or breaks them
            return ray.get(pool[0].cost.remote())
        except _lost_errors():  # the data is written; its cost is then not recorded (null), never a guess
            return None
    finally:
        for a in pool:
            ray.kill(a)


def _actor_count(ray, store: Store, plan: Plan, device, ray_options: RayOptions) -> tuple[int, float]:
    """(how many replicas, GPUs per replica) for the cluster ``ray`` is connected to."""
    actors, gpus_per_actor, cpus_per_actor = ray_options.actors, ray_options.gpus_per_actor, ray_options.cpus_per_actor
    resources = ray.cluster_resources()
    cluster_gpus = float(resources.get("GPU", 0))
    if gpus_per_actor is None:
        gpus_per_actor = 1.0 if cluster_gpus >= 1 and device in (None, "cuda") else 0.0
    if gpus_per_actor > 0 and cluster_gpus < gpus_per_actor:
        raise RayUnavailable(f"gpus_per_actor {gpus_per_actor} but the Ray cluster has {cluster_gpus:g} GPUs")
    slots = int(cluster_gpus // gpus_per_actor) if gpus_per_actor else int(resources.get("CPU", 1) // cpus_per_actor)
    n_actors = max(1, min(actors or slots or 1, len(plan.units)))
    if not store.is_url and len([n for n in ray.nodes() if n.get("Alive")]) > 1:
        warnings.warn(f"--store {store.path!r} is a local path and the Ray cluster has several nodes: every "
                      "node must see the same folder (a shared file system), or use an object-store URL",
                      stacklevel=3)
    return n_actors, gpus_per_actor


def _lost_errors() -> tuple:
    """The Ray exceptions that mean a replica died (its unit was retried and still failed)."""
    from ray.exceptions import RayActorError  # ray: an optional extra (crs-bench[ray])

    try:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, WorkerCrashedError
        return (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)
    except ImportError:  # older Ray
        return (RayActorError,)


def _drain(ray, pool: list, plan: Plan, retries: int, advance) -> list[int]:
    """Keep IN_FLIGHT_PER_ACTOR units on each replica until every unit is done; returns the
    replicas' final batch sizes. ``advance(n)`` reports n more chunks written."""
    from ray.exceptions import RayTaskError  # ray: an optional extra (crs-bench[ray])

    lost = _lost_errors()
    summary = plan.summary
    queue, inflight = deque(plan.units), {}

    def submit(i: int) -> None:
        unit = queue.popleft()
        inflight[pool[i].run.remote(unit)] = (unit, i)

    for _ in range(IN_FLIGHT_PER_ACTOR):
        for i in range(len(pool)):
            if queue:
                submit(i)
    batches = []
    while inflight:
        (ref,), _ = ray.wait(list(inflight), num_returns=1)
        unit, i = inflight.pop(ref)
        try:
            r = ray.get(ref)
        except RayTaskError as exc:  # our code raised (a bad image under --strict, a store error): no retry
            raise (exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc) from None
        except lost as exc:  # Ray restarted the replica and sent the unit again, ``retries`` times
            raise UnitFailed(f"work unit {unit.j} of {plan.spec.name} × {plan.dataset} failed {retries + 1} "
                             f"times (its replica died each time): {exc}. What was written is kept; run the "
                             "same command again to resume") from exc
        summary.chunks_written += r["chunks"]
        summary.forward_images += r["forward_images"]
        summary.forward_seconds += r["forward_seconds"]
        summary.decodes += r["decodes"]
        summary.device = r["device"]
        batches.append(r["batch"])
        advance(r["chunks"])
        if queue:
            submit(i)
    return batches
