"""The stages layer: extract, probe, score and report as library functions, and ``run``
(a config's stages in order, skipping what is current). The command line calls these and
only parses and prints; nothing here imports ``crs.cli``.
"""

from crs.stages.pipeline import RunResult, Stage, check_names, run
from crs.stages.steps import (Extracted, check_dataset_names, check_encoders, encoder_records, extract,
                              parse_roots, probe, probe_pairs, report, score)

__all__ = ["Extracted", "RunResult", "Stage", "check_dataset_names", "check_encoders", "check_names",
           "encoder_records", "extract", "parse_roots", "probe", "probe_pairs", "report", "run", "score"]
