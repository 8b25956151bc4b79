"""The TOML file: ``parse`` (text -> Config; every error names the key, its line and what to write
instead), ``load``, ``resolve`` (paths relative to the file), ``locate`` (the line a key is on: tomllib
gives no line numbers, so the text is scanned) and ``to_toml`` (Config -> text; ``parse(to_toml(c)) == c``)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import types
import typing
from pathlib import Path

from crs.foundations.config.checks import Bad, ConfigError, toml_kind
from crs.foundations.config.schema import SECTIONS, Config, cross_check, with_overrides


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
            raise Bad(f"must be {_type_name(tp)}, not {toml_kind(value)} {value!r}")
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
    raise Bad(f"must be {_type_name(tp)}, not {toml_kind(value)} {value!r}")


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
                raise ConfigError(f"must be a table ([{key}]), not {toml_kind(value)} {value!r}", key,
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
