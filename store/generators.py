"""Which perturbation generator drew a dataset's perturbed embeddings, and keeping it one per dataset.

The same image under another generator (``crs.foundations.names.PERTURBATION_GENERATORS``) is another image, so the
perturbed embeddings of one dataset in a store must all come from one: else two encoders' robustness
would be measured on different images. Each perturbed embedding array records its generator in the
attribute ``perturbation_generator`` when created (``crs extract`` passes it). A perturbed array without it
comes from a generator that is not one of those, whose images differ: ``Store.read_embedding`` refuses it
(``unrecorded``), and a writer refuses to add to its dataset.
"""

from __future__ import annotations

from crs.foundations.conditions import parse
from crs.foundations.names import PERTURBATION_GENERATORS

ATTR = "perturbation_generator"
NONE = "none recorded"  # what Store.perturbation_generators lists a perturbed array that records no generator under


def is_perturbed(condition: str) -> bool:
    try:
        return parse(condition).kind == "perturbed"
    except ValueError:
        return False


def recorded(attrs: dict) -> str:
    """The generator an embedding array's attributes say drew it (a perturbed array's); ``NONE`` where none."""
    return attrs.get(ATTR) or NONE


def unrecorded(path: str, dataset: str, encoder: str, condition: str) -> str:
    """Why the perturbed array ``dataset/encoder/condition`` of the store at ``path``, which records no generator,
    is not read, with the repair."""
    return (f"embeddings {dataset}/{encoder}/{condition} in {path!r} record no perturbation generator "
            f"(attribute {ATTR!r}), which every perturbed array of this crs records: they were drawn by an older "
            f"development version, on other perturbed images than {PERTURBATION_GENERATORS[-1]!r} draws. To "
            f"repair: extract into a new store (`crs extract --encoder {encoder} --dataset {dataset} --store "
            f"NEW.zarr`), or delete the dataset's perturbed arrays (the folders datasets/{dataset}/embeddings/"
            f"ENCODER/FAMILY@SEVERITY) and run `crs extract --encoder {encoder} --dataset {dataset} --store {path}` "
            "again for each of its encoders")


def refusal(path: str, dataset: str, generator: str, found: dict[str, list[str]]) -> str | None:
    """Why ``generator`` may not write perturbed arrays into ``dataset`` of the store at ``path``, whose
    perturbed arrays are ``found`` ({generator: ["ENCODER/CONDITION", ...]}), with the repair; None if it may."""
    other = {g: arrays for g, arrays in found.items() if g != generator}
    if not other:
        return None
    old, arrays = next(iter(other.items()))
    if old == NONE:
        return (f"dataset {dataset!r} in {path!r} holds perturbed embeddings that record no perturbation generator "
                f"({len(arrays)} arrays, e.g. {arrays[0]}): an older development version drew them, on other "
                f"images than {generator!r} draws, and one dataset never mixes them. To repair: extract into a new "
                f"store (pass --store with a new path); or delete that dataset's perturbed arrays (the folders "
                f"datasets/{dataset}/embeddings/ENCODER/FAMILY@SEVERITY; its clean embeddings stay valid) and run "
                "`crs extract` again for each of its encoders")
    return (
        f"dataset {dataset!r} in {path!r} holds perturbed embeddings drawn by the perturbation generator "
        f"{old!r} ({len(arrays)} arrays, e.g. {arrays[0]}); this crs draws perturbations with {generator!r}, "
        "and the same image under another generator is another image, so one dataset never mixes them. "
        "To repair: extract into a new store (pass --store with a new path); or delete that dataset's perturbed "
        f"arrays (the folders datasets/{dataset}/embeddings/ENCODER/FAMILY@SEVERITY; its clean embeddings stay "
        f"valid) and run `crs extract` again for each of its encoders; or keep this store with a crs release "
        f"that draws with {old!r}")
