"""Which perturbation generator drew a dataset's perturbed embeddings, and keeping it one per dataset.

The same image under another generator (``crs.names.PERTURBATION_GENERATORS``) is another image, so the
perturbed embeddings of one dataset in a store must all come from one: else two encoders' robustness
would be measured on different images. Each perturbed embedding array records its generator in the
attribute ``perturbation_generator`` when created (``crs extract`` passes it); an array without it was
written before the record, by the first generator. Reading never looks at it: every store stays
readable, whichever generator wrote it.
"""

from __future__ import annotations

from crs.conditions import parse
from crs.names import PERTURBATION_GENERATORS

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


def refusal(path: str, dataset: str, generator: str, found: dict[str, list[str]]) -> str | None:
    """Why ``generator`` may not write perturbed arrays into ``dataset`` of the store at ``path``, whose
    perturbed arrays are ``found`` ({generator: ["ENCODER/CONDITION", ...]}), with the repair; None if it may."""
    other = {g: arrays for g, arrays in found.items() if g != generator}
    if not other:
        return None
    old, arrays = next(iter(other.items()))
    return (
        f"dataset {dataset!r} in {path!r} holds perturbed embeddings drawn by the perturbation generator "
        f"{old!r} ({len(arrays)} arrays, e.g. {arrays[0]}); this crs draws perturbations with {generator!r}, "
        "and the same image under another generator is another image, so one dataset never mixes them. "
        "To repair: extract into a new store (pass --store with a new path); or delete that dataset's perturbed "
        f"arrays (the folders datasets/{dataset}/embeddings/ENCODER/FAMILY@SEVERITY; its clean embeddings stay "
        f"valid) and run `crs extract` again for each of its encoders; or keep this store with a crs release "
        f"that draws with {old!r}")
