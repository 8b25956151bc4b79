"""The settings schema: one typed definition per setting, for the ``crs run`` TOML file and the command line.

Frozen dataclasses, one per TOML section; each field holds its type, default, range check,
help text and command-line flag, so ``crs.options`` makes the typer options from the same
fields and ``json_schema`` the JSON Schema (``crs run --schema``). Pure functions: ``parse``
(text -> Config), ``to_toml`` (Config -> text; ``parse(to_toml(c)) == c``), ``locate`` (the
line a key is on; tomllib gives no line numbers, so the text is scanned) and
``settings_hash``. Every error names the key, its line and what to write instead. Nothing
here imports the stages, so the checks are instant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from crs.errors import UserError
from crs.names import CRS_LATEST, CRS_VERSIONS, HEADS, MODALITIES, SEVERITIES

# The stages' defaults live here and only here: the command line's options and the TOML
# keys are both made from these fields, and the stages trust what passed their checks.
DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
DEFAULT_L2 = (1e-3, 1e-2, 1e-1, 1.0)
DEFAULT_N_SEEDS = 5  # probe seeds 0..N-1
DEFAULT_HIDDEN = 128
WEIGHT_TOL = 1e-6


class ConfigError(UserError, ValueError):
    """A config file that cannot be used; the message names the key and its line."""

    def __init__(self, message: str, key: str = "", line: int | None = None, source: str = ""):
        self.key, self.line, self.source = key, line, source
        where = source or "config"
        if line is not None:
            where += f" line {line}"
        super().__init__(f"{where}: {key + ': ' if key else ''}{message}")


class Bad(Exception):
    """A value of the wrong type or out of range (the caller adds the key and line, or the flag)."""



# ------------------------------------------------------------------ value checks
# Each check carries the JSON Schema fragment that says the same thing (``crs run --schema``).
def _check(schema: dict):
    def mark(fn):
        fn.schema = schema
        return fn
    return mark


def _choices(*allowed: str) -> Callable[[Any], None]:
    words = ", ".join(allowed[:-1]) + " or " + allowed[-1]

    @_check({"enum": list(allowed)})
    def check(v):
        if v not in allowed:
            raise Bad(f"must be {words}, not {v!r} (one of {', '.join(map(repr, allowed))})")
    return check


def _at_least(lo: int, words: str = "") -> Callable[[Any], None]:
    @_check({"minimum": lo})
    def check(v):
        if not v >= lo:
            raise Bad(f"must be {words or f'at least {lo:g}'}, not {v!r}")
    return check


@_check({"exclusiveMinimum": 0})
def _positive(v):
    if not (v > 0 and math.isfinite(v)):
        raise Bad(f"must be positive (a finite number above 0), not {v!r}")


@_check({"minItems": 1, "items": {"enum": list(SEVERITIES)}})
def _severities(v):
    if not v or any(s not in SEVERITIES for s in v):
        raise Bad(f"must be a non-empty list of integers 1..5, not {list(v)!r}")


@_check({"minItems": 1, "items": {"exclusiveMinimum": 0, "maximum": 1}, "contains": {"const": 1}})
def _fractions(v):
    if not v or any(not 0 < f <= 1 for f in v):
        raise Bad(f"must be a non-empty list of numbers in (0, 1], not {list(v)!r}")
    if 1.0 not in v:
        raise Bad(f"must include 1 (the full-label probe defines D, C and R), not {list(v)!r}")


@_check({"minItems": 1, "items": {"exclusiveMinimum": 0}})
def _l2(v):
    if not v:
        raise Bad("must name at least one value")
    if any(not (x > 0 and math.isfinite(x)) for x in v):
        raise Bad(f"values must be positive numbers, not {list(v)!r}")


@_check({"exclusiveMinimum": 0, "exclusiveMaximum": 1})
def _tol(v):
    if not 0 < v < 1:
        raise Bad(f"must lie in (0, 1), not {v!r}")


@_check({"minItems": 1})
def _non_empty(v):
    if not v:
        raise Bad("must name at least one")


def _fraction(x) -> float:
    """A number, or a "1/3"-style string (TOML has no fractions)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, str)):
        raise Bad(f"must be numbers or fractions such as \"1/3\", not {x!r}")
    if not isinstance(x, str):
        return float(x)
    try:
        a, _, b = x.strip().partition("/")
        return float(a) / float(b) if b else float(a)
    except (ValueError, ZeroDivisionError):
        raise Bad(f"{x!r} is not a number or a fraction such as \"1/3\"") from None


