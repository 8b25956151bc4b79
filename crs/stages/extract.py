"""The extract stage: images to embeddings in the store (``run``), what that would cost (``plan``), and
``crs run``'s step. Its currency is the store's own: the chunks committed are kept, so a run writes only
what is missing. Heavy libraries are imported inside the functions that need them."""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from crs.extract import perturb
from crs.extract import plan as planmod
from crs.extract.options import ExtractOptions
from crs.foundations.config import Config
from crs.foundations.errors import BadInput, UserError
from crs.foundations.names import SPLIT_CODE
from crs.foundations.progress import NO_PROGRESS, Progress
from crs.stages import fresh
from crs.stages.datasets import dataset_options, with_shift_targets
from crs.stages.names import encoder_records, encoder_specs, with_sets
from crs.stages.state import Stage


class Extracted(NamedTuple):
    store: object  # crs.store.Store, opened for appending
    summaries: list  # crs.extract.run.ExtractSummary, one per (encoder, dataset)


def _stored_role(store, name: str) -> str | None:
    """None where the store does not hold the dataset (or cannot say); else its role ('dataset' unless a
    shift target). Reads its attributes only: its arrays may be the damage this extraction repairs."""
    attrs = store.dataset_attrs(name)
    return None if attrs is None else attrs.get("role", "dataset")


def run(cfg: Config, progress: Progress = NO_PROGRESS, *, extra_encoders: dict | None = None) -> Extracted:
    """Embed every dataset of ``cfg`` (and its shift target) with every encoder into ``cfg.store``."""
    from crs.extract.synthetic import prerender  # numpy: crs encoders lists the registry without it

    datasets, new = with_shift_targets(cfg), fresh.is_new(cfg.store)
    _render_ahead(cfg, datasets, new, prerender)
    try:
        return _run(cfg, datasets, new, progress, extra_encoders)
    finally:
        prerender.finish()


def _render_ahead(cfg: Config, datasets: list, new: bool, prerender) -> None:
    """The built-in synthetic datasets' images rendered by a helper process while this one imports torch and
    builds the models (``crs.extract.synthetic.prerender``): for a new local store (a re-run may need few of
    them or none) filled in this process with no data-loader workers, whose datasets are all built in."""
    from crs.extract.synthetic.registry import SPECS

    ex = cfg.extract
    if ex.executor == "local" and ex.workers == 0 and all(name in SPECS for name in cfg.datasets.names) \
            and new:
        prerender.start(datasets)


def _run(cfg: Config, datasets: list, new: bool, progress: Progress, extra_encoders: dict | None) -> Extracted:
    """``run``'s work for ``datasets`` (``cfg``'s, with their shift targets); ``new``: the store did not exist."""
    from crs.extract import real, targets  # numpy, polars: crs encoders lists the registry without them
    from crs.extract.models import preflight  # torch: crs encoders lists the registry without it
    from crs.extract.run import extract_many  # torch: crs encoders lists the registry without it
    from crs.store import Store  # zarr: crs encoders lists the registry without it

    cfg = with_sets(cfg)
    enc = cfg.encoders
    if enc.weights is not None and len(enc.names) != 1:
        raise BadInput(f"--weights names one checkpoint; pass exactly one --encoder (got {len(enc.names)})")
    extra = encoder_records(enc.file) if extra_encoders is None else extra_encoders
    for d in datasets:  # what `crs datasets check` refuses for its classes, refused before the store is touched
        real.require_measurable(d)
    specs = encoder_specs(cfg, extra)
    if cfg.extract.executor != "ray":  # weights that cannot be had stop the run before a store is made
        for spec in specs:  # (Ray's workers fetch their own)
            preflight(spec, enc.weights)
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


def step(cfg: Config, progress: Progress, extra: dict, store_hint: str):
    """``crs run``'s extract stage: ``run``, which resumes, writing only the chunks the store lacks (a
    complete pair costs no model load); (what it did, ``Extracted``)."""
    from crs.store import StoreError  # zarr: crs encoders loads this layer

    st = Stage("extract", out=cfg.store)
    t0 = time.perf_counter()
    try:
        extracted = run(cfg, progress, extra_encoders=extra)
    except StoreError as exc:
        if store_hint:
            raise BadInput(f"{exc}\n({store_hint})") from exc
        raise
    summaries = extracted.summaries
    for s in summaries:
        (st.done if s.chunks_written else st.skipped).append(f"{s.encoder} × {s.dataset}")
    st.detail = {"chunks_written": sum(s.chunks_written for s in summaries),
                 "chunks_skipped": sum(s.chunks_skipped for s in summaries),
                 "failures": {s.dataset: s.failures for s in summaries if s.failures}}
    st.seconds = time.perf_counter() - t0
    return st, extracted


def plan(cfg: Config, extra: dict | None = None) -> dict:
    """What ``run(cfg)`` would do, without loading a model or decoding an image: per (encoder, dataset)
    the images, conditions, forward passes, store size and GPU time (``crs.extract.plan``), and what is
    missing (weights not in the cache, a gated model without a token, a dataset whose files cannot be read).

    ``complete`` is False where anything is missing."""
    import numpy as np  # numpy: crs encoders lists the registry without it

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
                    perturbed = len(perturb.conditions(d["modality"], tuple(cfg.extract.severities),
                                                         tuple(cfg.extract.families)))
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
        from crs.extract.models import weights_status  # torch: crs encoders lists the registry without it

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
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them
    from crs.extract import real  # polars, PIL: crs encoders lists the registry without them

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
