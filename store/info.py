"""What a store holds, dataset by dataset (``crs store info``): images, encoders, embedding arrays and the
perturbation generator that drew each dataset's perturbed ones."""

from __future__ import annotations

from crs.store.zarr_store import Store


def describe(store: Store) -> list[dict]:
    """One row a dataset: name, images, encoders, arrays (complete of all), perturbation generators
    ({generator: perturbed arrays}; arrays that record none under ``generators.NONE``)."""
    rows = []
    for d in store.datasets():
        arrays = list(store.embeddings(d))
        attrs = store.dataset_attrs(d) or {}
        rows.append({"dataset": d, "images": attrs.get("n_images"),
                     "encoders": sorted({enc for _, enc, _, _ in arrays}),
                     "arrays": len(arrays), "complete": sum(1 for *_, done in arrays if done),
                     "perturbation_generators": {g: len(a) for g, a in store.perturbation_generators(d).items()}})
    return rows