def _weights(raw):
    """Three non-negative numbers summing to 1."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 3:
        raise Bad(f"must be three numbers [dominance, balance, worst], e.g. [\"1/3\", \"1/3\", \"1/3\"], not {raw!r}")
    vals = tuple(_fraction(x) for x in raw)
    if not all(math.isfinite(v) and v >= 0 for v in vals) or abs(sum(vals) - 1) > WEIGHT_TOL:
        raise Bad(f"must be non-negative and sum to 1, not {raw!r}")
    return vals


_weights.schema = {"type": "array", "minItems": 3, "maxItems": 3,
                   "items": {"anyOf": [{"type": "number", "minimum": 0},
                                       {"type": "string", "pattern": r"^\s*[0-9.eE+-]+(\s*/\s*[0-9.eE+-]+)?\s*$"}]}}


def _crs_version(raw):
    """A CRS version, as the string crs records ("1", "2"); a whole number is taken too (TOML `crs_version = 1`)."""
    text = str(int(raw)) if isinstance(raw, (int, float)) and not isinstance(raw, bool) and float(raw).is_integer() \
        else str(raw).strip()
    if text not in CRS_VERSIONS:
        raise Bad(f"must be one of the CRS versions {', '.join(CRS_VERSIONS)} (docs/crs-v1.md, docs/crs-v2.md), "
                  f"not {raw!r}")
    return text


_crs_version.schema = {"anyOf": [{"type": "string", "enum": list(CRS_VERSIONS)},
                                 {"type": "integer", "enum": [int(v) for v in CRS_VERSIONS]}]}


def with_crs_version(cfg, raw):
    """``cfg`` scoring by the CRS version ``raw`` (the --crs-version of `crs run`); ConfigError naming the versions."""
    try:
        version = _crs_version(raw)
    except Bad as exc:
        raise ConfigError(f"--crs-version {exc}") from None
    return dataclasses.replace(cfg, score=dataclasses.replace(cfg.score, crs_version=version))


ENCODER_SETS = ("demo", "pretrained", "general", "medical", "specialty")


@_check({"anyOf": [{"enum": list(ENCODER_SETS)}, {"type": "array", "items": {"enum": list(ENCODER_SETS)}}]})
def _encoder_sets(v):
    bad = [x for x in v if x not in ENCODER_SETS]
    if bad:
        raise Bad(f"must name sets among {', '.join(ENCODER_SETS)}, not {bad[0]!r}")


def _convert_sets(v) -> tuple[str, ...]:
    """A set name or a list of them (TOML ``set = "medical"`` or ``set = ["general", "medical"]``)."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        raise Bad(f"must be a set name or a list of them ({', '.join(ENCODER_SETS)}), not {v!r}")
    return tuple(dict.fromkeys(items))


@_check({"type": "object", "additionalProperties": {"type": "string"}})
def _revisions(v):
    for name, rev in v.items():
        if not rev or any(c.isspace() for c in rev):
            raise Bad(f"{name}: a revision is a commit id, branch or tag without spaces, not {rev!r}")


def _name_values(v, form: str) -> dict[str, str]:
    """NAME=VALUE strings (the command line) or a TOML table -> {NAME: VALUE}."""
    if isinstance(v, dict):
        if not all(isinstance(x, str) for x in v.values()):
            raise Bad(f"must be a table of strings ({form.replace('=', ' = ')}), not {v!r}")
        return dict(v)
    if not isinstance(v, (list, tuple)):
        raise Bad(f"must be a table of strings ({form.replace('=', ' = ')}), not {_toml_kind(v)} {v!r}")
    out = {}
    for item in v:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip() or not value.strip():
            raise Bad(f"must look like {form}, not {item!r}")
        out[name.strip()] = value.strip()
    return out


# ------------------------------------------------------------------ the command line's text forms
def _comma_numbers(kind: type, sort: bool):
    """'0.1,0.5,1' -> (0.1, 0.5, 1.0): a list option typed on the command line (sorted, once each)."""
    def parse(text: str):
        try:
            vals = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise Bad(f"must be comma-separated {'integers' if kind is int else 'numbers'}, not {text!r}") from None
        if not vals:
            raise Bad("is empty")
        return tuple(sorted(set(vals))) if sort else tuple(vals)
    return parse


