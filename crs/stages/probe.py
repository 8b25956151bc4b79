"""The probe stage: embeddings to probe predictions and run records (``run``), the pairs a command names
(``probe_pairs``), and ``crs run``'s step, which fits a pair again only when it is not current: when the
hash of the probe's options record and of the content the pair reads, or the files it wrote, differ
from what ``RESULTS/run_state.json`` recorded."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from threadpoolctl import threadpool_limits

from crs.extract import encoders as encreg
from crs.foundations.config import Config, Probe, options_record, record_hash, settings_hash
from crs.foundations.errors import BadInput
from crs.foundations.progress import NO_PROGRESS, Progress
from crs.stages.datasets import require_measurable_stored
from crs.stages.names import check_given
from crs.stages.state import Stage, State, file_digest


def probe_pairs(store_path: str, encoders: list[str], datasets: list[str], *, every: bool) -> list[tuple[str, str]]:
    """The (encoder, dataset) pairs to probe: the ones named; with ``every``, or with only datasets or
    only encoders named, every pair in the store (filtered by the names given); BadInput naming what
    the store holds when a pair lacks embeddings."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them
    from crs.probe.run import pairs_in_store  # zarr, polars: crs encoders lists the registry without them
    from crs.store import Store  # zarr: crs encoders lists the registry without it

    datasets = [dsreg.store_name(d) for d in datasets]  # csv:PATH -> its store name
    st = Store(store_path, mode="r")
    available = pairs_in_store(st)
    if encoders:
        check_given(encoders, sorted(set(encreg.names()) | {e for e, _ in available}), "encoder")
    if datasets:
        check_given(datasets, sorted(set(dsreg.names()) | set(dsreg.REAL) | set(st.datasets())), "dataset")
    for d in datasets:
        if st.has_dataset(d) and not (st.dataset(d).split == 0).any():
            raise BadInput(f"dataset {d!r} has no training split (an external test set); it is evaluated "
                           "as the shift target of the dataset that names it, not probed itself")
    for d in dict.fromkeys(d for _, d in available if not datasets or d in datasets):
        require_measurable_stored(st, d)
    held = ", ".join(f"{e} × {d}" for e, d in available) or "nothing yet"
    if every or bool(encoders) != bool(datasets):  # one side named: every pair the store holds for it
        pairs = [(e, d) for e, d in available if (not encoders or e in encoders) and (not datasets or d in datasets)]
        if not pairs:
            raise BadInput(f"nothing to probe in {store_path!r} for that selection (it holds: {held}); "
                           "run `crs extract` first")
        return pairs
    if not encoders or not datasets:
        raise BadInput("pass --encoder and --dataset, or --all")
    pairs = [(e, d) for e in encoders for d in datasets]
    for e, d in pairs:
        if (e, d) not in available:
            fix = shlex.join(["crs", "extract", "--encoder", e, "--dataset", d, "--store", store_path])
            raise BadInput(f"no complete clean embeddings of {d!r} by {e!r} in {store_path!r} (it holds: "
                           f"{held}); run `{fix}`")
    return pairs


def probe_options(settings: Probe):
    """The probe's options record (``crs.probe.options.ProbeOptions``) of the ``[probe]`` settings: each
    setting in its field, the seed count as the seeds 0..seeds-1."""
    from crs.probe.options import ProbeOptions  # crs.probe: crs encoders lists the registry without it

    return options_record(ProbeOptions, settings, seeds=tuple(range(settings.seeds)))


