"""The settings: one typed definition per setting, for the ``crs run`` TOML file and the command line.

``schema`` (the frozen dataclasses, one per TOML section, and ``settings``), ``checks`` (each value's
range and form), ``tomlfile`` (``parse``, ``load``, ``resolve``, ``locate``, ``to_toml``), ``jsonschema``
(``json_schema``) and example.toml, the commented example (``crs run --print-default``, the built-in
demo). Nothing here imports the stages, so the checks are instant.
"""

from importlib import resources

from crs.foundations.config.checks import ENCODER_SETS, WEIGHT_TOL, Bad, ConfigError
from crs.foundations.config.jsonschema import json_schema
from crs.foundations.config.schema import (
    DEFAULT_FRACTIONS,
    DEFAULT_HIDDEN,
    DEFAULT_L2,
    DEFAULT_N_SEEDS,
    SECTIONS,
    Config,
    Datasets,
    Encoders,
    Extract,
    Probe,
    Report,
    Score,
    as_dict,
    cross_check,
    flag_words,
    options_record,
    record_hash,
    report_folder,
    settings,
    settings_hash,
    with_crs_version,
    with_overrides,
)
from crs.foundations.config.tomlfile import load, locate, parse, resolve, to_toml

# The commented example (`crs run --print-default`, examples/crs-run.toml): the built-in demo.
EXAMPLE = resources.files(__name__).joinpath("example.toml").read_text(encoding="utf-8")

__all__ = [
    "DEFAULT_FRACTIONS", "DEFAULT_HIDDEN", "DEFAULT_L2", "DEFAULT_N_SEEDS", "ENCODER_SETS", "EXAMPLE", "SECTIONS",
    "WEIGHT_TOL", "Bad", "Config", "ConfigError", "Datasets", "Encoders", "Extract", "Probe", "Report", "Score",
    "as_dict", "cross_check", "flag_words", "json_schema", "load", "locate", "options_record", "parse", "record_hash",
    "report_folder", "resolve",
    "settings", "settings_hash", "to_toml", "with_crs_version", "with_overrides",
]
