"""The ``crs run`` configuration: one TOML file for a whole benchmark.

A typed schema of frozen dataclasses, parsed and checked by pure functions: ``parse``
(text -> Config), ``to_toml`` (Config -> text; ``parse(to_toml(c)) == c``), ``locate``
(the line a key is on; tomllib gives no line numbers, so the text is scanned) and
``settings_hash``. Every error names the key, its line and what to write instead.
Nothing here imports the stages, so the checks are instant.
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

# the stages' defaults, restated so that reading a config imports neither jax nor torch
# (tests/cli/test_config.py checks they agree with crs.probe.run and crs.extract.perturb)
DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
DEFAULT_L2 = (1e-3, 1e-2, 1e-1, 1.0)
SEVERITIES = (1, 2, 3, 4, 5)
WEIGHT_TOL = 1e-6


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the key and its line."""

    def __init__(self, message: str, key: str = "", line: int | None = None, source: str = ""):
        self.key, self.line, self.source = key, line, source
        where = source or "config"
        if line is not None:
            where += f" line {line}"
        super().__init__(f"{where}: {key + ': ' if key else ''}{message}")


class _Bad(Exception):
    """A value of the wrong type or out of range (the caller adds key and line)."""


# ------------------------------------------------------------------ value checks
def _choices(*allowed: str) -> Callable[[Any], None]:
    def check(v):
        if v not in allowed:
            raise _Bad(f"must be one of {', '.join(map(repr, allowed))}, not {v!r}")
    return check


def _at_least(lo: float) -> Callable[[Any], None]:
    def check(v):
        if not v >= lo:
            raise _Bad(f"must be at least {lo:g}, not {v!r}")
    return check


def _positive(v):
    if not (v > 0 and math.isfinite(v)):
        raise _Bad(f"must be a positive number, not {v!r}")


def _severities(v):
    if not v or any(s not in SEVERITIES for s in v):
        raise _Bad(f"must be a non-empty list of integers 1..5, not {list(v)!r}")


def _fractions(v):
    if not v or any(not 0 < f <= 1 for f in v):
        raise _Bad(f"must be a non-empty list of numbers in (0, 1], not {list(v)!r}")
    if 1.0 not in v:
        raise _Bad(f"must include 1 (the full-label probe defines D, C and R), not {list(v)!r}")


def _l2(v):
    if not v or any(not (x > 0 and math.isfinite(x)) for x in v):
        raise _Bad(f"must be a non-empty list of positive numbers, not {list(v)!r}")


def _tol(v):
    if not 0 < v < 1:
        raise _Bad(f"must lie in (0, 1), not {v!r}")


def _non_empty(v):
    if not v:
        raise _Bad("must name at least one")


def _weights(raw):
    """Three non-negative numbers summing to 1; "1/3"-style strings allowed (TOML has no fractions)."""
    if not isinstance(raw, list) or len(raw) != 3:
        raise _Bad(f"must be three numbers [dominance, balance, worst], e.g. [\"1/3\", \"1/3\", \"1/3\"], not {raw!r}")
    vals = []
    for x in raw:
        if isinstance(x, bool):
            raise _Bad(f"must be numbers or fractions such as \"1/3\", not {x!r}")
        if isinstance(x, (int, float)):
            vals.append(float(x))
            continue
        if not isinstance(x, str):
            raise _Bad(f"must be numbers or fractions such as \"1/3\", not {x!r}")
        try:
            a, _, b = x.partition("/")
            vals.append(float(a) / float(b) if b else float(a))
        except (ValueError, ZeroDivisionError):
            raise _Bad(f"{x!r} is not a number or a fraction such as \"1/3\"") from None
    if not all(math.isfinite(v) and v >= 0 for v in vals) or abs(sum(vals) - 1) > WEIGHT_TOL:
        raise _Bad(f"must be non-negative and sum to 1, not {raw!r}")
    return tuple(vals)


