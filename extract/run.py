"""``crs extract``: embed one dataset with one encoder, clean and perturbed, into the store.

The work unit is one store chunk of rows. Rows are ordered test first, so chunk j of
the clean array and chunk j of every perturbed (test-only) array cover the same
images: each unit decodes its images once, then embeds them clean and under every
pending perturbation. Units whose chunks are all written are skipped without
decoding, so a re-run after a crash or Ctrl-C finishes only what is missing.
"""

from __future__ import annotations

import importlib.metadata as md
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from crs.conditions import CLEAN, parse
from crs.extract import datasets, encoders, perturb
from crs.extract.models import load, pick_device
from crs.store import DatasetTable, Store, store_order
from crs.store.zarr_store import now


@dataclass
class ExtractSummary:
    encoder: str
    dataset: str
    images: int
    conditions: int
    chunks_written: int = 0
    chunks_skipped: int = 0
    forward_images: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    complete: bool = False
    arrays: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def library_versions() -> dict[str, str]:
    out = {}
    for lib in ("crs-bench", "torch", "torchvision", "timm", "transformers", "numpy", "zarr"):
        try:
            out[lib] = md.version(lib)
        except md.PackageNotFoundError:
            out[lib] = "not installed"
    return out


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
        "source": "builtin synthetic benchmark",
        "size": ds.size,
        "seed": ds.seed,
        "image_size": ds.image_size,
    }
    if hasattr(ds, "provenance"):  # file-based datasets: root, CSV files, split kind and seed, label policy
        attrs.update(ds.provenance())
    return DatasetTable(
        name=ds.name,
        ids=np.asarray(t.ids)[order],
        labels=np.asarray(t.labels)[order],
        split=np.asarray(t.split)[order],
        group=np.asarray(t.group)[order],
        attrs={**attrs, "source_row": order.tolist()},
    )


def extract(
    store: Store,
    encoder: str,
    dataset,
    *,
    size: float = 1.0,
    chunk: int = 256,
    batch: int = 64,
    device: str | None = None,
    dtype: str = "float16",
    perturbations: bool = True,
    progress=None,
) -> ExtractSummary:
    """Embed ``dataset`` with ``encoder`` into ``store``; resumes whatever is incomplete.

    ``progress`` is an optional ``rich.progress.Progress``; one task is added to it.
    """
    spec = encoders.get(encoder)
    ds = datasets.get(dataset, size=size) if isinstance(dataset, str) else dataset  # a name or a dataset object
    dataset = ds.name
    table = dataset_table(ds)
    store.write_dataset(table)
    table = store.dataset(dataset)  # the stored order is the truth
    source_row = np.asarray(table.attrs["source_row"])
    n, n_test = len(table.ids), table.n_test
    has_train = bool((table.split == 0).any())
    conds = [CLEAN] + (perturb.conditions() if perturbations and has_train and n_test else [])

    provenance = {
        "encoder_spec": spec.as_dict(),
        "weight_source": spec.weight_source,
        "revision": spec.revision,
        "preprocessing": {
            "input_size": spec.input_size,
            "mean": list(spec.mean),
            "std": list(spec.std),
            "interpolation": spec.interpolation,
            "pooling": spec.pooling,
            "order": "decode -> [0,1] float -> perturb -> resize -> normalise",
        },
        "libraries": library_versions(),
        "created": now(),
    }
    arrays = {}
    for cond in conds:
        attrs = dict(provenance)
        if cond == CLEAN:
            attrs["perturbation"] = None
        else:
            c = parse(cond)
            attrs["perturbation"] = perturb.parameters(c.family, c.severity)
        rows = "all" if cond == CLEAN else "test"
        arrays[cond] = store.embedding(
            dataset, encoder, cond, rows=rows, n_rows=n if cond == CLEAN else n_test,
            width=spec.width, chunk=chunk, dtype=dtype, attrs=attrs,
        )

    summary = ExtractSummary(encoder=encoder, dataset=dataset, images=n, conditions=len(conds))
    pending = {cond: set(arr.pending().tolist()) for cond, arr in arrays.items()}
    n_units = arrays[CLEAN].n_chunks
    todo = sum(len(p) for p in pending.values())
    summary.chunks_skipped = sum(a.n_chunks for a in arrays.values()) - todo
    task = None
    if progress is not None:
        task = progress.add_task(f"{encoder} × {dataset}", total=todo)

    t0 = time.perf_counter()
    model = None
    for j in range(n_units):
        work = [cond for cond in conds if j in pending[cond]]
        if not work:
            continue
        if model is None:
            model = load(spec, pick_device(device))
            summary.device = str(model.device)
        rows = arrays[CLEAN].chunk_rows(j)
        idx = np.arange(rows.start, rows.stop)
        images = torch.from_numpy(ds.images(source_row[idx])).permute(0, 3, 1, 2)
        x = images.to(model.device, dtype=torch.float32).div_(255)  # decoded once for every condition
        ids = table.ids[idx].tolist()
        for cond in work:
            if cond == CLEAN:
                xin, rid = x, ids
            else:
                m = int(min(rows.stop, n_test) - rows.start)  # the test rows of this unit come first
                c = parse(cond)
                xin, rid = perturb.apply(x[:m], c.family, c.severity, ids[:m]), ids[:m]
            emb = torch.cat([model(xin[i : i + batch]) for i in range(0, len(xin), batch)])
            arrays[cond].write_chunk(j, emb.cpu().numpy())
            summary.chunks_written += 1
            summary.forward_images += len(xin)
            if task is not None:
                progress.advance(task)
    summary.seconds = time.perf_counter() - t0
    summary.complete = all(arr.finalize() for arr in arrays.values())
    summary.arrays = list(arrays)
    return summary
