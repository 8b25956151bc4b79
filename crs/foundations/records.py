"""The run-record table: the contract between ``crs probe`` and ``crs score``.

One row per (encoder, dataset, seed, fraction, condition). ``probe`` writes it as
Parquet (one file per encoder and dataset under ``RESULTS/run_records/``);
``scoring`` reads every file there. Column names and meaning are stable; add
columns, never rename them.

A probe run of one (encoder, dataset) is one *generation*: a random id written into
every piece it leaves (the stored predictions' attribute ``generation``, and the
Parquet key-value metadata ``crs:generation`` of its probe selection and run records).
The run records are written last, so they are the commit point: a run stopped before
them leaves the old run records, whose generation the new pieces do not carry.
``check_pair`` compares the pieces a reader is about to use and refuses a mix.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from crs.foundations.errors import UserError
from crs.foundations.files import write_frame

# name -> (polars dtype name, meaning)
COLUMNS: dict[str, tuple[str, str]] = {
    "encoder": ("String", "encoder key, e.g. 'demo-resnet'"),
    "dataset": ("String", "dataset the probe was trained on"),
    "task": ("String", "'multiclass' or 'multilabel'"),
    "seed": ("Int64", "probe seed: draws the label subsets (at fraction 1 every seed sees every label)"),
    "fraction": ("Float64", "share of the training split whose labels the probe saw, in (0, 1]"),
    "condition": ("String", "'clean', 'FAMILY@SEVERITY' or 'shift:DATASET'"),
    "auroc": ("Float64", "macro one-vs-rest AUROC (multiclass) or mean per-label AUROC (multilabel)"),
    "ece": ("Float64", "expected calibration error, 15 equal-width bins, top-label"),
    "brier": ("Float64", "Brier score (sum over classes; mean over labels for multilabel)"),
    "nll": ("Float64", "negative log-likelihood per image (mean over labels for multilabel)"),
    "accuracy": ("Float64", "top-1 accuracy (multiclass) or mean per-label accuracy at 0.5"),
    "l2": ("Float64", "L2 strength chosen on the validation split"),
    "n_train": ("Int64", "number of labelled training images the probe saw"),
    "n_eval": ("Int64", "number of images the row's metrics were computed on"),
    "classes_missing": ("Int64", "classes (or labels) with no positive example in the label subset"),
    "converged": ("Boolean", "whether the solver met its gradient tolerance"),
    "iterations": ("Int64", "solver iterations used"),
    "tie_share": ("Float64", "share of the counted (image, class) scores that equal another image's score for "
                             "the same class (crs.probe.run.tie_share); near 1, the AUROC rests on ties"),
    "features_left_out": ("Int64", "features constant on the training split, left out of the probe "
                                   "(crs.probe.run.live_features); the same for every row of a pair"),
    "max_scaled": ("Float64", "the largest standardised feature value |z| of any counted image of the condition "
                              "(crs.probe.run.feature_scales); far above the clean test's, a few features decide "
                              "the predictions there"),
}

RUN_RECORDS_DIR = "run_records"
SELECTION_DIR = "probe_selection"
GENERATION = "crs:generation"  # Parquet key-value metadata: the probe run that wrote the file
PROVENANCE = "crs_provenance"  # run-record Parquet metadata: json of crs.foundations.provenance.collect(probe settings)
PREDICTION_GENERATION = "generation"  # the same id in the stored predictions' attributes
DIGEST = "crs:digest"  # Parquet key-value metadata: ``frame_digest`` of the table as written
STORE = "crs:store"  # run-record Parquet metadata: the store the probe read, relative to RESULTS where local


# where else a newcomer's results may be: said wherever a command finds none in the folder it was given
ELSEWHERE = ("pass --results with the folder that holds them (`crs demo` keeps its own in crs-demo/results, or "
             "OUT/results with --out OUT)")


class MissingRunRecords(UserError, FileNotFoundError):
    """RESULTS holds no run records: the probe has not been run there."""


class MixedGeneration(UserError):
    """The pieces of one (encoder, dataset)'s probe output come from different probe runs."""


class DamagedRecords(UserError):
    """A run-record file whose values are not those its probe run wrote (or that does not read)."""


class MixedSettings(UserError):
    """The encoders compared on one dataset were probed with different settings."""


