"""The JSON Schema of a config file (``crs run --schema``, for editors), made from the schema's fields."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from crs.foundations.config.schema import settings


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
