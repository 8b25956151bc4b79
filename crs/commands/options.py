"""Command-line options made from the settings schema (``crs.foundations.config``).

Each setting's field carries its flag; this module turns a field into a typer option
(type, default shown, help) and the values typed back into checked settings, so that a
flag and its TOML key share one type, one default, one range and one help text.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Annotated, Any

import typer

from crs.foundations import config
from crs.foundations.errors import BadInput

Path_ = tuple[str, ...]
SETTINGS: dict[Path_, tuple[dataclasses.Field, Any]] = {path: (f, tp) for path, f, tp in config.settings()}

# Options that are not settings, and why: they choose what to show, what to select or which file to
# read, and have no place in a benchmark's TOML file (tests/cli/test_options.py holds both lists equal).
EXEMPT = {
    "--json": "presentation: one JSON document instead of tables",
    "--quiet": "presentation: no progress bars or tables",
    "--verbose": "presentation: tracebacks on errors",
    "--version": "prints the version of CRS-Bench and exits",
    "--all": "selection: every encoder and dataset there is, instead of naming them",
    "run --crs-version": "an override of the config file's score.crs_version for one run",
    "extract --demo": "selection: the shorthand of --set demo (encoders.set)",
    "extract --pretrained": "selection: the shorthand of --set pretrained (encoders.set)",
    "extract --family": "selection: the shorthand of --set FAMILY (encoders.set)",
    "extract --plan": "prints what the extraction would cost and lacks, and runs nothing",
    "demo --out": "the demo's folder: its store, OUT/store.zarr, and results, OUT/results (the report in it)",
    "run --print-default": "prints the example config",
    "run --schema": "prints the config's JSON Schema",
    "run --check": "checks the config and runs nothing",
    "run --force": "recomputes what is current: an action, not a setting",
}


# Commands that run no stage and read no config: they list and inspect the registries, a
# dataset folder and a store, or carry a results folder out and in (export, merge), so their options are not
# benchmark settings.
TOOLS = ("encoders", "perturbations", "datasets", "store", "export", "merge")


def flag(path: Path_) -> str:
    return SETTINGS[tuple(path)][0].metadata["flags"][0]


def param_name(path: Path_) -> str:
    return flag(path).lstrip("-").replace("-", "_")


def _default_text(f: dataclasses.Field, path: Path_, base: config.Config) -> str | bool:
    value = getattr(getattr(base, path[0]) if len(path) == 2 else base, path[-1])
    if value is None or isinstance(value, dict) or (isinstance(value, tuple) and not f.metadata["text"]):
        return False
    if path == ("score", "weights") and value == (1 / 3, 1 / 3, 1 / 3):
        return "1/3,1/3,1/3"
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return str(value)


def _cli_type(f: dataclasses.Field, tp) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        origin = typing.get_origin(tp)
    if f.metadata["text"]:
        return str
    if origin in (tuple, dict):  # repeatable: a name each (NAME=DIR for roots)
        return list[str]
    return tp


def parameter(path: Path_, base: config.Config) -> inspect.Parameter:
    """The typer option of one setting; None (not given) leaves the setting at ``base``'s value."""
    f, tp = SETTINGS[tuple(path)]
    meta = f.metadata
    text = meta["flag_help"] or meta["help"]
    help_ = text[0].upper() + text[1:] + "."
    if tp is bool:
        opt = typer.Option(*meta["flags"], help=help_, show_default=False)
        return inspect.Parameter(param_name(path), inspect.Parameter.KEYWORD_ONLY, default=False,
                                 annotation=Annotated[bool, opt])
    opt = typer.Option(*meta["flags"], help=help_, show_default=_default_text(f, path, base))
    return inspect.Parameter(param_name(path), inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[_cli_type(f, tp) | None, opt])


def read(paths: list[Path_], values: dict) -> dict[Path_, Any]:
    """The settings given on the command line (popped from ``values``), checked; BadInput names the flag."""
    given = {}
    for path in paths:
        f, tp = SETTINGS[tuple(path)]
        meta, v = f.metadata, values.pop(param_name(path))
        if tp is bool:
            if v:
                given[path] = not meta["invert"]
            continue
        if v is None or v == []:
            continue
        try:
            if meta["text"]:
                v = meta["text"](v)
            elif isinstance(v, list) and typing.get_origin(tp) is tuple:
                v = tuple(v)
            if meta["parse"]:
                v = meta["parse"](v)
            if meta["check"]:
                meta["check"](v)
        except config.Bad as exc:
            raise BadInput(f"{flag(path)} {exc}") from None
        given[path] = v
    return given


def to_config(given: dict[Path_, Any], base: config.Config | None = None) -> config.Config:
    """``base`` (default: the schema's defaults) with the given settings; BadInput where two disagree."""
    top: dict[str, Any] = {}
    for path, v in given.items():
        if len(path) == 1:
            top[path[0]] = v
        else:
            top.setdefault(path[0], {})[path[1]] = v
    cfg = config.with_overrides(base or config.Config(), **top)
    problem = config.cross_check(cfg, flag)
    if problem:
        raise BadInput(problem[1])
    return cfg