def records_dir(results) -> Path:
    return Path(results) / RUN_RECORDS_DIR


def file_name(encoder: str, dataset: str) -> str:
    """The file name of a pair's run records and of its probe selection."""
    return f"{encoder}__{dataset}.parquet"


def path(results, encoder: str, dataset: str) -> Path:
    return records_dir(results) / file_name(encoder, dataset)


def selection_path(results, encoder: str, dataset: str) -> Path:
    return Path(results) / SELECTION_DIR / file_name(encoder, dataset)


def read(results):
    """Every run-record file under ``RESULTS/run_records`` as one polars DataFrame; MissingRunRecords if none."""
    files = sorted(records_dir(results).glob("*.parquet"))
    if not files:
        raise MissingRunRecords(f"no run records under {records_dir(results)}; run `crs probe --all` first, or "
                                f"{ELSEWHERE}")
    return pl.concat([read_checked(f) for f in files], how="diagonal_relaxed")


def read_checked(target: Path):
    """One run-record file, checked against what its probe run recorded: its digest, its generation and
    every column of ``COLUMNS``. ``DamagedRecords`` (exit 2) naming the file, what is wrong and the probe that
    writes it again; a file that records no digest or no generation (a format no release wrote) is refused so."""
    try:
        frame = pl.read_parquet(target)
        meta = metadata(target)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise DamagedRecords(f"{target} does not read as Parquet ({exc}); write it again with "
                             f"{_repair_for(target)}") from exc
    lacks = [k for k in (DIGEST, GENERATION) if k not in meta] + [c for c in COLUMNS if c not in frame.columns]
    if lacks:
        raise DamagedRecords(f"{target} lacks {', '.join(lacks)}, which every run-record file of this crs holds (it "
                             f"was written by an older development version, or altered); write it again with "
                             f"{_repair_for(target)}")
    if meta[DIGEST] != frame_digest(frame):
        raise DamagedRecords(f"{target}: its values are not those its probe run wrote (their digest differs from the "
                             f"recorded one: the file was altered or damaged); write it again with "
                             f"{_repair_for(target)}")
    return frame


def frame_digest(frame) -> str:
    """sha256 of a table's column names, types, null masks and values (numbers as their bytes), whatever
    the Parquet encoding that carried them."""
    h = hashlib.sha256()
    for name in frame.columns:
        col = frame[name]
        h.update(f"{name}\0{col.dtype}\0".encode())
        h.update(col.is_null().to_numpy().tobytes())
        if col.dtype.is_numeric() or col.dtype == pl.Boolean:
            h.update(np.ascontiguousarray(col.fill_null(0).to_numpy()).tobytes())
        else:
            h.update(json.dumps(col.to_list(), default=str).encode())
    return h.hexdigest()


def write_parquet(target: Path, frame, generation: str, metadata: Mapping[str, str] | None = None) -> None:
    """``frame`` to ``target`` whole (``crs.foundations.files.write_frame``), its metadata naming ``generation``."""
    meta = {**(metadata or {}), GENERATION: generation, DIGEST: frame_digest(frame)}
    write_frame(Path(target), frame, "parquet", meta)


def metadata(target: Path) -> dict[str, str]:
    """The Parquet key-value metadata of ``target`` ({} for a file without, or no file)."""
    target = Path(target)
    if not target.exists():
        return {}
    try:
        return dict(pl.read_parquet_metadata(target) or {})
    except Exception as exc:  # noqa: BLE001 - polars raises its own ComputeError for a damaged file
        raise UserError(f"{target} is not a readable Parquet file ({exc}); write it again with `crs probe`") from exc


def generation(target: Path) -> str | None:
    """The probe run that wrote ``target`` (a run-record or selection file), or None."""
    return metadata(target).get(GENERATION)


def _repair(results, encoder: str, dataset: str) -> str:
    """The `crs probe` that writes the pair's probe outputs again, as its run records say they were made."""
    return _repair_for(path(results, encoder, dataset))


