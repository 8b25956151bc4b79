"""The four stages as library functions: extract, probe, score, report.

Each takes the typed settings of ``crs.config`` (trusted: they passed the schema's
checks), a ``crs.progress.Progress`` and returns what it made. The name checks against
the registries live here too, so that the command line and ``crs run`` give the same
answer. Heavy libraries are imported inside the stage that needs them.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from threadpoolctl import threadpool_limits

from crs.config import Config, Probe, Score, options_record, report_folder
from crs.errors import BadInput, UserError
from crs.extract import encoders as encreg
from crs.extract import perturb
from crs.extract import plan as planmod
from crs.extract.options import DatasetOptions, ExtractOptions
from crs.names import SPLIT_CODE
from crs.progress import NO_PROGRESS, Progress
from crs.stages import fresh

HUB_PREFIXES = ("timm:", "hf:")


# ------------------------------------------------------------------ names
def check_names(given: list[str], valid: list[str], what: str) -> list[str]:
    """``given`` once each, in order; BadInput listing the valid names for an unknown one."""
    if not given:
        raise BadInput(f"no {what} given; pass --{what} NAME (valid: {', '.join(valid)})"
                       + (", or a set: --demo, --pretrained, --family FAMILY" if what == "encoder" else ""))
    for name in given:
        if name not in valid:
            raise BadInput(f"unknown {what} {name!r}; valid {what}s: {', '.join(valid)}")
    return list(dict.fromkeys(given))


def check_dataset_names(given: list[str]) -> list[str]:
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    if not given:
        raise BadInput(f"no dataset given; pass --dataset NAME (valid: {', '.join(dsreg.all_names())})")
    for name in given:
        if not dsreg.is_known(name):
            raise BadInput(f"unknown dataset {name!r}; valid datasets: {', '.join(dsreg.all_names())}")
    return list(dict.fromkeys(given))


def check_shift_target(spec: str | None, datasets: list[str]) -> None:
    """BadInput where --shift-target names no dataset, or where no dataset given is a ``csv:`` one (the only
    kind it applies to: the others name their own target in the registry, and it would go unused)."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    if not spec:
        return
    try:
        dsreg.check_shift_target(spec)
    except UserError as exc:
        raise BadInput(str(exc)) from None
    if not any(d.startswith(dsreg.CSV_PREFIX) for d in datasets):
        raise BadInput(f"--shift-target {spec} applies to csv:PATH datasets only, and none is given "
                       f"({', '.join(datasets) or 'none'}); the others name their own (`crs datasets`): "
                       "drop --shift-target, or add the csv: dataset it belongs to")


def encoder_records(file: str | None) -> dict:
    """The extra encoder records of an --encoder-file (name -> record); BadInput for a bad file."""
    if file is None:
        return {}
    try:
        return {s.name: s for s in encreg.from_toml(str(file))}
    except (ValueError, TypeError, OSError) as exc:
        raise BadInput(str(exc)) from exc


def check_encoders(names: list[str], extra: dict) -> list[str]:
    """Registry names, names of ``extra`` records and well-formed timm:/hf: ids, once each."""
    for e in names:
        if e.startswith(HUB_PREFIXES):
            try:
                encreg.from_id(e)
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
    named = [e for e in names if not e.startswith(HUB_PREFIXES)]
    if named or not names:
        check_names(named, encreg.names() + list(extra), "encoder")
    return list(dict.fromkeys(names))


