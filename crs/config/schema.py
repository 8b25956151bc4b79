"""The settings schema: one frozen dataclass per TOML section, each field holding its type, default, range
check, help text and command-line flag, so ``crs.options`` makes the typer options and
``crs.config.jsonschema`` the JSON Schema from the same fields. ``settings`` lists them; ``cross_check``
holds the rules that tie two settings together."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crs.config.checks import (
    ENCODER_SETS,
    Bad,
    ConfigError,
    _at_least,
    _choices,
    _comma_numbers,
    _comma_weights,
    _convert_sets,
    _crs_version,
    _encoder_sets,
    _fractions,
    _l2,
    _name_values,
    _non_empty,
    _opt,
    _positive,
    _revisions,
    _severities,
    _tol,
    _weights,
)
from crs.names import CRS_LATEST, HEADS, MODALITIES, SEVERITIES

# The stages' defaults live here and only here: the command line's options and the TOML
# keys are both made from these fields, and the stages trust what passed their checks.
DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
DEFAULT_L2 = (1e-3, 1e-2, 1e-1, 1.0)
DEFAULT_N_SEEDS = 5  # probe seeds 0..N-1
DEFAULT_HIDDEN = 128

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
    min_difference: float = _opt("the smallest true CRS difference (points) worth detecting: the verdict sizes "
                                 "the test images or seeds that would settle a tie at 80 % power to detect it",
                                 _positive, flag="--min-difference", default=2.0)
    crs_version: str = _opt("CRS definition: 2 (docs/crs-v2.md, the default) or 1 (docs/crs-v1.md, as it was; "
                            "its numbers bit for bit)", parse=_crs_version, flag="--crs-version",
                            default=CRS_LATEST)


@dataclass(frozen=True)
class Report:
    enabled: bool = _opt("write the HTML report (crs report)", flag="--no-report", invert=True,
                         flag_help="skip the HTML report stage", default=True)
    out: str | None = _opt("report folder (default RESULTS/report)", flag="--out", default=None)


REPORT_DIR = "report"  # the report's folder under RESULTS where report.out names none


def report_folder(results: str, out: str | None = None) -> str:
    """Where the report goes: ``out`` where given, else RESULTS/report. `crs run`, `crs demo` and `crs report`
    all ask here, so the demo's page is where its config says."""
    return out if out is not None else os.path.join(results, REPORT_DIR)


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


def with_crs_version(cfg, raw):
    """``cfg`` scoring by the CRS version ``raw`` (the --crs-version of `crs run`); ConfigError naming the versions."""
    try:
        version = _crs_version(raw)
    except Bad as exc:
        raise ConfigError(f"--crs-version {exc}") from None
    return dataclasses.replace(cfg, score=dataclasses.replace(cfg.score, crs_version=version))


def as_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def settings_hash(*parts) -> str:
    """A short stable digest of JSON-able settings (dict keys sorted), to tell whether outputs are current."""
    text = json.dumps(parts, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def options_record(cls, section, **given):
    """``cls``, a stage's frozen options record, holding each setting of the schema ``section`` (``cfg.probe``,
    ``cfg.score``, ...) in the field of the same name; ``given`` sets fields by name over them (a value the
    stage resolved, such as the reference 'auto' names, or a record field that is no setting).

    A setting ``cls`` has no field for is a TypeError: a record neither renames nor drops a setting, so
    ``record_hash`` of it covers every setting of its section."""
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    lacking = sorted((set(values) | set(given)) - fields)
    if lacking:
        raise TypeError(f"{cls.__name__} has no field {lacking[0]!r} for {type(section).__name__.lower()}."
                        f"{lacking[0]}; add the field under that name (a record takes each setting of its section)")
    return cls(**{**values, **given})


def record_hash(record, *inputs) -> str:
    """The currency hash of a stage: every field of its options ``record`` (a dataclass; ``dataclasses.asdict``)
    and the ``inputs`` it reads (JSON-able), as ``settings_hash``."""
    return settings_hash(dataclasses.asdict(record), *inputs)


def with_overrides(cfg: Config, **sections) -> Config:
    """``with_overrides(cfg, probe={"seeds": 2}, store="x")``: a copy with those values replaced."""
    top = {}
    for name, value in sections.items():
        if isinstance(value, dict):
            top[name] = dataclasses.replace(getattr(cfg, name), **value)
        else:
            top[name] = value
    return dataclasses.replace(cfg, **top)
