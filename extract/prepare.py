"""Before the forward passes: the dataset's metadata written, every array created (or checked) with
its provenance, the pending units listed (``prepare``); after them, the encoder's weights and cost
recorded (``record_cost``)."""

from __future__ import annotations

import numpy as np

from crs.extract import perturb
from crs.extract.cost import model_cost
from crs.extract.encoders import EncoderSpec
from crs.extract.models import load, pick_device
from crs.extract.options import ExtractOptions
from crs.extract.units import ExtractSummary, Plan, Unit
from crs.foundations import provenance
from crs.foundations.conditions import CLEAN, parse
from crs.foundations.names import SPLIT_CODE
from crs.foundations.provenance import now
from crs.store import DatasetTable, EmbeddingShape, StoreError, dataset_lock, store_order
from crs.store.zarr_store import set_attrs


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


def prepare(store, spec, dataset, ds, options: ExtractOptions):
    """Write the dataset's metadata, create (or check) every array and list the pending units, as
    ``options`` says (chunk, dtype, perturbations and severities, and how to load a model).

    Returns (plan, model): the model is loaded here only when the spec does not say its width."""
    table = dataset_table(ds)
    with dataset_lock(store, dataset):
        store.write_dataset(table)
    table = store.dataset(dataset)  # the stored order is the truth
    modality = ds.modality
    conds = [CLEAN] + _perturbed_conditions(dataset, table, modality, options)

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
            dataset, spec.name, cond,
            EmbeddingShape(rows="all" if cond == CLEAN else "test", n_rows=n if cond == CLEAN else n_test,
                           width=spec.width, chunk=options.chunk, dtype=options.dtype),
            attrs={**provenance, "perturbation": _perturbation(cond), **perturb.generator_attrs(cond)},
        )
        for cond in conds
    }
    summary = ExtractSummary(encoder=spec.name, dataset=dataset, images=n, conditions=len(conds),
                             batch=options.batch)
    units, summary.chunks_skipped = _pending_units(table, conds, arrays)
    return Plan(spec=spec, dataset=dataset, conds=conds, arrays=arrays, units=units, batch=options.batch,
                summary=summary), model


def _perturbed_conditions(dataset: str, table: DatasetTable, modality, options) -> list[str]:
    """The modality suite's conditions (``options``' severities and families), where the dataset has train and
    test images to probe and test."""
    has_train = bool((table.split == SPLIT_CODE["train"]).any())
    if not (options.perturbations and has_train and table.n_test):
        return []
    if modality is None:
        raise StoreError(f"dataset {dataset!r} has no modality, so no perturbation suite; pass --no-perturb")
    return perturb.conditions(modality, tuple(options.severities), tuple(options.families))


# the dataset attributes a command line names it by (crs.store.repair's commands)
IDENTITY = ("csv", "root", "size", "modality", "shift_target", "shift_spec", "split_seed", "uncertain",
            "identity")


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
