"""The extraction's settings as frozen records, built in one place from the settings schema.

``ExtractOptions`` is what ``crs.extract.run.extract_many`` takes (its ``ray`` field a
``RayOptions`` for ``--executor ray``); ``DatasetOptions`` is how
``crs.extract.datasets.get`` opens a dataset. ``from_config`` builds each from a
``crs.foundations.config.Config``, so the command line, the TOML file and the stages pass one value
made from the schema's fields, not a list kept in step by hand. Defaults are the schema's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from crs.foundations.names import SEVERITIES

EXECUTORS = ("local", "ray")
DEFAULT_IMAGE_SIZE = 512  # a file-based dataset's decoded side (crs.extract.real)


@dataclass(frozen=True)
class RayOptions:
    """``--executor ray``: the cluster to join (None: a new local instance), replicas (None: one per GPU
    of the cluster, else one per ``cpus_per_actor`` CPUs), resources per replica and retries of a unit
    whose replica died (``crs.extract.ray_executor``)."""

    address: str | None = None
    actors: int | None = None
    gpus_per_actor: float | None = None
    cpus_per_actor: float = 1
    retries: int = 3


@dataclass(frozen=True)
class ExtractOptions:
    """How ``extract_many`` embeds: ``size`` of a built-in dataset opened by name; store ``chunk`` length and
    ``dtype``; ``batch`` images per forward pass; torch ``device`` (None: cuda if available); the
    perturbation suite (``perturbations``, ``severities``); DataLoader ``workers``; ``strict`` (stop at the
    first undecodable image); the weights (``weights`` a local file or folder, ``trust_remote_code``,
    ``precision``); ``executor`` local or ray (with ``ray``); ``max_models`` loaded together (None: as many as
    fit, at most ``groups.MAX_MODELS``)."""

    size: float = 1.0
    chunk: int = 256
    batch: int = 64
    device: str | None = None
    dtype: str = "float16"
    perturbations: bool = True
    severities: tuple[int, ...] = SEVERITIES
    families: tuple[str, ...] = ()
    workers: int = 0
    strict: bool = False
    weights: str | None = None
    trust_remote_code: bool = False
    precision: str = "auto"
    executor: str = "local"
    ray: RayOptions | None = None
    max_models: int | None = None

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be 'local' or 'ray', not {self.executor!r}")

    @classmethod
    def from_config(cls, cfg) -> ExtractOptions:
        """The options of ``cfg`` (a ``crs.foundations.config.Config``): its extract, encoders and datasets sections."""
        ex, enc = cfg.extract, cfg.encoders
        ray = RayOptions(address=ex.address, actors=ex.actors) if ex.executor == "ray" else None
        return cls(size=cfg.datasets.size, chunk=ex.chunk, batch=ex.batch,
                   device=None if ex.device == "auto" else ex.device, dtype=ex.dtype, perturbations=ex.perturb,
                   severities=tuple(ex.severities), families=tuple(ex.families), workers=ex.workers,
                   strict=ex.strict, weights=enc.weights,
                   trust_remote_code=enc.trust_remote_code, precision=ex.precision, executor=ex.executor,
                   ray=ray, max_models=ex.max_models or None)

    @classmethod
    def of(cls, options: ExtractOptions | None = None, **changes) -> ExtractOptions:
        """``options`` (default: the defaults) with ``changes``, fields by name (``ray`` may be a dict)."""
        if isinstance(changes.get("ray"), Mapping):
            changes["ray"] = RayOptions(**changes["ray"])
        return dataclasses.replace(options or cls(), **changes)

    def settings(self) -> dict:
        """The settings every array of the run records (``tool.extract`` of its provenance)."""
        out = {"chunk": self.chunk, "batch": self.batch, "device": self.device or "auto", "dtype": self.dtype,
               "perturbations": self.perturbations, "severities": list(self.severities),
               "workers": self.workers, "strict": self.strict, "precision": self.precision,
               "executor": self.executor}
        # recorded only where set, so a store made with every family records what it recorded before the key
        return out | {"families": list(self.families)} if self.families else out


@dataclass(frozen=True)
class DatasetOptions:
    """How ``crs.extract.datasets.get`` opens a dataset: ``roots`` (a real dataset's folder by name);
    a ``csv:PATH`` dataset's ``image_root``, ``modality`` and ``shift_target``; chest X-ray ``uncertain``
    labels and ``findings`` (competition, all, or a comma-separated list); the decoded ``image_size``;
    image paths outside the root (``allow_absolute_paths``) or led out of it by a link (``follow_symlinks``)."""

    roots: Mapping[str, str] = field(default_factory=dict)
    image_root: str | None = None
    uncertain: str = "ignore"
    modality: str | None = None
    shift_target: str | None = None
    image_size: int = DEFAULT_IMAGE_SIZE
    findings: str = "competition"
    allow_absolute_paths: bool = False
    follow_symlinks: bool = False

    @classmethod
    def from_config(cls, cfg) -> DatasetOptions:
        """The options of ``cfg``'s datasets section (a ``crs.foundations.config.Config``)."""
        ds = cfg.datasets
        return cls(roots=dict(ds.roots), image_root=ds.image_root, uncertain=ds.uncertain, modality=ds.modality,
                   shift_target=ds.shift_target, findings=ds.findings,
                   allow_absolute_paths=ds.allow_absolute_paths, follow_symlinks=ds.follow_symlinks)

    @classmethod
    def of(cls, options: DatasetOptions | None = None, **changes) -> DatasetOptions:
        """``options`` (default: the defaults) with ``changes``, fields by name."""
        return dataclasses.replace(options or cls(), **changes)