def _repair_for(target: Path) -> str:
    """The `crs probe` that writes a run-record file again: its pair, results folder, and the store and
    probe settings its metadata recorded (where they read)."""
    encoder, dataset = _pair_of(target)
    results = Path(target).parent.parent
    try:
        meta = metadata(target)
        settings = dict(json.loads(meta[PROVENANCE])["settings"]) if PROVENANCE in meta else {}
    except (UserError, ValueError, KeyError, TypeError):
        meta, settings = {}, {}
    store = _beside(results, meta[STORE]) if meta.get(STORE) else None
    return probe_command(results, encoder, dataset, store, settings)


def probe_command(results, encoder: str, dataset: str, store: str | None = None, settings: dict | None = None) -> str:
    """`crs probe` of one (result name, dataset) pair into ``results``, runnable as printed: the probe
    ``settings`` (else the head the name says), the store where known (without it the command reads the
    default store, which a results folder kept elsewhere does not sit beside), each word quoted for a shell."""
    base, _, head = encoder.partition("+")
    words = ["crs", "probe", "--encoder", base, "--dataset", dataset]
    words += _flags(settings) if settings else ["--head", head] if head else []
    words += (["--store", str(store)] if store else []) + ["--results", str(results)]
    return f"`{shlex.join(words)}`"


def recorded_store(results) -> str | None:
    """The store the run records under ``results`` say their probes read (as a command names it), where they all
    name the same one; None otherwise."""
    named = set()
    for f in sorted(records_dir(Path(results)).glob("*.parquet")):
        try:
            store = metadata(f).get(STORE)
        except (UserError, ValueError, OSError):
            continue
        if store:
            named.add(_beside(Path(results), store))
    return named.pop() if len(named) == 1 else None


def _beside(results: Path, store: str) -> str:
    """A recorded store path (relative to the results folder, or absolute, or a URL) as a command names it."""
    if "://" in store or os.path.isabs(store):
        return store
    return os.path.normpath(os.path.join(results, store))


def check_pair(results, encoder: str, dataset: str,
               predictions: Mapping[str, Mapping] | None = None) -> str | None:
    """Refuse (``MixedGeneration``, exit 2) unless every piece of the pair's probe output is one run's.

    ``predictions`` maps each condition a reader uses to the attributes of its stored
    predictions (``Store.read_predictions``' second value). The run records, the probe
    selection (where present) and each of those must name the same generation; run records
    that name none are refused (``DamagedRecords``, as ``read_checked`` does). Returns the generation.
    """
    results = Path(results)
    expected = generation(path(results, encoder, dataset))
    if expected is None:
        target = path(results, encoder, dataset)
        raise DamagedRecords(f"{target} records no probe generation ({GENERATION}), which every run-record file of "
                             f"this crs holds; write it again with {_repair_for(target)}")
    found = {"probe selection": (generation(selection_path(results, encoder, dataset))
                                 if selection_path(results, encoder, dataset).exists() else expected)}
    for condition, attrs in (predictions or {}).items():
        found[f"predictions {condition}"] = (attrs or {}).get(PREDICTION_GENERATION)
    odd = {k: v for k, v in found.items() if v != expected}
    if odd:
        listed = ", ".join(f"{k} ({v or 'none'})" for k, v in sorted(odd.items()))
        raise MixedGeneration(
            f"the probe outputs of {encoder} × {dataset} come from different runs of `crs probe` (one was "
            f"stopped while writing them): the run records name generation {expected or 'none'}, but {listed}; "
            f"run {_repair(results, encoder, dataset)} to write them again as one"
        )
    return expected


class LostPredictions(UserError):
    """Stored predictions that a pair's probe run committed (its run records name them) are gone from the store."""


def refuse_lost_predictions(results, encoder: str, dataset: str, conditions, store: str) -> None:
    """Raise ``LostPredictions`` (exit 2) for ``conditions`` of the pair, whose probe run wrote them (its run
    records name a generation) and which the store at ``store`` no longer holds, with the probe that writes
    them again."""
    shown = ", ".join(conditions[:5]) + (f" and {len(conditions) - 5} more" if len(conditions) > 5 else "")
    raise LostPredictions(
        f"the stored predictions of {encoder} × {dataset} under {shown} are not in {store!r}, though the probe "
        f"run that wrote the run records committed them (generation {generation(path(results, encoder, dataset))}):"
        " they were deleted or lost since, and a score without them would rest on other data than the run records. "
        f"To repair: run {_repair_for(path(Path(results), encoder, dataset))} (it writes them again)")