def parse_roots(values: list[str] | None, datasets: list[str]) -> dict[str, str]:
    """--root NAME=DIR binds a folder to a real dataset; a bare --root DIR goes to the one real dataset given."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    roots, bare = {}, []
    for v in values or []:
        name, sep, path = v.partition("=")
        if sep and name in dsreg.REAL:
            roots[name] = path
        else:
            bare.append(v)
    unbound = [d for d in datasets if d in dsreg.REAL and d not in roots]
    if bare:
        if len(bare) > 1 or len(unbound) != 1:
            raise BadInput(f"--root {bare[0]!r} names no dataset and the datasets needing a folder are "
                           f"{unbound or 'none'}; pass --root NAME=DIR for each of {', '.join(dsreg.REAL)}")
        roots[unbound[0]] = bare[0]
    return roots


def set_members(name: str) -> list[str]:
    """The registry encoders of one set: demo (no download), pretrained (every pretrained record), or a family."""
    if name == "demo":
        return encreg.demo_names()
    pretrained = [s for s in encreg.ENCODERS.values() if s.pretrained and s.source != "builtin"]
    if name == "pretrained":
        return [s.name for s in pretrained]
    members = [s.name for s in pretrained if s.family == name]
    if not members:
        raise BadInput(f"no pretrained encoder of the registry is in the set {name!r}; sets: "
                       "demo, pretrained, general, medical, specialty")
    return members


def with_sets(cfg: Config) -> Config:
    """``cfg`` with ``encoders.names`` = the names given, then every member of ``encoders.set``, once each."""
    enc = cfg.encoders
    if not enc.set:
        return cfg
    names = list(enc.names) + [e for s in enc.set for e in set_members(s)]
    return dataclasses.replace(cfg, encoders=dataclasses.replace(enc, names=tuple(dict.fromkeys(names))))


def with_revision(spec, revision: str | None):
    """``spec`` pinned to ``revision`` (the registry's ``with_revision``, which checks the form)."""
    if revision is None:
        return spec
    if spec.source not in ("timm", "hf") or not spec.pretrained:
        raise BadInput(f"--revision {spec.name}={revision}: {spec.name} loads no hub weights (source "
                       f"{spec.source}{'' if spec.pretrained else ', random weights'}), so it has no revision to pin")
    try:
        return encreg.with_revision(spec, revision)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc


def encoder_specs(cfg: Config, extra: dict) -> list:
    """The records ``cfg`` extracts, each pinned to its ``encoders.revisions`` entry; BadInput for a revision
    of an encoder the run does not extract."""
    names = with_sets(cfg).encoders.names
    specs = [encreg.resolve(e, extra) for e in names]
    revisions = dict(cfg.encoders.revisions)
    unknown = [n for n in revisions if n not in names and n not in {s.name for s in specs}]
    if unknown:
        raise BadInput(f"--revision {unknown[0]}=...: {unknown[0]!r} is not an encoder of this run "
                       f"({', '.join(names)}); pin the revision of an encoder you extract")
    return [with_revision(s, revisions.get(n, revisions.get(s.name))) for n, s in zip(names, specs)]


def scored_names(cfg: Config, extra: dict) -> list[str]:
    """The names ``cfg``'s encoders are scored under: the store key of a timm:/hf: id (``extra``: the records of
    the encoder file), ENCODER+mlp with the mlp head."""
    from crs.probe import heads  # noqa: PLC0415 -- numpy: crs encoders lists the registry without it

    head = heads.get(cfg.probe.head)
    return [head.result_name(encreg.resolve(e, extra).name) for e in cfg.encoders.names]


# ------------------------------------------------------------------ extract
class Extracted(NamedTuple):
    store: object  # crs.store.Store, opened for appending
    summaries: list  # crs.extract.run.ExtractSummary, one per (encoder, dataset)


def dataset_options(cfg: Config) -> dict:
    """The datasets section of ``cfg`` as keywords of ``crs.extract.datasets.get`` (``DatasetOptions``' fields)."""
    return dataclasses.asdict(DatasetOptions.from_config(cfg))


def named_datasets(cfg: Config) -> list:
    """The config's datasets, opened as extraction opens them (a CSV read, a folder indexed; no image decoded)."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    opts, ds = dataset_options(cfg), cfg.datasets
    return [dsreg.get(d, size=ds.size, seed=0 if d in dsreg.BUILTIN else ds.split_seed, **opts) for d in ds.names]


def _datasets_with_shift_targets(cfg: Config, named: list | None = None) -> list:
    """The config's datasets (``named``: as ``named_datasets`` opened them), then the shift targets not among
    them, in the target role (clean test rows only): probing evaluates the shift on them."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    opts = dataset_options(cfg)
    named = named_datasets(cfg) if named is None else named
    todo = {x.name: x for x in named}  # a dataset named in the config is a dataset, even where it is also a target
    for dataset in named:
        target = dsreg.shift_target_of(dataset, **{**opts, "shift_target": None})
        if target is not None and target.name not in todo:
            todo[target.name] = target
    return list(todo.values())


def _stored_role(store, name: str) -> str | None:
    """None where the store does not hold the dataset (or cannot say); else its role ('dataset' unless a
    shift target). Reads its attributes only: its arrays may be the damage this extraction repairs."""
    attrs = store.dataset_attrs(name)
    return None if attrs is None else attrs.get("role", "dataset")


def extract(cfg: Config, progress: Progress = NO_PROGRESS, *, extra_encoders: dict | None = None) -> Extracted:
    """Embed every dataset of ``cfg`` (and its shift target) with every encoder into ``cfg.store``."""
    from crs.extract import real, targets  # noqa: PLC0415 -- numpy, polars: crs encoders lists the registry without them
    from crs.extract.models import preflight  # noqa: PLC0415 -- torch: crs encoders lists the registry without it
    from crs.extract.run import extract_many  # noqa: PLC0415 -- torch: crs encoders lists the registry without it
    from crs.store import Store  # noqa: PLC0415 -- zarr: crs encoders lists the registry without it

    cfg = with_sets(cfg)
    enc = cfg.encoders
    if enc.weights is not None and len(enc.names) != 1:
        raise BadInput(f"--weights names one checkpoint; pass exactly one --encoder (got {len(enc.names)})")
    extra = encoder_records(enc.file) if extra_encoders is None else extra_encoders
    datasets = _datasets_with_shift_targets(cfg)
    for d in datasets:  # what `crs datasets check` refuses for its classes, refused before the store is touched
        real.require_measurable(d)
    specs = encoder_specs(cfg, extra)
    if cfg.extract.executor != "ray":  # weights that cannot be had stop the run before a store is made
        for spec in specs:  # (Ray's workers fetch their own)
            preflight(spec, enc.weights)
    new = fresh.is_new(cfg.store)
    store = Store(cfg.store, mode="a")
    try:
        datasets = [targets.as_stored(d, _stored_role(store, d.name)) for d in datasets]
        options = ExtractOptions.from_config(cfg)
        # per dataset, every encoder at once: each image decoded, and perturbed per condition, once for all of them
        by_dataset = [extract_many(store, specs, d, options, progress=progress) for d in datasets]
    except Exception:
        if new:  # a model that failed to load leaves no store behind that holds nothing
            fresh.remove_if_unused(cfg.store)
        raise
    summaries = [s for i in range(max(map(len, by_dataset), default=0)) for run in by_dataset for s in run[i:i + 1]]
    return Extracted(store, summaries)


# ------------------------------------------------------------------ plan
def plan(cfg: Config, extra: dict | None = None) -> dict:
    """What ``extract(cfg)`` would do, without loading a model or decoding an image: per (encoder, dataset)
    the images, conditions, forward passes, store size and GPU time (``crs.extract.plan``), and what is
    missing (weights not in the cache, a gated model without a token, a dataset whose files cannot be read).

    ``complete`` is False where anything is missing."""
    import numpy as np  # noqa: PLC0415 -- numpy: crs encoders lists the registry without it

    cfg = with_sets(cfg)
    extra = encoder_records(cfg.encoders.file) if extra is None else extra
    specs = encoder_specs(cfg, extra)
    itemsize = 2 if cfg.extract.dtype == "float16" else 4
    encoders = [_weights_entry(s, cfg.encoders.weights) for s in specs]
    datasets = _plan_datasets(cfg)
    pairs = []
    for spec in specs:
        macs = planmod.macs_for(spec)
        rate, basis = planmod.forward_rate(spec.name, macs)
        for d in datasets:
            images = test = None
            perturbed = 0
            if d["table"] is not None:
                split = np.asarray(d["table"].split)
                images, test = int(split.size), int((split == SPLIT_CODE["test"]).sum())
                if cfg.extract.perturb and test and (split == SPLIT_CODE["train"]).any() and d["modality"]:
                    perturbed = len(perturb.conditions(d["modality"], tuple(cfg.extract.severities)))
            pairs.append(planmod.pair(spec.name, d["name"], width=spec.width, macs=macs,
                                      rows=planmod.Rows(images, test, perturbed), itemsize=itemsize,
                                      speed=planmod.Speed(rate, basis)))
    def named(who, problem):
        return problem if problem.startswith(f"{who}:") else f"{who}: {problem}"

    missing = [named(e["encoder"], e["problem"]) for e in encoders if e["problem"]]
    missing += [named(d["name"], d["problem"]) for d in datasets if d["problem"]]
    unknown_cost = sorted({p.encoder for p in pairs if p.gpu_seconds is None and p.forward_passes is not None})
    return {"store": cfg.store, "dtype": cfg.extract.dtype, "device": planmod.DEVICE,
            "utilisation": planmod.UTILISATION, "peak_tflops": planmod.PEAK_TFLOPS,
            "gpu_time_source": planmod.RATE_SOURCE,
            "store_size_note": planmod.COMPRESSED_NOTE,
            "encoders": encoders, "datasets": [{k: v for k, v in d.items() if k != "table"} for d in datasets],
            "pairs": [p.as_dict() for p in pairs], "totals": planmod.totals(pairs),
            "no_gpu_time_for": unknown_cost, "missing": missing, "complete": not missing}


def _weights_entry(spec, weights: str | None) -> dict:
    """The encoder's weights as the plan sees them: where they come from, in the cache or not, gated, a problem."""
    entry = {"encoder": spec.name, "source": spec.weight_source, "revision": spec.revision, "gated": spec.gated,
             "in_cache": None, "problem": None}
    if spec.source == "builtin" or not spec.pretrained:
        entry["in_cache"] = True  # nothing to download
        return entry
    if weights is not None:
        entry["source"] = f"local {weights}"
        entry["in_cache"] = os.path.exists(weights)
        entry["problem"] = None if entry["in_cache"] else f"--weights {weights} does not exist"
        return entry
    try:
        from crs.extract.models import weights_status  # noqa: PLC0415 -- torch: crs encoders lists the registry without it

        status = weights_status(spec, weights)
    except (ImportError, AttributeError):  # a registry without weights_status: the token check alone
        status = {"in_cache": None, "gated": spec.gated, "problem": None,
                  "token": bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))}
        if spec.gated and not status["token"]:
            status["problem"] = (f"gated model: accept the terms on {spec.page or 'its model page'}, then set "
                                 "HF_TOKEN")
    entry.update(in_cache=status.get("in_cache"), gated=status.get("gated", spec.gated), problem=status.get("problem"))
    if entry["problem"] is None and entry["in_cache"] is False:
        entry["problem"] = "weights not in the local cache (downloaded on the first run; HF_HOME sets where)"
    return entry