def _comma_weights(text: str):
    parts = text.split(",")
    try:
        vals = tuple(_fraction(p) for p in parts)
    except Bad:
        vals = ()
    if len(vals) != 3:
        raise Bad(f"must be three numbers (dominance,balance,worst), not {text!r}")
    return vals


def _opt(help: str, check=None, parse=None, *, flag: str | tuple[str, ...] = (), text=None,
         invert: bool = False, flag_help: str = "", **kw):
    """One setting: ``help``; ``check`` (range); ``parse`` (TOML value -> value); ``flag`` its command-line
    option (a tuple: the flag and its short form); ``text`` parses the option's text where the command
    line types a list as one comma-separated word; ``invert``: a --no-X flag that sets False, with
    ``flag_help`` saying what the flag does."""
    flags = (flag,) if isinstance(flag, str) else tuple(flag)
    return field(metadata={"help": help, "check": check, "parse": parse, "flags": flags, "text": text,
                           "invert": invert, "flag_help": flag_help}, **kw)


# ------------------------------------------------------------------ schema
@dataclass(frozen=True)
class Encoders:
    names: tuple[str, ...] = _opt("registry names (`crs encoders`), timm:NAME or hf:ORG/NAME (repeatable); with "
                                  "`set`, encoders added to the set's (default with no set: the demo set)",
                                  flag=("--encoder", "-e"), default=("demo-resnet", "demo-vit", "demo-stats"))
    set: tuple[str, ...] = _opt("registry sets of encoders: demo (no download), pretrained (every pretrained "
                                "record), or a family: general, medical, specialty (repeatable)", _encoder_sets,
                                flag="--set", parse=lambda v: _convert_sets(v), default=())
    revisions: dict[str, str] = _opt("pinned hub revision per encoder, ENCODER = \"COMMIT, branch or tag\" (on the "
                                     "command line ENCODER=REV, repeatable); overrides the record's", _revisions,
                                     flag="--revision", parse=lambda v: _name_values(v, "ENCODER=REV"),
                                     default_factory=dict)
    file: str | None = _opt("TOML file of extra encoder records ([[encoder]] tables)", flag="--encoder-file",
                            default=None)
    trust_remote_code: bool = _opt("allow a hub model's own Python code to run", flag="--trust-remote-code",
                                   default=False)
    weights: str | None = _opt("local checkpoint file or folder instead of the hub (one encoder)",
                               flag="--weights", default=None)


@dataclass(frozen=True)
class Datasets:
    names: tuple[str, ...] = _opt("datasets probed (`crs datasets`); shift targets come with them (repeatable)",
                                  _non_empty, flag=("--dataset", "-d"),
                                  default=("demo_derm", "demo_fundus", "demo_cxr"))
    roots: dict[str, str] = _opt("a real dataset's folder, NAME = DIR (on the command line NAME=DIR, repeatable, "
                                 "or DIR when one real dataset is given)", flag="--root", default_factory=dict)
    size: float = _opt("scale of the built-in datasets (1.0 = demo size)", _positive, flag="--size", default=1.0)
    split_seed: int = _opt("seed of the train/val/test split of file-based datasets without an official split",
                           flag="--split-seed", default=0)
    uncertain: str = _opt("uncertain chest X-ray labels: ignore (masked), ones or zeros",
                          _choices("ignore", "ones", "zeros"), flag="--uncertain", default="ignore")
    findings: str = _opt("chest X-ray findings: competition (5), all (14), or a comma-separated list",
                         flag="--findings", default="competition")
    image_root: str | None = _opt("folder the paths of a csv:PATH dataset are relative to (default: the CSV's "
                                  "folder)", flag="--image-root", default=None)
    modality: str | None = _opt("a csv:PATH dataset's modality", _choices(*MODALITIES), flag="--modality",
                                default=None)
    shift_target: str | None = _opt("a csv:PATH dataset's shift target (a dataset name or csv:PATH)",
                                    flag="--shift-target", default=None)
    allow_absolute_paths: bool = _opt("read image paths that lie outside the image root (absolute, or climbing "
                                      "out with ..); refused by default", flag="--allow-absolute-paths",
                                      default=False)
    follow_symlinks: bool = _opt("read image paths that lead out of the image root through a symbolic link; "
                                 "refused by default", flag="--follow-symlinks", default=False)