# settings crs probe takes on its command line: (settings key, flag, how its value is written there)
_FLAGS = (("head", "--head", str), ("seeds", "--seeds", len), ("fractions", "--fractions", None),
          ("l2", "--l2", None), ("select_by", "--select-by", str), ("tol", "--tol", None), ("hidden", "--hidden", str))


def probe_settings(target: Path) -> tuple[dict, str]:
    """(the probe settings, when they were recorded) of a run-record file; ``DamagedRecords`` (exit 2) for a
    file that records none."""
    raw = metadata(target).get(PROVENANCE)
    if raw is None:
        what = "records no probe settings" if Path(target).exists() else "is missing, and with it the probe settings"
        raise DamagedRecords(f"{target} {what} ({PROVENANCE}), which every run-record file of this crs holds; write "
                             f"it again with {_repair(target.parent.parent, *_pair_of(target))}")
    try:
        block = json.loads(raw)
        return dict(block["settings"]), str(block.get("created", ""))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{target}: its probe provenance ({PROVENANCE}) does not read ({exc}); write it again with "
                        f"{_repair(target.parent.parent, *_pair_of(target))}") from exc


def _pair_of(target: Path) -> tuple[str, str]:
    encoder, _, dataset = Path(target).stem.partition("__")
    return encoder, dataset


def check_same_settings(results, pairs, store: str | None = None) -> None:
    """Refuse (``MixedSettings``, exit 2) where two encoders compared on one dataset were probed with
    different settings (seeds, fractions, L2 grid, stopping rule, ...) under the same head.

    A ``crs probe --all`` with new settings stopped part-way leaves exactly that: the pairs it reached
    hold the new settings, the others the old, and a score of the mix would compare encoders under
    two protocols with exit 0. ``pairs``: the comparison set's (result name, dataset); a file that records no
    settings is refused (``probe_settings``). The repair named is the newest run's settings."""
    groups: dict[tuple[str, str], dict[str, tuple[dict, str]]] = {}
    for encoder, dataset in pairs:
        found = probe_settings(path(results, encoder, dataset))
        groups.setdefault((str(found[0].get("head")), dataset), {})[encoder] = found
    for (_head, dataset), by_encoder in sorted(groups.items()):
        kinds: dict[str, list[str]] = {}
        for encoder, (settings, _) in sorted(by_encoder.items()):
            kinds.setdefault(_canonical(settings), []).append(encoder)
        if len(kinds) < 2:
            continue
        newest = max(by_encoder.values(), key=lambda found: found[1])[0]
        differ = sorted({k for s, _ in by_encoder.values() for k in s if s.get(k) != newest.get(k)}
                        | {k for s, _ in by_encoder.values() for k in newest if k not in s})
        described = "; ".join(
            f"{', '.join(names)}: " + ", ".join(f"{k} {by_encoder[names[0]][0].get(k)}" for k in differ)
            for names in kinds.values())
        raise MixedSettings(
            f"the encoders compared on {dataset} were probed with different settings ({described}); scores "
            "compare encoders only under one probe protocol (a `crs probe` stopped part-way leaves such a mix). "
            "To repair, probe them alike, e.g. with the newest run's settings: "
            f"{_probe_again(results, store, newest, differ)}")


def _canonical(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def _flags(settings: dict) -> list[str]:
    """``crs probe``'s options that give the recorded probe ``settings``, as command-line words."""
    flags = []
    for key, flag, shown in _FLAGS:
        value = settings.get(key)
        if value is None or value == []:
            continue
        text = (shown(value) if shown is not None else
                ",".join(format(v, "g") for v in value) if isinstance(value, list) else format(value, "g"))
        flags += [flag, str(text)]
    return flags


def _probe_again(results, store: str | None, settings: dict, differ: list[str]) -> str:
    others = sorted(set(differ) - {k for k, _, _ in _FLAGS})  # settings a config file gives (crs run)
    tail = f", with {', '.join(f'{k} {settings.get(k)}' for k in others)} as in that run's config" if others else ""
    store = store or recorded_store(results) or "STORE"
    words = ["crs", "probe", "--all", "--store", str(store), "--results", str(results), *_flags(settings)]
    return f"`{shlex.join(words)}`{tail}"