def _opt(help: str, check=None, parse=None, **kw):
    return field(metadata={"help": help, "check": check, "parse": parse}, **kw)


# ------------------------------------------------------------------ schema
@dataclass(frozen=True)
class Encoders:
    names: tuple[str, ...] = _opt("registry names (`crs encoders`), timm:NAME or hf:ORG/NAME", _non_empty,
                                  default=("demo-resnet", "demo-vit", "demo-stats"))
    file: str | None = _opt("TOML file of extra encoder records ([[encoder]] tables)", default=None)
    trust_remote_code: bool = _opt("allow a hub model's own Python code to run", default=False)


@dataclass(frozen=True)
class Datasets:
    names: tuple[str, ...] = _opt("datasets probed (`crs datasets`); shift targets come with them", _non_empty,
                                  default=("demo_derm", "demo_fundus", "demo_cxr"))
    roots: dict[str, str] = _opt("a real dataset's folder, NAME = DIR", default_factory=dict)
    size: float = _opt("scale of the built-in datasets", _positive, default=1.0)
    split_seed: int = _opt("seed of the train/val/test split of file-based datasets", default=0)
    uncertain: str = _opt("uncertain chest X-ray labels", _choices("ignore", "ones", "zeros"), default="ignore")
    findings: str = _opt("chest X-ray findings: competition, all, or a comma-separated list", default="competition")
    image_root: str | None = _opt("folder the paths of a csv:PATH dataset are relative to", default=None)
    modality: str | None = _opt("a csv:PATH dataset's modality",
                                _choices("dermatology", "ophthalmology", "radiology"), default=None)
    shift_target: str | None = _opt("a csv:PATH dataset's shift target", default=None)


@dataclass(frozen=True)
class Extract:
    perturb: bool = _opt("embed the test split under the modality's perturbation suite", default=True)
    severities: tuple[int, ...] = _opt("perturbation severities (1..5)", _severities, default=SEVERITIES)
    chunk: int = _opt("store chunk length in images (the resume unit)", _at_least(1), default=256)
    batch: int = _opt("images per forward pass", _at_least(1), default=64)
    device: str = _opt("torch device, or auto (cuda if available)", default="auto")
    dtype: str = _opt("embedding dtype in the store", _choices("float16", "float32"), default="float16")
    precision: str = _opt("auto, bf16 or float32", _choices("auto", "bf16", "float32"), default="auto")
    workers: int = _opt("DataLoader worker processes decoding images ahead", _at_least(0), default=0)
    strict: bool = _opt("stop at the first image that cannot be decoded", default=False)


@dataclass(frozen=True)
class Probe:
    seeds: int = _opt("number of probe seeds (0..seeds-1)", _at_least(1), default=5)
    fractions: tuple[float, ...] = _opt("label fractions (must include 1)", _fractions, default=DEFAULT_FRACTIONS)
    l2: tuple[float, ...] = _opt("L2 grid", _l2, default=DEFAULT_L2)
    select_by: str = _opt("choose L2 by validation loss or auroc", _choices("loss", "auroc"), default="loss")
    tol: float = _opt("gradient tolerance each probe is solved to", _tol, default=1e-4)


@dataclass(frozen=True)
class Score:
    reference: str = _opt("reference encoder, 'median', or 'auto' (the registry's)", default="auto")
    weights: tuple[float, float, float] = _opt("CRS weights [dominance, balance, worst]", parse=_weights,
                                               default=(1 / 3, 1 / 3, 1 / 3))
    bootstrap: int = _opt("bootstrap replicates", _at_least(1), default=1000)
    bootstrap_unit: str = _opt("resample seed, image or both", _choices("seed", "image", "both"), default="seed")
    seed: int = _opt("bootstrap seed", default=0)


@dataclass(frozen=True)
class Report:
    enabled: bool = _opt("write the HTML report (crs report)", default=True)
    out: str | None = _opt("report folder (default RESULTS/report)", default=None)


