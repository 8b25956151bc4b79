"""The settings' value checks and forms: each check raises ``Bad`` for a value of the wrong type or out of
range and carries the JSON Schema fragment that says the same thing (``crs run --schema``); ``setting`` makes
one setting's field (help, check, parser, command-line flag)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

from crs.foundations.errors import UserError
from crs.foundations.names import CRS_VERSIONS, SEVERITIES

WEIGHT_TOL = 1e-6  # how far from 1 the CRS weights may sum


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


# Each check carries the JSON Schema fragment that says the same thing (``crs run --schema``).

# Each check carries the JSON Schema fragment that says the same thing (``crs run --schema``).
def _check(schema: dict):
    def mark(fn):
        fn.schema = schema
        return fn
    return mark


def one_of(*allowed: str) -> Callable[[Any], None]:
    words = ", ".join(allowed[:-1]) + " or " + allowed[-1]

    @_check({"enum": list(allowed)})
    def check(v):
        if v not in allowed:
            raise Bad(f"must be {words}, not {v!r} (one of {', '.join(map(repr, allowed))})")
    return check


def at_least(lo: int, words: str = "") -> Callable[[Any], None]:
    @_check({"minimum": lo})
    def check(v):
        if not v >= lo:
            raise Bad(f"must be {words or f'at least {lo:g}'}, not {v!r}")
    return check


@_check({"exclusiveMinimum": 0})
def check_positive(v):
    if not (v > 0 and math.isfinite(v)):
        raise Bad(f"must be positive (a finite number above 0), not {v!r}")


@_check({"minItems": 1, "items": {"enum": list(SEVERITIES)}})
def check_severities(v):
    if not v or any(s not in SEVERITIES for s in v):
        raise Bad(f"must be a non-empty list of integers 1..5, not {list(v)!r}")


@_check({"minItems": 1, "items": {"exclusiveMinimum": 0, "maximum": 1}, "contains": {"const": 1}})
def check_fractions(v):
    if not v or any(not 0 < f <= 1 for f in v):
        raise Bad(f"must be a non-empty list of numbers in (0, 1], not {list(v)!r}")
    if 1.0 not in v:
        raise Bad(f"must include 1 (the full-label probe defines D, C and R), not {list(v)!r}")


@_check({"minItems": 1, "items": {"exclusiveMinimum": 0}})
def check_l2(v):
    if not v:
        raise Bad("must name at least one value")
    if any(not (x > 0 and math.isfinite(x)) for x in v):
        raise Bad(f"values must be positive numbers, not {list(v)!r}")


@_check({"exclusiveMinimum": 0, "exclusiveMaximum": 1})
def check_tol(v):
    if not 0 < v < 1:
        raise Bad(f"must lie in (0, 1), not {v!r}")


@_check({"minItems": 1})
def non_empty(v):
    if not v:
        raise Bad("must name at least one")


@_check({"items": {"type": "string", "minLength": 1}, "uniqueItems": True})
def non_empty_names(v):
    bad = [x for x in v if not isinstance(x, str) or not x]
    if bad:
        raise Bad(f"must be non-empty names, not {bad[0]!r}")
    if len(set(v)) < len(v):
        raise Bad(f"names {next(x for x in v if list(v).count(x) > 1)!r} twice")


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


def check_weights(raw):
    """Three non-negative numbers summing to 1."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 3:
        raise Bad(f"must be three numbers [dominance, balance, worst], e.g. [\"1/3\", \"1/3\", \"1/3\"], not {raw!r}")
    vals = tuple(_fraction(x) for x in raw)
    if not all(math.isfinite(v) and v >= 0 for v in vals) or abs(sum(vals) - 1) > WEIGHT_TOL:
        raise Bad(f"must be non-negative and sum to 1, not {raw!r}")
    return vals


check_weights.schema = {"type": "array", "minItems": 3, "maxItems": 3,
                   "items": {"anyOf": [{"type": "number", "minimum": 0},
                                       {"type": "string", "pattern": r"^\s*[0-9.eE+-]+(\s*/\s*[0-9.eE+-]+)?\s*$"}]}}


