"""The stages layer: one module per stage (``extract``, ``probe``, ``score``, ``report``), each holding the
stage's work (``run``), whether its outputs are current (``is_current``, where a settings hash decides) and
``crs run``'s step; ``pipeline.run`` runs a config's stages in order, skipping what is current. ``bundles`` and
``merge`` are `crs export` and `crs merge`; ``names`` checks the names a run is given; ``catalog``,
``datasets``, ``stores`` and ``scoreview`` give the listing, dataset, store and printing commands what they show.
The command line calls these and only parses and prints; nothing here imports ``crs.cli``.
"""

from crs.stages import bundles, extract, merge, probe, report, score
from crs.stages.extract import Extracted
from crs.stages.names import (
    check_dataset_names,
    check_datasets,
    check_encoders,
    check_names,
    check_shift_target,
    encoder_records,
    parse_roots,
    scored_names,
    set_members,
    with_sets,
)
from crs.stages.pipeline import RunResult, run
from crs.stages.probe import probe_pairs
from crs.stages.score import resolve_reference
from crs.stages.state import Stage

__all__ = ["Extracted", "RunResult", "Stage", "bundles", "check_dataset_names", "check_datasets", "check_encoders",
           "check_names", "check_shift_target", "encoder_records", "extract", "merge", "parse_roots", "probe",
           "probe_pairs", "report", "resolve_reference", "run", "score", "scored_names", "set_members", "with_sets"]