@dataclass(frozen=True)
class Config:
    store: str = _opt("embedding store path or fsspec URL", default="./crs-store.zarr")
    results: str = _opt("folder for run records, scores and the report", default="./crs-results")
    encoders: Encoders = field(default_factory=Encoders)
    datasets: Datasets = field(default_factory=Datasets)
    extract: Extract = field(default_factory=Extract)
    probe: Probe = field(default_factory=Probe)
    score: Score = field(default_factory=Score)
    report: Report = field(default_factory=Report)


SECTIONS = ("encoders", "datasets", "extract", "probe", "score", "report")


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
    """A TOML value as the field's type, or _Bad. Integers count as numbers; bools never count as numbers."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # X | None: TOML has no null, so a present key is an X
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, inner)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        if not isinstance(value, list):
            raise _Bad(f"must be {_type_name(tp)}, not {_toml_kind(value)} {value!r}")
        try:
            return tuple(_convert(v, inner) for v in value)
        except _Bad:
            raise _Bad(f"must be {_type_name(tp)}, not {value!r}") from None
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _Bad(f"must be {_type_name(tp)} (NAME = \"DIR\"), not {value!r}")
        return dict(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and type(value) is tp:
        return value
    raise _Bad(f"must be {_type_name(tp)}, not {_toml_kind(value)} {value!r}")


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
        except _Bad as exc:
            raise ConfigError(str(exc), ".".join(path), locate(text, path), source) from None
        kwargs[key] = v
    return cls(**kwargs)


def parse(text: str, source: str = "") -> Config:
    """TOML text -> Config; ConfigError naming the key and line for anything unknown or ill-typed."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    return _build(Config, data, (), text, source)


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
        encoders=dataclasses.replace(cfg.encoders, file=fix(cfg.encoders.file)),
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
        rest = line[k.end():]
        for q in ('"""', "'''"):
            if rest.count(q) % 2 == 1:
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
    lines = [f"{k} = {_toml_value(getattr(cfg, k))}" for k in ("store", "results")]
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
# file = "my-encoders.toml"       # extra [[encoder]] records
# trust_remote_code = false

[datasets]
names = ["demo_derm", "demo_fundus", "demo_cxr"]    # `crs datasets`; shift targets come with them
size = 1.0                        # scale of the built-in datasets
# split_seed = 0                  # split of file-based datasets without an official one
# uncertain = "ignore"            # chest X-ray uncertain labels: ignore, ones or zeros
# findings = "competition"        # chest X-ray findings: competition, all, or "A,B,C"
# modality = "dermatology"        # a csv:PATH dataset's modality
# image_root = "images"           # a csv:PATH dataset's image folder
# shift_target = "mimic-cxr"      # a csv:PATH dataset's shift target

# [datasets.roots]                # real datasets: the folder each ships in
# isic2019 = "/data/ISIC2019"
# chexpert = "/data/CheXpert-v1.0-small"
# mimic-cxr = "/data/mimic-cxr-jpg/2.0.0"

[extract]
perturb = true                    # the test split under the modality's perturbation suite
severities = [2, 4]               # the demo's two; [1, 2, 3, 4, 5] for the full suites
# chunk = 256                     # store chunk length in images (the resume unit)
# batch = 64
# device = "auto"                 # cuda if available, else cpu
# dtype = "float16"
# precision = "auto"              # bf16 autocast on CUDA, float32 on CPU
# workers = 0
# strict = false

[probe]
seeds = 5
fractions = [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0]
l2 = [0.001, 0.01, 0.1, 1.0]
# select_by = "loss"              # or "auroc"
# tol = 1e-4

[score]
reference = "auto"                # an encoder, "median", or "auto" (the registry's reference)
weights = ["1/3", "1/3", "1/3"]   # dominance, balance, worst axis
bootstrap = 1000
# bootstrap_unit = "seed"         # seed, image or both
# seed = 0

[report]
enabled = true
# out = "crs-demo/report"         # default RESULTS/report
'''