def check_crs_version(raw):
    """A CRS version, as the string crs records ("1", "2"); a whole number is taken too (TOML `crs_version = 1`)."""
    text = str(int(raw)) if isinstance(raw, (int, float)) and not isinstance(raw, bool) and float(raw).is_integer() \
        else str(raw).strip()
    if text not in CRS_VERSIONS:
        raise Bad(f"must be one of the CRS versions {', '.join(CRS_VERSIONS)} (docs/crs-v1.md, docs/crs-v2.md), "
                  f"not {raw!r}")
    return text


check_crs_version.schema = {"anyOf": [{"type": "string", "enum": list(CRS_VERSIONS)},
                                 {"type": "integer", "enum": [int(v) for v in CRS_VERSIONS]}]}


ENCODER_SETS = ("demo", "pretrained", "general", "medical", "specialty")


@_check({"anyOf": [{"enum": list(ENCODER_SETS)}, {"type": "array", "items": {"enum": list(ENCODER_SETS)}}]})
def check_encoder_sets(v):
    bad = [x for x in v if x not in ENCODER_SETS]
    if bad:
        raise Bad(f"must name sets among {', '.join(ENCODER_SETS)}, not {bad[0]!r}")


def convert_sets(v) -> tuple[str, ...]:
    """A set name or a list of them (TOML ``set = "medical"`` or ``set = ["general", "medical"]``)."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        raise Bad(f"must be a set name or a list of them ({', '.join(ENCODER_SETS)}), not {v!r}")
    return tuple(dict.fromkeys(items))


@_check({"type": "object", "additionalProperties": {"type": "string"}})
def check_revisions(v):
    for name, rev in v.items():
        if not rev or any(c.isspace() for c in rev):
            raise Bad(f"{name}: a revision is a commit id, branch or tag without spaces, not {rev!r}")


def name_values(v, form: str) -> dict[str, str]:
    """NAME=VALUE strings (the command line) or a TOML table -> {NAME: VALUE}."""
    if isinstance(v, dict):
        if not all(isinstance(x, str) for x in v.values()):
            raise Bad(f"must be a table of strings ({form.replace('=', ' = ')}), not {v!r}")
        return dict(v)
    if not isinstance(v, (list, tuple)):
        raise Bad(f"must be a table of strings ({form.replace('=', ' = ')}), not {toml_kind(v)} {v!r}")
    out = {}
    for item in v:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip() or not value.strip():
            raise Bad(f"must look like {form}, not {item!r}")
        out[name.strip()] = value.strip()
    return out


def comma_numbers(kind: type, sort: bool):
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


def comma_names(text: str) -> tuple[str, ...]:
    """'jpeg,pixelate' -> ('jpeg', 'pixelate'): a list of names typed on the command line as one word."""
    vals = tuple(v.strip() for v in text.split(",") if v.strip())
    if not vals:
        raise Bad("is empty")
    return vals


def comma_weights(text: str):
    parts = text.split(",")
    try:
        vals = tuple(_fraction(p) for p in parts)
    except Bad:
        vals = ()
    if len(vals) != 3:
        raise Bad(f"must be three numbers (dominance,balance,worst), not {text!r}")
    return vals


def setting(help: str, check=None, parse=None, *, flag: str | tuple[str, ...] = (), text=None,
         invert: bool = False, flag_help: str = "", **kw):
    """One setting: ``help``; ``check`` (range); ``parse`` (TOML value -> value); ``flag`` its command-line
    option (a tuple: the flag and its short form); ``text`` parses the option's text where the command
    line types a list as one comma-separated word; ``invert``: a --no-X flag that sets False, with
    ``flag_help`` saying what the flag does."""
    flags = (flag,) if isinstance(flag, str) else tuple(flag)
    return field(metadata={"help": help, "check": check, "parse": parse, "flags": flags, "text": text,
                           "invert": invert, "flag_help": flag_help}, **kw)


def toml_kind(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)
