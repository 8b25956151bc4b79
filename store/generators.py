"""Which perturbation generator drew a dataset's perturbed embeddings, and keeping it one per dataset.

The same image under another generator (``crs.names.PERTURBATION_GENERATORS``) is another image, so the
perturbed embeddings of one dataset in a store must all come from one: else two encoders' robustness
would be measured on different images. Each perturbed embedding array records its generator in the
attribute ``perturbation_generator`` when created (``crs extract`` passes it); an array without it was
written before the record, by the first generator. Reading never looks at it: every store stays
readable, whichever generator wrote it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crs.conditions import parse
from crs.names import PERTURBATION_GENERATORS

if TYPE_CHECKING:
    from crs.store.zarr_store import Store

ATTR = "perturbation_generator"
BEFORE_THE_RECORD = PERTURBATION_GENERATORS[0]  # the generator of arrays that record none


def is_perturbed(condition: str) -> bool:
    try:
        return parse(condition).kind == "perturbed"
    except ValueError:
        return False


def recorded(attrs: dict) -> str:
    """The generator an embedding array's attributes say drew it (a perturbed array's)."""
    return attrs.get(ATTR) or BEFORE_THE_RECORD


def generators(store: Store, dataset: str) -> dict[str, list[str]]:
    """{generator: ["ENCODER/CONDITION", ...]} over the dataset's perturbed embedding arrays, in key order."""
    from crs.store.zarr_store import key_condition

    found: dict[str, list[str]] = {}
    if dataset not in store.datasets():
        return found
    with store.reading(f"datasets/{dataset}/embeddings"):
        g = store.root["datasets"][dataset]
        groups = g["embeddings"] if "embeddings" in g else None
        for enc in sorted(groups.group_keys()) if groups is not None else []:
            for key, node in sorted(groups[enc].groups()):  # one listing: every array's attributes
                if is_perturbed(key_condition(key)):
                    found.setdefault(recorded(dict(node.attrs)), []).append(f"{enc}/{key_condition(key)}")
    return found


def refuse_other(store: Store, dataset: str, generator: str) -> None:
    """Raise a StoreError naming both generators and the repair where ``dataset``'s perturbed embeddings in
    ``store`` were drawn by another generator than ``generator``."""
    from crs.store.zarr_store import StoreError

    other = {g: arrays for g, arrays in generators(store, dataset).items() if g != generator}
    if not other:
        return
    old, arrays = next(iter(other.items()))
    raise StoreError(
        f"dataset {dataset!r} in {store.path!r} holds perturbed embeddings drawn by the perturbation generator "
        f"{old!r} ({len(arrays)} arrays, e.g. {arrays[0]}); this crs draws perturbations with {generator!r}, "
        "and the same image under another generator is another image, so one dataset never mixes them. "
        "To repair: extract into a new store (pass --store with a new path); or delete that dataset's perturbed "
        f"arrays (the folders datasets/{dataset}/embeddings/ENCODER/FAMILY@SEVERITY; its clean embeddings stay "
        f"valid) and run `crs extract` again for each of its encoders; or keep this store with a crs release "
        f"that draws with {old!r}")
