"""The settings schema: one frozen dataclass per TOML section, each field holding its type, default, range
check, help text and command-line flag, so ``crs.commands.options`` makes the typer options and
``crs.foundations.config.jsonschema`` the JSON Schema from the same fields. ``settings`` lists them; ``cross_check``
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

from crs.foundations.config.checks import (
    ENCODER_SETS,
    Bad,
    ConfigError,
    at_least,
    check_crs_version,
    check_encoder_sets,
    check_fractions,
    check_l2,
    check_positive,
    check_revisions,
    check_severities,
    check_tol,
    check_weights,
    comma_names,
    comma_numbers,
    comma_weights,
    convert_sets,
    name_values,
    non_empty,
    non_empty_names,
    one_of,
    setting,
)
from crs.foundations.names import CRS_LATEST, HEADS, MODALITIES, SEVERITIES

# The stages' defaults live here and only here: the command line's options and the TOML
# keys are both made from these fields, and the stages trust what passed their checks.
DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0)
DEFAULT_L2 = (1e-3, 1e-2, 1e-1, 1.0)
DEFAULT_N_SEEDS = 5  # probe seeds 0..N-1
DEFAULT_HIDDEN = 128

@dataclass(frozen=True)
class Encoders:
    names: tuple[str, ...] = setting("registry names (`crs encoders`), timm:NAME or hf:ORG/NAME (repeatable); with "
                                     "`set`, encoders added to the set's (default with no set: the demo set)",
                                     flag=("--encoder", "-e"), default=("demo-resnet", "demo-vit", "demo-stats"))
    set: tuple[str, ...] = setting("registry sets of encoders: demo (no download), pretrained (every pretrained "
                                   "record), or a family: general, medical, specialty (repeatable)", check_encoder_sets,
                                   flag="--set", parse=lambda v: convert_sets(v), default=())
    revisions: dict[str, str] = setting("pinned hub revision per encoder, ENCODER = \"COMMIT, branch or tag\" (on the "
                                        "command line ENCODER=REV, repeatable); overrides the record's",
                                        check_revisions,
                                        flag="--revision", parse=lambda v: name_values(v, "ENCODER=REV"),
                                        default_factory=dict)
    file: str | None = setting("TOML file of extra encoder records ([[encoder]] tables)", flag="--encoder-file",
                               default=None)
    trust_remote_code: bool = setting("allow a hub model's own Python code to run", flag="--trust-remote-code",
                                      default=False)
    weights: str | None = setting("local checkpoint file or folder instead of the hub (one encoder)",
                                  flag="--weights", default=None)


@dataclass(frozen=True)
class Datasets:
    names: tuple[str, ...] = setting("datasets probed (`crs datasets`); shift targets come with them (repeatable)",
                                     non_empty, flag=("--dataset", "-d"),
                                     default=("demo_derm", "demo_fundus", "demo_cxr"))
    roots: dict[str, str] = setting("a real dataset's folder, NAME = DIR (on the command line NAME=DIR, repeatable, "
                                    "or DIR when one real dataset is given)", flag="--root", default_factory=dict)
    size: float = setting("scale of the built-in datasets (1.0 = demo size)", check_positive, flag="--size",
                          default=1.0)
    split_seed: int = setting("seed of the train/val/test split of file-based datasets without an official split",
                              flag="--split-seed", default=0)
    uncertain: str = setting("uncertain chest X-ray labels: ignore (masked), ones or zeros",
                             one_of("ignore", "ones", "zeros"), flag="--uncertain", default="ignore")
    findings: str = setting("chest X-ray findings: competition (5), all (14), or a comma-separated list",
                            flag="--findings", default="competition")
    image_root: str | None = setting("folder the paths of a csv:PATH dataset are relative to (default: the CSV's "
                                     "folder)", flag="--image-root", default=None)
    modality: str | None = setting("a csv:PATH dataset's modality", one_of(*MODALITIES), flag="--modality",
                                   default=None)
    shift_target: str | None = setting("a csv:PATH dataset's shift target (a dataset name or csv:PATH)",
                                       flag="--shift-target", default=None)
    allow_absolute_paths: bool = setting("read image paths that lie outside the image root (absolute, or climbing "
                                         "out with ..); refused by default", flag="--allow-absolute-paths",
                                         default=False)
    follow_symlinks: bool = setting("read image paths that lead out of the image root through a symbolic link; "
                                    "refused by default", flag="--follow-symlinks", default=False)


@dataclass(frozen=True)
class Extract:
    perturb: bool = setting("embed the test split under the modality's perturbation suite", flag="--no-perturb",
                            invert=True, flag_help="clean embeddings only", default=True)
    severities: tuple[int, ...] = setting("perturbation severities (1..5)", check_severities, flag="--severities",
                                          text=comma_numbers(int, sort=True), default=SEVERITIES)
    families: tuple[str, ...] = setting("perturbation families kept from each modality's suite (`crs perturbations`; "
                                        "comma-separated on the command line); default: the whole suite",
                                        non_empty_names, flag="--perturbation-families", text=comma_names, default=())
    chunk: int = setting("store chunk length in images (a resume unit is one chunk of one condition)", at_least(1),
                         flag="--chunk", default=256)
    batch: int = setting("images per forward pass", at_least(1), flag="--batch", default=64)
    device: str = setting("torch device, or auto (cuda if available, else cpu)", flag="--device", default="auto")
    dtype: str = setting("embedding dtype in the store", one_of("float16", "float32"), flag="--dtype",
                         default="float16")
    precision: str = setting("auto (bf16 autocast on CUDA, float32 on CPU), bf16 or float32",
                             one_of("auto", "bf16", "float32"), flag="--precision", default="auto")
    workers: int = setting("DataLoader worker processes decoding images ahead", at_least(0), flag="--workers",
                           default=0)
    strict: bool = setting("stop at the first image that cannot be decoded", flag="--strict", default=False)
    max_models: int = setting("encoders loaded at once (0: as many as fit 80% of the device's free memory, weights "
                              "and one batch's activations, at most 8); each group decodes and perturbs the images "
                              "once", at_least(0),
                              flag="--max-models", default=0)
    executor: str = setting("local (this process) or ray (work units spread over a Ray cluster; pip install "
                            "'crs-bench[ray]')", one_of("local", "ray"), flag="--executor", default="local")
    address: str | None = setting("Ray cluster to join with executor ray ('auto' or ray://HOST:PORT); default: "
                                  "start a local Ray instance", flag="--address", default=None)
    actors: int | None = setting("model replicas with executor ray (default: one per GPU of the cluster, else one "
                                 "per CPU)", at_least(1, "1 or more"), flag="--actors", default=None)


@dataclass(frozen=True)
class Probe:
    seeds: int = setting("number of probe seeds (0..seeds-1)", at_least(1), flag="--seeds", default=DEFAULT_N_SEEDS)
    fractions: tuple[float, ...] = setting("label fractions (must include 1)", check_fractions, flag="--fractions",
                                           text=comma_numbers(float, sort=True), default=DEFAULT_FRACTIONS)
    l2: tuple[float, ...] = setting("L2 grid (the MLP's weight-decay grid)", check_l2, flag="--l2",
                                    text=comma_numbers(float, sort=True), default=DEFAULT_L2)
    select_by: str = setting("choose L2 per seed and fraction by validation loss (NLL) or auroc",
                             one_of("loss", "auroc"), flag="--select-by", default="loss")
    tol: float = setting("gradient tolerance each linear probe is solved to (mlp probes have their own stopping "
                         "rule)", check_tol, flag="--tol", default=1e-4)
    head: str = setting("probe head: linear, or mlp (Dense-GELU-Dense; results go under the name ENCODER+mlp)",
                        one_of(*HEADS), flag="--head", default="linear")
    hidden: int = setting("hidden width of the mlp head", at_least(1), flag="--hidden", default=DEFAULT_HIDDEN)


@dataclass(frozen=True)
class Score:
    reference: str = setting("reference encoder, 'median', or 'auto' (the registry's)", flag="--reference",
                             default="auto")
    weights: tuple[float, float, float] = setting("CRS weights [dominance, balance, worst] (command line: "
                                                  "dominance,balance,worst)", parse=check_weights, flag="--weights",
                                                  text=comma_weights, default=(1 / 3, 1 / 3, 1 / 3))
    bootstrap: int = setting("bootstrap replicates", at_least(1), flag="--bootstrap", default=1000)
    bootstrap_unit: str = setting("resample seed (docs/crs-v1.md section 5), test image (needs the store) or both "
                                  "(seeds and test images together, paired across encoders)",
                                  one_of("seed", "image", "both"), flag="--bootstrap-unit", default="both")
    seed: int = setting("bootstrap seed", flag="--seed", default=0)
    min_difference: float = setting("the smallest true CRS difference (points) worth detecting: the verdict sizes "
                                    "the test images or seeds that would settle a tie at 80 % power to detect it",
                                    check_positive, flag="--min-difference", default=2.0)
    crs_version: str = setting("CRS definition: 2 (docs/crs-v2.md, the default) or 1 (docs/crs-v1.md, as it was; "
                               "its numbers bit for bit)", parse=check_crs_version, flag="--crs-version",
                               default=CRS_LATEST)


@dataclass(frozen=True)
class Report:
    enabled: bool = setting("write the HTML report (crs report)", flag="--no-report", invert=True,
                            flag_help="skip the HTML report stage", default=True)
    out: str | None = setting("report folder (default RESULTS/report)", flag="--out", default=None)


REPORT_DIR = "report"  # the report's folder under RESULTS where report.out names none


def report_folder(results: str, out: str | None = None) -> str:
    """Where the report goes: ``out`` where given, else RESULTS/report. `crs run`, `crs demo` and `crs report`
    all ask here, so the demo's page is where its config says."""
    return out if out is not None else os.path.join(results, REPORT_DIR)


@dataclass(frozen=True)
class Config:
    store: str = setting("embedding store path or fsspec URL", flag="--store", default="./crs-store.zarr")
    results: str = setting("folder for run records, scores and the report", flag="--results", default="./crs-results")
    log_interval: float = setting("seconds between the plain progress lines written when the output is not a "
                                  "terminal (a batch job's log)", check_positive, flag="--log-interval", default=30.0)
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
        version = check_crs_version(raw)
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