def run(store_path: str, results: Path, pairs: list[tuple[str, str]], settings: Probe,
          progress: Progress = NO_PROGRESS, on_done: Callable | None = None) -> list:
    """Fit and evaluate ``settings``' probes on each pair; ``on_done(summary)`` after each pair is written.

    Where every pair is small (``crs.probe.run.small_pair``), ``PAIR_WORKERS`` pairs are probed at
    a time, each pair still fitted, evaluated and committed whole on its own: one pair's compiling,
    reading and writing overlap another's solver loop. The results are the same bits as one at a
    time (each pair's programs run as they would alone); ``on_done`` is called in ``pairs`` order."""
    from crs.probe.run import (  # zarr, polars: crs encoders lists the registry without them
        compile_cache,
        head_name,
        planned_loops,
        small_pair,
    )
    from crs.probe.run import probe as probe_pair  # zarr, polars: crs encoders lists the registry without them
    from crs.store import Store  # zarr: crs encoders lists the registry without it

    options = probe_options(settings)
    pairs = list(dict.fromkeys(pairs))  # a pair named twice is probed once (side by side, its lock would refuse it)
    store = Store(store_path, mode="a")
    compile_cache()  # once, before any worker thread
    # one step per solver loop (a fraction group of one pair), so the bar moves and can say the time left
    loops = sum(planned_loops(store, enc, d, settings.fractions, settings.head) for enc, d in pairs)
    task = progress.add_task("probes", total=loops, unit="solver loops")

    def one(pair):
        enc, d = pair
        progress.update(task, description=f"probes {head_name(enc, settings.head)} × {d}")
        return probe_pair(store, enc, d, options=options, results=Path(results), progress=progress, task=task)

    workers = PAIR_WORKERS if len(pairs) > 1 and all(small_pair(store, enc, d) for enc, d in pairs) else 1
    summaries = []
    # One BLAS thread for the whole stage, set before any worker starts. The probes' host products
    # (crs.probe.core) each run under threadpool_limits(1), which is process-wide: from two threads,
    # one's exit put back two BLAS threads under the other's product, and the pair's bits then
    # depended on the timing (1 of 3 side-by-side runs differed). Nested in this one, each limit
    # finds 1 and puts back 1.
    with threadpool_limits(1):
        for summary in _in_order(one, pairs, workers):
            summaries.append(summary)
            if on_done is not None:
                on_done(summary)
    return summaries


PAIR_WORKERS = 2  # small pairs probed at a time (``run``; crs demo's probe stage: benchmarks/probe_bench.py)


def _in_order(fn, items: list, workers: int):
    """Yield fn(item) for each item in order, ``workers`` items running at a time (threads). Once an
    item fails, or the caller stops (an error, Ctrl-C, SIGTERM), no item starts any more; the ones
    running are let finish (a pair is committed whole or not at all) and the first error in order
    goes on."""
    if workers <= 1:
        yield from map(fn, items)
        return
    stop = threading.Event()

    def guarded(item):
        if stop.is_set():
            return None  # never yielded: the caller is past an error by then
        try:
            return fn(item)
        except BaseException:
            stop.set()
            raise

    with ThreadPoolExecutor(workers, thread_name_prefix="crs-probe") as pool:
        futures = []
        try:
            futures.extend(pool.submit(guarded, item) for item in items)  # inside: an interrupt here cancels too
            for f in futures:
                yield f.result()
        finally:  # also when the caller stops early
            stop.set()
            for f in futures:
                f.cancel()