@dataclass(frozen=True)
class Extract:
    perturb: bool = _opt("embed the test split under the modality's perturbation suite", flag="--no-perturb",
                         invert=True, flag_help="clean embeddings only", default=True)
    severities: tuple[int, ...] = _opt("perturbation severities (1..5)", _severities, flag="--severities",
                                       text=_comma_numbers(int, sort=True), default=SEVERITIES)
    chunk: int = _opt("store chunk length in images (a resume unit is one chunk of one condition)", _at_least(1),
                      flag="--chunk", default=256)
    batch: int = _opt("images per forward pass", _at_least(1), flag="--batch", default=64)
    device: str = _opt("torch device, or auto (cuda if available, else cpu)", flag="--device", default="auto")
    dtype: str = _opt("embedding dtype in the store", _choices("float16", "float32"), flag="--dtype",
                      default="float16")
    precision: str = _opt("auto (bf16 autocast on CUDA, float32 on CPU), bf16 or float32",
                          _choices("auto", "bf16", "float32"), flag="--precision", default="auto")
    workers: int = _opt("DataLoader worker processes decoding images ahead", _at_least(0), flag="--workers",
                        default=0)
    strict: bool = _opt("stop at the first image that cannot be decoded", flag="--strict", default=False)
    max_models: int = _opt("encoders loaded at once (0: as many as fit 80% of the device's free memory, weights "
                           "and one batch's activations, at most 8); each group decodes and perturbs the images "
                           "once", _at_least(0),
                           flag="--max-models", default=0)
    executor: str = _opt("local (this process) or ray (work units spread over a Ray cluster; pip install "
                         "'crs-bench[ray]')", _choices("local", "ray"), flag="--executor", default="local")
    address: str | None = _opt("Ray cluster to join with executor ray ('auto' or ray://HOST:PORT); default: "
                               "start a local Ray instance", flag="--address", default=None)
    actors: int | None = _opt("model replicas with executor ray (default: one per GPU of the cluster, else one "
                              "per CPU)", _at_least(1, "1 or more"), flag="--actors", default=None)


@dataclass(frozen=True)
class Probe:
    seeds: int = _opt("number of probe seeds (0..seeds-1)", _at_least(1), flag="--seeds", default=DEFAULT_N_SEEDS)
    fractions: tuple[float, ...] = _opt("label fractions (must include 1)", _fractions, flag="--fractions",
                                        text=_comma_numbers(float, sort=True), default=DEFAULT_FRACTIONS)
    l2: tuple[float, ...] = _opt("L2 grid (the MLP's weight-decay grid)", _l2, flag="--l2",
                                 text=_comma_numbers(float, sort=True), default=DEFAULT_L2)
    select_by: str = _opt("choose L2 per seed and fraction by validation loss (NLL) or auroc",
                          _choices("loss", "auroc"), flag="--select-by", default="loss")
    tol: float = _opt("gradient tolerance each linear probe is solved to (mlp probes have their own stopping "
                      "rule)", _tol, flag="--tol", default=1e-4)
    head: str = _opt("probe head: linear, or mlp (Dense-GELU-Dense; results go under the name ENCODER+mlp)",
                     _choices(*HEADS), flag="--head", default="linear")
    hidden: int = _opt("hidden width of the mlp head", _at_least(1), flag="--hidden", default=DEFAULT_HIDDEN)


@dataclass(frozen=True)
class Score:
    reference: str = _opt("reference encoder, 'median', or 'auto' (the registry's)", flag="--reference",
                          default="auto")
    weights: tuple[float, float, float] = _opt("CRS weights [dominance, balance, worst] (command line: "
                                               "dominance,balance,worst)", parse=_weights, flag="--weights",
                                               text=_comma_weights, default=(1 / 3, 1 / 3, 1 / 3))
    bootstrap: int = _opt("bootstrap replicates", _at_least(1), flag="--bootstrap", default=1000)
    bootstrap_unit: str = _opt("resample seed (docs/crs-v1.md section 5), test image (needs the store) or both "
                               "(seeds and test images together, paired across encoders)",
                               _choices("seed", "image", "both"), flag="--bootstrap-unit", default="both")
    seed: int = _opt("bootstrap seed", flag="--seed", default=0)
    crs_version: str = _opt("CRS definition: 2 (docs/crs-v2.md, the default) or 1 (docs/crs-v1.md, as it was; "
                            "its numbers bit for bit)", parse=_crs_version, flag="--crs-version",
                            default=CRS_LATEST)