def _plan_datasets(cfg: Config) -> list[dict]:
    """Each dataset of ``cfg`` and its shift target, indexed from its files (no image decoded); a dataset
    that cannot be read carries the reason (as `crs datasets check` would give it) instead of its table."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them
    from crs.extract import real  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    opts, ds = dataset_options(cfg), cfg.datasets
    out: dict[str, dict] = {}

    def add(name: str, open_):
        try:
            dataset = open_()
            if dataset is None:
                return None
            key = dataset.name
            real.require_measurable(dataset)
            if key not in out:
                out[key] = {"name": key, "modality": dataset.modality, "table": dataset.table(), "problem": None}
            return dataset
        except (UserError, OSError, KeyError) as exc:
            if name not in out:
                msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                out[name] = {"name": name, "modality": None, "table": None,
                             "problem": msg if "`crs datasets check " in msg else
                             f"{msg} (`crs datasets check {name}` says more)"}
            return None

    for d in ds.names:
        seed = 0 if d in dsreg.BUILTIN else ds.split_seed
        dataset = add(d, lambda d=d, seed=seed: dsreg.get(d, size=ds.size, seed=seed, **opts))
        if dataset is not None:
            target = dataset.shift_spec if getattr(dataset, "shift_spec", None) else dataset.shift_target
            if target:
                add(target, lambda dataset=dataset: dsreg.shift_target_of(dataset, **{**opts, "shift_target": None}))
    return list(out.values())


# ------------------------------------------------------------------ probe
def probe_pairs(store_path: str, encoders: list[str], datasets: list[str], *, every: bool) -> list[tuple[str, str]]:
    """The (encoder, dataset) pairs to probe: the ones named; with ``every``, or with only datasets or
    only encoders named, every pair in the store (filtered by the names given); BadInput naming what
    the store holds when a pair lacks embeddings."""
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them
    from crs.probe.run import pairs_in_store  # noqa: PLC0415 -- zarr, polars: crs encoders lists the registry without them
    from crs.store import Store  # noqa: PLC0415 -- zarr: crs encoders lists the registry without it

    datasets = [dsreg.store_name(d) for d in datasets]  # csv:PATH -> its store name
    st = Store(store_path, mode="r")
    available = pairs_in_store(st)
    if encoders:
        check_names(encoders, sorted(set(encreg.names()) | {e for e, _ in available}), "encoder")
    if datasets:
        check_names(datasets, sorted(set(dsreg.names()) | set(dsreg.REAL) | set(st.datasets())), "dataset")
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


def require_measurable_stored(store, dataset: str) -> None:
    """``crs.extract.real.refuse_unmeasurable`` of a dataset as the store holds it, where it was read from
    files (its attributes record their identity): the check `crs datasets check` and extraction apply, so a
    store written without it (by another crs, or the library directly) is refused the same way. BadInput."""
    from crs.extract import real  # noqa: PLC0415 -- polars, PIL: crs encoders lists the registry without them

    table = store.dataset(dataset)
    attrs = table.attrs
    if not attrs.get("identity"):
        return
    words = ([f"csv:{attrs['csv']}", "--image-root", str(attrs.get("root")), "--modality", str(attrs.get("modality"))]
             if attrs.get("csv") else [dataset, "--root", f"{dataset}={attrs.get('root')}"])
    try:
        real.refuse_unmeasurable(table, table.task, table.classes, dataset, shlex.join(words))
    except UserError as exc:
        raise BadInput(str(exc)) from None


def probe_options(settings: Probe):
    """The probe's options record (``crs.probe.options.ProbeOptions``) of the ``[probe]`` settings: each
    setting in its field, the seed count as the seeds 0..seeds-1."""
    from crs.probe.options import ProbeOptions  # noqa: PLC0415 -- crs.probe: crs encoders lists the registry without it

    return options_record(ProbeOptions, settings, seeds=tuple(range(settings.seeds)))


def probe(store_path: str, results: Path, pairs: list[tuple[str, str]], settings: Probe,
          progress: Progress = NO_PROGRESS, on_done: Callable | None = None) -> list:
    """Fit and evaluate ``settings``' probes on each pair; ``on_done(summary)`` after each pair is written.

    Where every pair is small (``crs.probe.run.small_pair``), ``PAIR_WORKERS`` pairs are probed at
    a time, each pair still fitted, evaluated and committed whole on its own: one pair's compiling,
    reading and writing overlap another's solver loop. The results are the same bits as one at a
    time (each pair's programs run as they would alone); ``on_done`` is called in ``pairs`` order."""
    from crs.probe.run import compile_cache, head_name, planned_loops, small_pair  # noqa: PLC0415 -- zarr, polars: crs encoders lists the registry without them
    from crs.probe.run import probe as probe_pair  # noqa: PLC0415 -- zarr, polars: crs encoders lists the registry without them
    from crs.store import Store  # noqa: PLC0415 -- zarr: crs encoders lists the registry without it

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


PAIR_WORKERS = 2  # small pairs probed at a time (``probe``; crs demo's probe stage: benchmarks/probe_bench.py)


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


# ------------------------------------------------------------------ score
def score_options(settings: Score, reference: str | None = None):
    """The score's options record (``crs.scoring.options.ScoreOptions``) of the ``[score]`` settings;
    ``reference``: what the stage resolved ``settings.reference`` to (default: as given)."""
    from crs.scoring.options import ScoreOptions  # noqa: PLC0415 -- numpy: crs encoders lists the registry without it

    return options_record(ScoreOptions, settings, **({} if reference is None else {"reference": reference}))


def score(results: Path, settings: Score, store: str | None = None, pairs: list[tuple[str, str]] | None = None,
          progress: Progress = NO_PROGRESS):
    """Score the run records under ``results`` (only ``pairs`` if given) and write RESULTS/scores."""
    from crs import records  # noqa: PLC0415 -- polars: crs encoders lists the registry without it
    from crs.scoring.run import METRIC_TABLE  # noqa: PLC0415 -- polars: crs encoders lists the registry without it
    from crs.scoring.run import score as score_table  # noqa: PLC0415 -- polars: crs encoders lists the registry without it

    table = records.read(results)
    if pairs is not None:  # crs run scores the (encoder, dataset) pairs its config names, not older leftovers
        import polars as pl  # noqa: PLC0415 -- polars: crs encoders lists the registry without it

        keep = pl.DataFrame({"encoder": [e for e, _ in pairs], "dataset": [d for _, d in pairs]})
        table = table.join(keep, on=["encoder", "dataset"], how="semi")
    encoders = sorted(table["encoder"].unique().to_list())
    ref, auto_note = resolve_reference(settings.reference, encoders)
    opened, note = _open_for_scoring(store)
    if opened is None and (found := records.recorded_store(results)) is not None and found != store:
        # the store the probes read, as the run records name it (CRS v2 reads its C from the stored predictions)
        reopened, _ = _open_for_scoring(found)
        if reopened is not None:
            opened, note = reopened, f"scored with the store the run records name, {found} (--store {store} holds none)"
    if opened is not None:
        for d in sorted(set(table["dataset"].unique().to_list()) & set(opened.datasets())):
            require_measurable_stored(opened, d)
    # the bootstrap is vectorised, so there is nothing to count: the bar shows the elapsed time
    task = progress.add_task(f"score ({table['encoder'].n_unique()} encoders, {settings.bootstrap:,} bootstrap "
                             "replicates)", total=None)
    # the scoring code raises BadInput for records or options that do not allow a score; any
    # other ValueError is a bug in it and must surface as one (exit 1), not as the user's fault
    scores = score_table(table, score_options(settings, reference=ref), store=opened,
                         results=Path(results))
    progress.update(task, visible=False)  # scoring is over: its line ends here, not after the report
    if note:
        scores.settings["warnings"].insert(0, note)
    if auto_note:  # 'auto' found no registry reference among the scored encoders: said, and recorded
        scores.settings["warnings"].insert(0, auto_note)
    scores.settings["reference_requested"] = settings.reference
    scores.write(Path(results) / "scores", metric_table=Path(results) / METRIC_TABLE)
    return scores


def resolve_reference(requested: str, encoders: list[str]) -> tuple[str, str | None]:
    """(the reference scoring uses, a warning or None). 'auto' is the registry's reference when it is among
    ``encoders`` (a probe head's ENCODER+HEAD counts as ENCODER); otherwise 'median', with a warning
    saying so. Any other value is used as given."""
    if requested != "auto":
        return requested, None
    base = {e.split("+", 1)[0]: e for e in reversed(encoders)}  # the first model of an encoder wins
    name, why = encreg.reference_for(list(base))
    return (base[name], None) if name is not None else ("median", why)


def _open_for_scoring(store: str | None):
    """(the store or None, a note): the run records still allow a score without the store."""
    from crs.store import Store  # noqa: PLC0415 -- zarr: crs encoders lists the registry without it
    from crs.store.errors import NoStore  # noqa: PLC0415 -- zarr: crs encoders lists the registry without it

    if store is None:
        return None, None
    try:
        return Store(str(store), mode="r"), None
    except NoStore as exc:  # a store that is there but damaged is refused (exit 2), never scored around
        return None, f"{exc}; scoring from the run records alone"


# ------------------------------------------------------------------ report
REPORT_MODULE = "crs.scoring.report"


def report(results: Path, out: Path | None = None, *, store: str | None = None, quiet: bool = True) -> dict:
    """Write RESULTS' scores as one HTML page with its figures and tables (``out``: default RESULTS/report)."""
    try:
        from crs.scoring.report import write_report  # noqa: PLC0415 -- polars: crs encoders lists the registry without it
    except ModuleNotFoundError as exc:
        if exc.name != REPORT_MODULE:
            raise
        raise RuntimeError(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation "
                           "lacks; set `enabled = false` under [report]") from exc
    target = Path(report_folder(str(results), None if out is None else str(out)))
    return write_report(Path(results), target, store=store, quiet=quiet)
