"""The CRS versions as objects: each version's q, components, calibration estimator, constants and the words the
report uses for it are one ``Definition`` (``definition``), one module each (``v1``, ``v2``), in one registry
(``registry``). Callers ask ``get(version)``; no other module compares a version's number."""

from crs.scoring.versions.definition import Calibration, Definition, Words
from crs.scoring.versions.registry import DEFINITIONS, LATEST, VERSIONS, check, constants, get

__all__ = ["DEFINITIONS", "LATEST", "VERSIONS", "Calibration", "Definition", "Words", "check", "constants", "get"]