@dataclass(frozen=True)
class Report:
    enabled: bool = _opt("write the HTML report (crs report)", flag="--no-report", invert=True,
                         flag_help="skip the HTML report stage", default=True)
    out: str | None = _opt("report folder (default RESULTS/report)", flag="--out", default=None)


@dataclass(frozen=True)
class Config:
    store: str = _opt("embedding store path or fsspec URL", flag="--store", default="./crs-store.zarr")
    results: str = _opt("folder for run records, scores and the report", flag="--results", default="./crs-results")
    log_interval: float = _opt("seconds between the plain progress lines written when the output is not a "
                               "terminal (a batch job's log)", _positive, flag="--log-interval", default=30.0)
    encoders: Encoders = field(default_factory=Encoders)
    datasets: Datasets = field(default_factory=Datasets)
    extract: Extract = field(default_factory=Extract)
    probe: Probe = field(default_factory=Probe)
    score: Score = field(default_factory=Score)
    report: Report = field(default_factory=Report)


SECTIONS = ("encoders", "datasets", "extract", "probe", "score", "report")


def settings() -> list[tuple[tuple[str, ...], dataclasses.Field, Any]]:
    """Every setting of the schema: (path such as ("probe", "seeds"), its field, its type)."""
    out = []
    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub = typing.get_type_hints(tp)
            out += [((f.name, g.name), g, sub[g.name]) for g in dataclasses.fields(tp)]
        else:
            out.append(((f.name,), f, tp))
    return out


def flag_words(section: str, values: dict) -> list[str]:
    """The command-line words that give ``values`` ({setting name: value}) of schema ``section``
    ("extract", "probe", ...), each through its own flag as a user types it: a bool by its flag alone
    where it differs from the flag-less state, a tuple as one comma-separated word, a float exactly
    (``repr``). Settings without a flag, or None, are left out. Repair commands are built with it."""
    fields = {f.name: f for f in dataclasses.fields(typing.get_type_hints(Config)[section])}
    words: list[str] = []
    for name, value in values.items():
        f = fields.get(name)
        if f is None or value is None or not f.metadata["flags"]:
            continue
        flag = f.metadata["flags"][0]
        if isinstance(value, bool):
            words += [flag] if value == (not f.metadata["invert"]) else []
        elif isinstance(value, dict):  # NAME=VALUE, the flag once per entry
            words += [w for k, v in value.items() for w in (flag, f"{k}={v}")]
        elif isinstance(value, (list, tuple)):
            words += [flag, ",".join(repr(v) if isinstance(v, float) else str(v) for v in value)]
        else:
            words += [flag, repr(value) if isinstance(value, float) else str(value)]
    return words


def cross_check(cfg: Config, name: Callable[[tuple[str, ...]], str]) -> tuple[tuple[str, ...], str] | None:
    """The rules that tie two settings together: (the path to blame, the message) or None.

    ``name`` spells a path as the caller's user wrote it (a TOML key, or a command-line flag).
    """
    ex, pr = cfg.extract, cfg.probe
    if not cfg.encoders.names and not cfg.encoders.set:
        return ("encoders", "names"), (f"no encoders: give {name(('encoders', 'names'))} (at least one) or "
                                       f"{name(('encoders', 'set'))} (one of {', '.join(ENCODER_SETS)})")
    if ex.executor != "ray" and (ex.address is not None or ex.actors is not None):
        path = ("extract", "address" if ex.address is not None else "actors")
        return path, (f"{name(('extract', 'address'))} and {name(('extract', 'actors'))} apply to "
                      f"{name(('extract', 'executor'))} ray only")
    if pr.head != "mlp" and pr.hidden != DEFAULT_HIDDEN:
        return ("probe", "hidden"), (f"{name(('probe', 'hidden'))} {pr.hidden} applies to {name(('probe', 'head'))} "
                                     f"mlp only; add {name(('probe', 'head'))} mlp or drop {name(('probe', 'hidden'))}")
    return None


