"""The CRS versions: one ``Definition`` each (``v1``, ``v2``), by the number crs records ("1", "2").

A new version is a new module beside ``v1`` and ``v2`` holding its ``DEFINITION``, one ``register`` call below,
its page in docs/ and its tests; nothing outside this package asks which version it is."""

from __future__ import annotations

from collections.abc import Iterable

from crs.foundations.errors import BadInput
from crs.scoring.versions import v1, v2
from crs.scoring.versions.definition import Definition

LATEST = "2"  # what `crs score` scores by unless told otherwise


def registry(definitions: Iterable[Definition]) -> dict[str, Definition]:
    """{number: definition}; ValueError naming a number given twice."""
    out: dict[str, Definition] = {}
    for d in definitions:
        if d.number in out:
            raise ValueError(f"CRS version {d.number!r} is defined twice ({out[d.number].spec}, {d.spec}); "
                             "give the new definition the next number")
        out[d.number] = d
    return out


DEFINITIONS = registry([v1.DEFINITION, v2.DEFINITION])
VERSIONS = tuple(DEFINITIONS)


def check(version) -> str:
    """The version as its canonical string ("1", "2"; a whole number, or one written as "2.0", is taken too);
    BadInput naming the versions otherwise."""
    v = str(version).strip()
    if v.endswith(".0"):
        v = v[:-2]
    if v not in DEFINITIONS:
        raise BadInput(f"CRS version must be one of {', '.join(VERSIONS)}, got {version!r} "
                       f"({', '.join(d.docs_path for d in DEFINITIONS.values())}; {LATEST} is the default)")
    return v


def get(version) -> Definition:
    """The definition of a CRS version (``check`` says which versions there are)."""
    return DEFINITIONS[check(version)]


def constants(version=LATEST) -> dict[str, float]:
    """The constants a version's definition uses, as every output of it records them (``settings.crs_constants``);
    {} for a version without constants (v1: docs/crs-v1.md fixes everything)."""
    return dict(get(version).constants)
