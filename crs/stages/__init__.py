"""The stages layer: extract, probe, score and report as library functions, and ``run``
(a config's stages in order, skipping what is current). The command line calls these and
only parses and prints; nothing here imports ``crs.cli``.
"""

from crs.stages.pipeline import RunResult, Stage, check_datasets, check_names, run
from crs.stages.steps import (
    Extracted,
    check_dataset_names,
    check_encoders,
    check_shift_target,
    encoder_records,
    extract,
    parse_roots,
    plan,
    probe,
    probe_pairs,
    report,
    resolve_reference,
    score,
    scored_names,
    set_members,
    with_sets,
)

__all__ = ["Extracted", "RunResult", "Stage", "check_dataset_names", "check_datasets", "check_encoders", "check_names",
           "check_shift_target",
           "encoder_records", "extract", "parse_roots", "plan", "probe", "probe_pairs", "report", "resolve_reference",
           "run", "score", "scored_names", "set_members", "with_sets"]