def wanted_pairs(cfg: Config, store, summaries) -> list[tuple[str, str]]:
    """The (encoder, dataset) pairs with a training split that were extracted; BadInput where one lacks embeddings."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders loads this layer
    from crs.probe.run import pairs_in_store  # polars, zarr: crs encoders loads this layer

    trained = {dsreg.store_name(d) for d in cfg.datasets.names}
    wanted = sorted({(s.encoder, s.dataset) for s in summaries if s.dataset in trained})
    available = set(pairs_in_store(store))
    lacking = [p for p in wanted if p not in available]
    if lacking:
        raise BadInput("no complete clean embeddings with a training split for "
                       + ", ".join(f"{e} × {d}" for e, d in lacking)
                       + f" in {cfg.store}; a dataset without a training split is probed as the shift target "
                       "of the dataset that names it, not on its own")
    return wanted


def _read_by(store, d: str) -> list[str]:
    """The datasets a probe of ``d`` reads: ``d`` and its shift target, where the store holds them."""
    target = store.dataset(d).attrs.get("shift_target")
    return [dd for dd in ([d, target] if target else [d]) if store.has_dataset(dd)]


def pair_hash(digest, store, options, e: str, d: str) -> str:
    """The probe's options record and the content of what the pair reads: its dataset's and its shift
    target's tables and ``e``'s embeddings of them (``digest(dataset, encoder)``, a
    ``Store.content_digest``, which covers the store's identity but not its path)."""
    return record_hash(options, [(dd, digest(dd, e)) for dd in _read_by(store, d)])


def probe_outputs(results: Path, model: str, d: str) -> str | None:
    """A digest of the files ``crs probe`` writes for one pair under RESULTS (None: its run records are gone)."""
    from crs.probe.run import SELECTION_DIR, records_path  # polars, zarr: crs encoders loads this layer

    path = records_path(results, model, d)
    records = file_digest(path)
    if records is None:
        return None
    return settings_hash(records, file_digest(results / SELECTION_DIR / path.name))


def is_current(recorded, inputs: str, outputs: str | None) -> bool:
    """Whether a pair's state entry ``recorded`` was written for the ``inputs`` hash it has now (``pair_hash``)
    and the files its probe wrote are still those (``outputs``: ``probe_outputs``, None when they are gone)."""
    return (isinstance(recorded, dict) and recorded.get("inputs") == inputs and outputs is not None
            and recorded.get("outputs") == outputs)


def step(cfg: Config, progress: Progress, state: State, store, summaries, wanted):
    """``crs run``'s probe stage: ``run`` on each wanted pair that is not current (``is_current``), its
    state entry written as each pair is committed; (what it did, the summaries of the pairs probed)."""
    from crs.probe.run import head_name  # polars, zarr: crs encoders loads this layer

    results = Path(cfg.results)
    sp = Stage("probe", out=str(results / "run_records"))
    t0 = time.perf_counter()
    written = {(s.encoder, s.dataset) for s in summaries if s.chunks_written}
    options = probe_options(cfg.probe)
    hashes = {p: pair_hash(store.content_digest, store, options, *p) for p in wanted}  # as the probe reads it
    todo = []
    for e, d in wanted:
        fresh = any((e, dd) in written for dd in _read_by(store, d))
        recorded = state.old.get("probe", {}).get(f"{e}__{d}")
        outputs = probe_outputs(results, head_name(e, cfg.probe.head), d)
        # the content digests leave out timestamps, so an extract that wrote nothing leaves them as they were
        current = not fresh and is_current(recorded, hashes[(e, d)], outputs)
        if current:  # as the store holds it now, for the next run to compare with
            sp.skipped.append(f"{e} × {d}")
            state.new["probe"][f"{e}__{d}"] = {"inputs": hashes[(e, d)], "outputs": outputs}
        else:
            todo.append((e, d))
    state.set("probe", state.new["probe"])
    pending = iter(todo)

    def done_one(summary):  # pairs are probed in order: the summary is the next pending pair's
        e, d = next(pending)
        state.new["probe"][f"{e}__{d}"] = {"inputs": hashes[(e, d)],
                                           "outputs": probe_outputs(results, head_name(e, cfg.probe.head), d)}
        state.set("probe", state.new["probe"])

    probed = []
    if todo:
        probed = run(cfg.store, results, todo, settings=cfg.probe, progress=progress, on_done=done_one)
        sp.done = [f"{s.encoder} × {s.dataset}" for s in probed]
        sp.detail = {"probes": sum(s.probes for s in probed), "not_converged": sum(s.not_converged for s in probed)}
    sp.seconds = time.perf_counter() - t0
    return sp, probed
