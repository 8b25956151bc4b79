"""The score's outputs as one set: written whole, read whole, never a mix of two runs.

``crs score`` writes every table (Parquet and CSV) and ``scores.json`` into a fresh
hidden folder beside ``RESULTS/scores``, then swaps it in by renames:

    RESULTS/.scores.next-G/   written in full, scores.json last
    RESULTS/scores        ->  RESULTS/.scores.old-G   (rename)
    RESULTS/.scores.next-G -> RESULTS/scores          (rename)
    RESULTS/.scores.old-G     removed

G is the set's generation id (UTC time + random hex). It is in ``scores.json``
(``generation``, with ``tables``, the file names of the set) and in every Parquet table's
metadata (key ``crs_scores_generation``), so a table copied in from another run is told
apart. Each table's metadata also holds a digest of its values (``crs_scores_digest``) and
scores.json one of its own content (``digest``): a value changed by hand is refused on read.
Whatever the kill point, one complete set is there: ``RESULTS/scores`` itself, or,
between the two renames, the complete ``.scores.next-G`` (new) or ``.scores.old-G`` (old).
Readers take ``scores_folder``; the next writer settles such leftovers first
(``settle``: a complete new set is renamed into place, everything else is removed), so
nothing half-written stays for a later stage to trip on.

Test-only hook: with the environment variable ``CRS_TEST_KILL_SCORES_AT`` set to one of
``KILL_POINTS`` (or ``file:N``, after the N-th file written), the writer sends itself
SIGKILL at that point; the kill tests use it to stop a write exactly there.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import polars as pl
from filelock import FileLock

from crs.foundations.errors import UserError, writing_to
from crs.foundations.files import encode, put, write_frame
from crs.foundations.records import frame_digest

SCORES_DIR = "scores"
SCORES_JSON = "scores.json"
GENERATION_KEY = "crs_scores_generation"
DIGEST_KEY = "crs_scores_digest"  # Parquet metadata: crs.foundations.records.frame_digest of the table as written
DOC_DIGEST = "digest"  # scores.json: doc_digest of the rest of the document
KILL_ENV = "CRS_TEST_KILL_SCORES_AT"
KILL_POINTS = ("staged", "old-moved", "new-moved", "done")


class MissingScores(UserError, FileNotFoundError):
    """RESULTS holds no complete score: ``crs score`` has not been run there."""


class MixedScores(UserError):
    """The score files under RESULTS/scores do not all come from one ``crs score`` run."""


def new_generation() -> str:
    """A generation id: UTC time (sortable) and 8 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def _kill_point(name: str) -> None:
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _siblings(out_dir: Path, kind: str) -> list[Path]:
    """Complete-or-not hidden folders ``.NAME.KIND-G`` beside ``out_dir``, oldest generation first."""
    parent = out_dir.parent
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.glob(f".{out_dir.name}.{kind}-*") if p.is_dir())


def _complete(folder: Path) -> bool:
    return (folder / SCORES_JSON).is_file()


def scores_folder(results: Path) -> Path:
    """The folder holding the newest complete score set under ``results``, without changing anything.

    ``RESULTS/scores`` when it is complete; after a write killed between its two renames,
    the complete new set (else the old one) in its hidden folder; else ``RESULTS/scores``
    (which ``read_scores_json`` then reports missing)."""
    out_dir = Path(results) / SCORES_DIR
    if _complete(out_dir):
        return out_dir
    for kind in ("next", "old"):
        done = [p for p in _siblings(out_dir, kind) if _complete(p)]
        if done:
            return done[-1]
    return out_dir


def settle(out_dir: Path) -> None:
    """Finish or undo a write that was killed: leave ``out_dir`` complete (if any set was) and no leftovers."""
    out_dir = Path(out_dir)
    if not _complete(out_dir):
        for kind in ("next", "old"):
            done = [p for p in _siblings(out_dir, kind) if _complete(p)]
            if done:
                if out_dir.exists():
                    shutil.rmtree(out_dir)
                os.rename(done[-1], out_dir)
                break
    for kind in ("next", "old"):
        for p in _siblings(out_dir, kind):
            shutil.rmtree(p, ignore_errors=True)


def write_set(out_dir: Path, tables: Mapping[str, pl.DataFrame], doc: dict, generation: str) -> None:
    """Write ``tables`` (name -> frame, as NAME.parquet and NAME.csv) and ``doc`` as scores.json, as one set.

    ``doc`` must carry ``generation``; scores.json is written last inside the new folder,
    then the folder is swapped in (module docstring)."""
    out_dir = Path(out_dir)
    if doc.get("generation") != generation:
        raise ValueError(f"scores.json's generation {doc.get('generation')!r} is not the set's {generation!r}")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file, not a folder; move it away and re-run `crs score`")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(out_dir), writing_to(out_dir.parent):
        settle(out_dir)
        _write_and_swap(out_dir, tables, doc, generation)