# ------------------------------------------------------------------ JSON Schema
def _json_type(tp) -> dict:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _json_type(inner)  # TOML has no null: a present key holds the value
    if origin is tuple:
        return {"type": "array", "items": _json_type(typing.get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": {"type": "string"}}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[tp]}


def _json_setting(f: dataclasses.Field, tp) -> dict:
    meta = f.metadata
    check = meta.get("parse") or meta.get("check")
    schema = dict(getattr(check, "schema", None) or {})
    # a field with its own parser (the weights) states its whole JSON form; the others add ranges to their type
    out = {**(_json_type(tp) if not meta.get("parse") else {}), "description": meta["help"]}
    if "items" in schema and "items" in out:
        schema["items"] = {**out["items"], **schema["items"]}
    out.update(schema)
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if default is not None:
        out["default"] = list(default) if isinstance(default, tuple) else default
    return out


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a config file, made from the same fields as ``parse``."""
    props: dict[str, Any] = {}
    for path, f, tp in settings():
        if len(path) == 1:
            props[path[0]] = _json_setting(f, tp)
            continue
        sec = props.setdefault(path[0], {"type": "object", "additionalProperties": False, "properties": {}})
        sec["properties"][path[1]] = _json_setting(f, tp)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "crs run config",
            "type": "object", "additionalProperties": False, "properties": props}


# ------------------------------------------------------------------ parsing
def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return "a list of " + {str: "strings", int: "integers", float: "numbers"}[typing.get_args(tp)[0]]
    if origin is dict:
        return "a table of strings"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))


def _convert(value, tp):
    """A TOML value as the field's type, or Bad. Integers count as numbers; bools never count as numbers."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # X | None: TOML has no null, so a present key is an X
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, inner)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        if not isinstance(value, list):
            raise Bad(f"must be {_type_name(tp)}, not {_toml_kind(value)} {value!r}")
        try:
            return tuple(_convert(v, inner) for v in value)
        except Bad:
            raise Bad(f"must be {_type_name(tp)}, not {value!r}") from None
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise Bad(f"must be {_type_name(tp)} (NAME = \"DIR\"), not {value!r}")
        return dict(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and type(value) is tp:
        return value
    raise Bad(f"must be {_type_name(tp)}, not {_toml_kind(value)} {value!r}")


def _toml_kind(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _build(cls, data: dict, prefix: tuple[str, ...], text: str, source: str):
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = prefix + (key,)
        if key not in fields:
            where = f"[{'.'.join(prefix)}]" if prefix else "the top level"
            valid = ", ".join(f"[{k}]" if k in SECTIONS and not prefix else k for k in fields)
            raise ConfigError(f"unknown key; valid keys at {where}: {valid}", ".".join(path),
                              locate(text, path), source)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"must be a table ([{key}]), not {_toml_kind(value)} {value!r}", key,
                                  locate(text, path), source)
            kwargs[key] = _build(tp, value, path, text, source)
            continue
        meta = fields[key].metadata
        try:
            v = meta["parse"](value) if meta.get("parse") else _convert(value, tp)
            if meta.get("check"):
                meta["check"](v)
        except Bad as exc:
            raise ConfigError(str(exc), ".".join(path), locate(text, path), source) from None
        kwargs[key] = v
    return cls(**kwargs)


def parse(text: str, source: str = "") -> Config:
    """TOML text -> Config; ConfigError naming the key and line for anything unknown or ill-typed."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    cfg = _build(Config, data, (), text, source)
    enc = data.get("encoders") if isinstance(data.get("encoders"), dict) else {}
    if "set" in enc and "names" not in enc:  # a set alone: its encoders, not the demo three besides
        cfg = with_overrides(cfg, encoders={"names": ()})
    problem = cross_check(cfg, lambda path: ".".join(path))
    if problem:
        path, message = problem
        raise ConfigError(message, ".".join(path), locate(text, path), source)
    return cfg


def load(path: str | Path) -> Config:
    """Read and parse a config file; relative paths in it stay relative (see ``resolve``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such file: {p}; `crs run --print-default > {p.name}` writes an example") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {p}: {exc}") from None
    return parse(text, str(p))


def resolve(cfg: Config, base: str | Path) -> Config:
    """Relative file paths in the config, taken relative to ``base`` (the config file's folder).

    URLs (``s3://...``) and absolute paths stay as they are.
    """
    def fix(p: str | None) -> str | None:
        if p is None or "://" in p or Path(p).is_absolute():
            return p
        return str(Path(base) / p)

    ds = cfg.datasets
    return dataclasses.replace(
        cfg, store=fix(cfg.store), results=fix(cfg.results),
        encoders=dataclasses.replace(cfg.encoders, file=fix(cfg.encoders.file), weights=fix(cfg.encoders.weights)),
        datasets=dataclasses.replace(ds, roots={k: fix(v) for k, v in ds.roots.items()},
                                     image_root=fix(ds.image_root),
                                     names=tuple(_fix_csv(n, fix) for n in ds.names),
                                     shift_target=_fix_csv(ds.shift_target, fix) if ds.shift_target else None),
        report=dataclasses.replace(cfg.report, out=fix(cfg.report.out)),
    )


def _fix_csv(name: str, fix) -> str:
    return f"csv:{fix(name[4:])}" if name.startswith("csv:") else name


# ------------------------------------------------------------------ locating keys
_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER_RE = re.compile(rf"^\s*\[(\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY_RE = re.compile(rf"^\s*({_DOTTED})\s*=")


def _parts(dotted: str) -> tuple[str, ...]:
    out = []
    for m in re.finditer(_PART, dotted):
        p = m.group(0)
        if p[0] in "\"'":
            p = json.loads(p) if p[0] == '"' else p[1:-1]
        out.append(p)
    return tuple(out)


def locate(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line on which the key ``path`` (e.g. ``("probe", "seeds")``) is set.

    Tracks ``[table]`` headers; understands dotted and quoted keys; a key set inside an
    inline table or a multi-line value is placed on the line its enclosing key starts.
    None when not found (the error is then given without a line).
    """
    path = tuple(path)
    table: tuple[str, ...] = ()
    best = None  # the line of the longest enclosing prefix, for keys inside inline tables
    in_multiline = None
    for n, line in enumerate(text.split("\n"), start=1):  # TOML lines end at LF (CRLF: the CR is trailing space)
        if in_multiline:  # inside a multi-line string: skip until it closes
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        h = _HEADER_RE.match(line)
        if h:
            table = _parts(h.group(2))
            if table == path:
                return n
            continue
        k = _KEY_RE.match(line)
        if not k:
            continue
        full = table + _parts(k.group(1))
        value = line[k.end():].lstrip()
        for q in ('"""', "'''"):  # a value that opens a multi-line string and does not close it here
            if value.startswith(q) and q not in value[3:]:  # (a quoted "'''" is a one-line string)
                in_multiline = q
        if full == path:
            return n
        if len(full) < len(path) and path[: len(full)] == full and best is None:
            best = n
    return best


# ------------------------------------------------------------------ writing
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML here holds finite numbers only, not {v!r}")
        return repr(v)
    if isinstance(v, str):
        # JSON's escapes are TOML's; non-ASCII stays as UTF-8 (JSON would write surrogate pairs); TOML
        # also wants DEL escaped
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def _key(k: str) -> str:
    return k if re.fullmatch(_BARE, k) else _toml_value(k)


def to_toml(cfg: Config) -> str:
    """Config -> TOML text that ``parse`` reads back to an equal Config (None fields are left out)."""
    lines = [f"{k} = {_toml_value(getattr(cfg, k))}" for k in ("store", "results", "log_interval")]
    for sec in SECTIONS:
        obj = getattr(cfg, sec)
        lines += ["", f"[{sec}]"]
        subtables = []
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None:
                continue
            if isinstance(v, dict):
                if v:
                    subtables.append((f.name, v))
                continue
            lines.append(f"{f.name} = {_toml_value(v)}")
        for name, d in subtables:
            lines += ["", f"[{sec}.{name}]"] + [f"{_key(k)} = {_toml_value(v)}" for k, v in d.items()]
    return "\n".join(lines) + "\n"


def as_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def settings_hash(*parts) -> str:
    """A short stable digest of JSON-able settings (dict keys sorted), to tell whether outputs are current."""
    text = json.dumps(parts, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_overrides(cfg: Config, **sections) -> Config:
    """``with_overrides(cfg, probe={"seeds": 2}, store="x")``: a copy with those values replaced."""
    top = {}
    for name, value in sections.items():
        if isinstance(value, dict):
            top[name] = dataclasses.replace(getattr(cfg, name), **value)
        else:
            top[name] = value
    return dataclasses.replace(cfg, **top)


# The commented example (`crs run --print-default`, examples/crs-run.toml): the built-in demo.
EXAMPLE = '''# crs run: one file for a whole benchmark (extract -> probe -> score -> report).
# This is the built-in demo (`crs demo` runs it, with the store and results under its
# --out folder); `crs run --print-default` prints it. Relative paths are taken from this file's folder. Every key is optional:
# a missing one takes the default shown. Re-running skips what is already complete
# and recomputes a stage whose settings changed.

store = "crs-demo/store.zarr"     # embedding store (a path or an fsspec URL)
results = "crs-demo/results"      # run records, scores; the report goes to RESULTS/report

[encoders]
names = ["demo-resnet", "demo-vit", "demo-stats"]   # `crs encoders`; also timm:NAME, hf:ORG/NAME
# set = ["medical"]               # registry sets: demo, pretrained, general, medical, specialty
                                  # (with a set, names lists encoders added to it)
# file = "my-encoders.toml"       # extra [[encoder]] records
# trust_remote_code = false
# weights = "checkpoints/my-vit" # a local checkpoint instead of the hub (one encoder only)
# [encoders.revisions]            # pin the hub revision per encoder (a commit id, branch or tag)
# resnet50 = "COMMIT"

[datasets]
names = ["demo_derm", "demo_fundus", "demo_cxr"]    # `crs datasets`; shift targets come with them
size = 1.0                        # scale of the built-in datasets
# split_seed = 0                  # split of file-based datasets without an official one
# uncertain = "ignore"            # chest X-ray uncertain labels: ignore, ones or zeros
# findings = "competition"        # chest X-ray findings: competition, all, or "A,B,C"
# modality = "dermatology"        # a csv:PATH dataset's modality
# image_root = "images"           # a csv:PATH dataset's image folder
# shift_target = "mimic-cxr"      # a csv:PATH dataset's shift target
# allow_absolute_paths = false   # image paths outside the image root
# follow_symlinks = false        # image paths that a symbolic link leads out of the image root

# [datasets.roots]                # real datasets: the folder each ships in
# isic2019 = "/data/ISIC2019"
# chexpert = "/data/CheXpert-v1.0-small"
# mimic-cxr = "/data/mimic-cxr-jpg/2.0.0"

[extract]
perturb = true                    # the test split under the modality's perturbation suite
severities = [2, 4]               # the demo's two; [1, 2, 3, 4, 5] for the full suites
# chunk = 256                     # store chunk length in images (a resume unit is one chunk of one condition)
# batch = 64
# device = "auto"                 # cuda if available, else cpu
# dtype = "float16"
# precision = "auto"              # bf16 autocast on CUDA, float32 on CPU
# workers = 0
# strict = false
# executor = "local"              # or "ray": work units spread over a Ray cluster
# address = "auto"                # executor "ray": the cluster to join (default: a local Ray)
# actors = 4                      # executor "ray": model replicas (default: one per GPU, else CPU)

[probe]
seeds = 5
fractions = [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0]
l2 = [0.001, 0.01, 0.1, 1.0]
# select_by = "loss"              # or "auroc"
# tol = 1e-4
# head = "linear"                 # or "mlp": a one-hidden-layer probe, written as ENCODER+mlp
# hidden = 128                    # the mlp head's hidden width

[score]
reference = "auto"                # an encoder, "median", or "auto" (the registry's reference)
weights = ["1/3", "1/3", "1/3"]   # dominance, balance, worst axis
bootstrap = 1000
# bootstrap_unit = "both"         # both (seeds and test images, paired), seed or image
# seed = 0
# crs_version = "2"               # or "1": the score as docs/crs-v1.md defined it

[report]
enabled = true
# out = "crs-demo/report"         # default RESULTS/report
'''
