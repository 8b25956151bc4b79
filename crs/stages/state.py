"""What ``crs run`` remembers between runs (``RESULTS/run_state.json``) and what each stage reports doing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from crs.foundations.files import atomic_write

STATE_FILE = "run_state.json"


@dataclass
class Stage:
    """What one stage did: items computed, items found current, its output and time."""

    name: str
    out: str = ""
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    enabled: bool = True
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["seconds"] = round(self.seconds, 2)
        return d


def read_state(results: Path) -> dict:
    try:
        state = json.loads((Path(results) / STATE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(results: Path, state: dict) -> None:
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"
    atomic_write(Path(results) / STATE_FILE, lambda p: p.write_text(text, encoding="utf-8"))


def file_digest(path: Path) -> str | None:
    """sha256 of the file's bytes (16 hex digits), or None where there is no such file."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return h.hexdigest()[:16]


class State:
    """RESULTS/run_state.json: what each stage last computed, read at the start and written after each step."""

    def __init__(self, results: Path, force: bool):
        self.results = results
        self.old = {} if force else read_state(results)
        self.new = {"probe": dict(self.old.get("probe", {}))}

    def set(self, key: str, value) -> None:
        self.new[key] = value
        write_state(self.results, {**self.old, **self.new})