def _write_and_swap(out_dir: Path, tables: Mapping[str, pl.DataFrame], doc: dict, generation: str) -> None:
    stage = out_dir.parent / f".{out_dir.name}.next-{generation}"
    stage.mkdir()
    try:
        n = 0
        for name, table in tables.items():
            put(stage / f"{name}.parquet", encode(table, "parquet", _table_metadata(table, generation)))
            put(stage / f"{name}.csv", encode(table, "csv"))
            n += 1
            _kill_point(f"file:{n}")
        text = json.dumps({**doc, DOC_DIGEST: doc_digest(doc)}, indent=2, allow_nan=False) + "\n"
        put(stage / SCORES_JSON, text.encode("utf-8"))  # each file flushed to disk: the renames publish them whole
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    _kill_point("staged")
    _swap(stage, out_dir, generation)
    _kill_point("done")


def writer_lock(out_dir: Path):
    """Two runs writing one folder (scores, a report) write one after the other (held for the write only)."""
    return FileLock(str(out_dir.parent / f".{out_dir.name}.lock"), timeout=120)


def _swap(stage: Path, out_dir: Path, generation: str) -> None:
    if not out_dir.exists():
        os.rename(stage, out_dir)
        _kill_point("new-moved")
        return
    old = out_dir.parent / f".{out_dir.name}.old-{generation}"
    os.rename(out_dir, old)
    _kill_point("old-moved")
    os.rename(stage, out_dir)
    _kill_point("new-moved")
    shutil.rmtree(old, ignore_errors=True)


def write_table(path: Path, table: pl.DataFrame, generation: str) -> None:
    """One Parquet table outside the set's folder (the metric table), marked with the set's generation."""
    write_frame(Path(path), table, "parquet", _table_metadata(table, generation))


def _table_metadata(table: pl.DataFrame, generation: str) -> dict[str, str]:
    return {GENERATION_KEY: generation, DIGEST_KEY: frame_digest(table)}


def doc_digest(doc: dict) -> str:
    """sha256 of scores.json's content without its own digest (keys sorted, so the layout does not count)."""
    rest = {k: v for k, v in doc.items() if k != DOC_DIGEST}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, allow_nan=False).encode()).hexdigest()


def altered(table: pl.DataFrame, path: Path) -> bool:
    """Whether a table's values differ from the digest its writer recorded; a table that records none is
    altered too (every table crs score writes records one)."""
    return pl.read_parquet_metadata(path).get(DIGEST_KEY) != frame_digest(table)


def generation_of(path: Path) -> str | None:
    """The score generation in a Parquet table's metadata, or None when it has none."""
    return pl.read_parquet_metadata(path).get(GENERATION_KEY)


def read_scores_json(folder: Path, results: Path) -> dict:
    """scores.json of a set; MissingScores when absent, a UserError when damaged (both name `crs score`)."""
    meta = Path(folder) / SCORES_JSON
    if not meta.is_file():
        raise MissingScores(
            f"no scores under {Path(results) / SCORES_DIR} (scores.json missing); "
            f"run `crs score --results {results}` first"
        )
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{meta} is damaged ({exc}); re-run `crs score --results {results}`") from exc
    if not isinstance(doc, dict):
        raise UserError(f"{meta} is not a scores.json (not a JSON object); re-run `crs score --results {results}`")
    if DOC_DIGEST not in doc:
        raise UserError(f"{meta} records no digest of its values ({DOC_DIGEST!r}), which every scores.json of this crs "
                        f"holds (it was written by an older development version, or altered); re-run "
                        f"`crs score --results {results}`")
    if doc[DOC_DIGEST] != doc_digest(doc):
        raise UserError(f"{meta}: its values are not those crs score wrote (their digest differs: the file was "
                        f"altered or damaged); re-run `crs score --results {results}`")
    return doc


def read_tables(folder: Path, doc: dict, names: Callable[[], list[str]] | list[str], results: Path) -> dict:
    """The set's tables among ``names`` (name -> DataFrame), checked to be the set scores.json names.

    Refuses with MixedScores (exit 2), naming every file that disagrees, when scores.json
    has no generation, a table it lists is missing, or a
    table's generation is not scores.json's (a table from another run)."""
    folder = Path(folder)
    generation = doc.get("generation")
    fix = f"re-run `crs score --results {results}` to write a complete set"
    if not generation:
        raise MixedScores(
            f"{folder / SCORES_JSON} has no generation id: it was written by a crs score that did not mark "
            f"its tables as one set, so they may come from different runs; {fix}"
        )
    listed = set(doc.get("tables", []))
    bad: list[str] = []
    out = {}
    for name in names:
        path = folder / f"{name}.parquet"
        if not path.is_file():
            if name in listed:
                bad.append(f"{path.name} (listed in scores.json, missing)")
            continue
        try:
            got = generation_of(path)
            table = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as exc:  # a damaged Parquet file
            bad.append(f"{path.name} (unreadable: {exc})")
            continue
        if got != generation or name not in listed:
            bad.append(f"{path.name} (generation {got}, scores.json {generation})")
            continue
        if altered(table, path):
            bad.append(f"{path.name} (its values are not those crs score wrote, or it records no digest: altered or "
                       "damaged)")
            continue
        out[name] = table
    if bad:
        raise MixedScores(
            f"the score files in {folder} do not come from one `crs score` run: {'; '.join(bad)}; {fix}"
        )
    return out
