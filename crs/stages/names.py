"""The names a run is given, checked against the registries before any stage runs: encoders (and the sets
and revisions), datasets, shift targets and dataset folders, so that the command line and ``crs run``
give the same answer. A bad name is a BadInput listing the valid ones, or from ``check_names`` and
``check_datasets`` a ConfigError naming the config key and its line."""

from __future__ import annotations

import dataclasses

from crs.extract import encoders as encreg
from crs.foundations.config import Config, ConfigError, locate
from crs.foundations.errors import BadInput, UserError
from crs.stages.datasets import named_datasets, with_shift_targets

HUB_PREFIXES = ("timm:", "hf:")


def check_given(given: list[str], valid: list[str], what: str) -> list[str]:
    """``given`` once each, in order; BadInput listing the valid names for an unknown one."""
    if not given:
        raise BadInput(f"no {what} given; pass --{what} NAME (valid: {', '.join(valid)})"
                       + (", or a set: --demo, --pretrained, --family FAMILY" if what == "encoder" else ""))
    for name in given:
        if name not in valid:
            raise BadInput(f"unknown {what} {name!r}; valid {what}s: {', '.join(valid)}")
    return list(dict.fromkeys(given))


def check_dataset_names(given: list[str]) -> list[str]:
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them

    if not given:
        raise BadInput(f"no dataset given; pass --dataset NAME (valid: {', '.join(dsreg.all_names())})")
    for name in given:
        if not dsreg.is_known(name):
            raise BadInput(f"unknown dataset {name!r}; valid datasets: {', '.join(dsreg.all_names())}")
    return list(dict.fromkeys(given))


def check_shift_target(spec: str | None, datasets: list[str]) -> None:
    """BadInput where --shift-target names no dataset, or where no dataset given is a ``csv:`` one (the only
    kind it applies to: the others name their own target in the registry, and it would go unused)."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them

    if not spec:
        return
    try:
        dsreg.check_shift_target(spec)
    except UserError as exc:
        raise BadInput(str(exc)) from None
    if not any(d.startswith(dsreg.CSV_PREFIX) for d in datasets):
        raise BadInput(f"--shift-target {spec} applies to csv:PATH datasets only, and none is given "
                       f"({', '.join(datasets) or 'none'}); the others name their own (`crs datasets`): "
                       "drop --shift-target, or add the csv: dataset it belongs to")


def encoder_records(file: str | None) -> dict:
    """The extra encoder records of an --encoder-file (name -> record); BadInput for a bad file."""
    if file is None:
        return {}
    try:
        return {s.name: s for s in encreg.from_toml(str(file))}
    except (ValueError, TypeError, OSError) as exc:
        raise BadInput(str(exc)) from exc


def check_encoders(names: list[str], extra: dict) -> list[str]:
    """Registry names, names of ``extra`` records and well-formed timm:/hf: ids, once each."""
    for e in names:
        if e.startswith(HUB_PREFIXES):
            try:
                encreg.from_id(e)
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
    named = [e for e in names if not e.startswith(HUB_PREFIXES)]
    if named or not names:
        check_given(named, encreg.names() + list(extra), "encoder")
    return list(dict.fromkeys(names))


def parse_roots(values: list[str] | None, datasets: list[str]) -> dict[str, str]:
    """--root NAME=DIR binds a folder to a real dataset; a bare --root DIR goes to the one real dataset given."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders lists the registry without them

    roots, bare = {}, []
    for v in values or []:
        name, sep, path = v.partition("=")
        if sep and name in dsreg.REAL:
            roots[name] = path
        else:
            bare.append(v)
    unbound = [d for d in datasets if d in dsreg.REAL and d not in roots]
    if bare:
        if len(bare) > 1 or len(unbound) != 1:
            raise BadInput(f"--root {bare[0]!r} names no dataset and the datasets needing a folder are "
                           f"{unbound or 'none'}; pass --root NAME=DIR for each of {', '.join(dsreg.REAL)}")
        roots[unbound[0]] = bare[0]
    return roots


def set_members(name: str) -> list[str]:
    """The registry encoders of one set: demo (no download), pretrained (every pretrained record), or a family."""
    if name == "demo":
        return encreg.demo_names()
    pretrained = [s for s in encreg.ENCODERS.values() if s.pretrained and s.source != "builtin"]
    if name == "pretrained":
        return [s.name for s in pretrained]
    members = [s.name for s in pretrained if s.family == name]
    if not members:
        raise BadInput(f"no pretrained encoder of the registry is in the set {name!r}; sets: "
                       "demo, pretrained, general, medical, specialty")
    return members


def with_sets(cfg: Config) -> Config:
    """``cfg`` with ``encoders.names`` = the names given, then every member of ``encoders.set``, once each."""
    enc = cfg.encoders
    if not enc.set:
        return cfg
    names = list(enc.names) + [e for s in enc.set for e in set_members(s)]
    return dataclasses.replace(cfg, encoders=dataclasses.replace(enc, names=tuple(dict.fromkeys(names))))


def with_revision(spec, revision: str | None):
    """``spec`` pinned to ``revision`` (the registry's ``with_revision``, which checks the form)."""
    if revision is None:
        return spec
    if spec.source not in ("timm", "hf") or not spec.pretrained:
        raise BadInput(f"--revision {spec.name}={revision}: {spec.name} loads no hub weights (source "
                       f"{spec.source}{'' if spec.pretrained else ', random weights'}), so it has no revision to pin")
    try:
        return encreg.with_revision(spec, revision)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc


def encoder_specs(cfg: Config, extra: dict) -> list:
    """The records ``cfg`` extracts, each pinned to its ``encoders.revisions`` entry; BadInput for a revision
    of an encoder the run does not extract."""
    names = with_sets(cfg).encoders.names
    specs = [encreg.resolve(e, extra) for e in names]
    revisions = dict(cfg.encoders.revisions)
    unknown = [n for n in revisions if n not in names and n not in {s.name for s in specs}]
    if unknown:
        raise BadInput(f"--revision {unknown[0]}=...: {unknown[0]!r} is not an encoder of this run "
                       f"({', '.join(names)}); pin the revision of an encoder you extract")
    return [with_revision(s, revisions.get(n, revisions.get(s.name))) for n, s in zip(names, specs)]


def scored_names(cfg: Config, extra: dict) -> list[str]:
    """The names ``cfg``'s encoders are scored under: the store key of a timm:/hf: id (``extra``: the records of
    the encoder file), ENCODER+mlp with the mlp head."""
    from crs.probe import heads  # numpy: crs encoders lists the registry without it

    head = heads.get(cfg.probe.head)
    return [head.result_name(encreg.resolve(e, extra).name) for e in cfg.encoders.names]


def _where(text: str, source: str, path: tuple[str, ...]):
    return {"line": locate(text, path) if text else None, "source": source, "key": ".".join(path)}


def check_names(cfg: Config, *, text: str = "", source: str = "") -> dict:
    """The encoder records (with the config's encoder file's) after checking every name against the registries.

    An unknown name is a ConfigError naming the key and its line.
    """
    from crs.extract import datasets as dsreg  # polars, PIL: crs encoders loads this layer

    try:
        extra = encoder_records(cfg.encoders.file)
    except BadInput as exc:
        raise ConfigError(str(exc), **_where(text, source, ("encoders", "file"))) from exc
    names = list(cfg.encoders.names)
    for key, check in ((("encoders", "names"), lambda: check_encoders(names, extra) if names or not
                        cfg.encoders.set else None),
                       (("encoders", "set"), lambda: with_sets(cfg)),
                       (("encoders", "revisions"), lambda: encoder_specs(cfg, extra)),
                       (("datasets", "names"), lambda: check_dataset_names(list(cfg.datasets.names))),
                       (("datasets", "shift_target"),
                        lambda: check_shift_target(cfg.datasets.shift_target, list(cfg.datasets.names)))):
        try:
            check()
        except BadInput as exc:
            raise ConfigError(str(exc), **_where(text, source, key)) from None
    for name in cfg.datasets.roots:
        if name not in dsreg.REAL:
            raise ConfigError(f"{name!r} is not a dataset read from a folder; roots name one of "
                              f"{', '.join(dsreg.REAL)}", **_where(text, source, ("datasets", "roots", name)))
    missing = [d for d in cfg.datasets.names if d in dsreg.REAL and d not in cfg.datasets.roots]
    if missing:
        raise ConfigError(f"{', '.join(missing)} need their folder: add [datasets.roots] {missing[0]} = \"DIR\"",
                          **_where(text, source, ("datasets", "names")))
    return extra


def check_datasets(cfg: Config, *, text: str = "", source: str = "") -> list[str]:
    """The names of the config's datasets and their shift targets, each opened as extraction will open it
    (the CSV read, the folder indexed, no image decoded). One that cannot be opened is a ConfigError
    naming the key: ``datasets.names`` for a dataset, ``datasets.shift_target`` (where the config sets
    it, else ``datasets.names``) for a target; so is one none of whose images is where its rows say.
    A dataset some of whose images are missing passes: extraction records those as failures."""
    from crs.extract import real  # polars, PIL: crs encoders loads this layer
    try:
        named = named_datasets(cfg)
    except UserError as exc:
        raise ConfigError(str(exc), **_where(text, source, ("datasets", "names"))) from None
    target_key = ("datasets", "shift_target") if cfg.datasets.shift_target else ("datasets", "names")
    try:
        every = with_shift_targets(cfg, named)
    except UserError as exc:
        raise ConfigError(f"the shift target of {', '.join(d.name for d in named)} cannot be opened: {exc}",
                          **_where(text, source, target_key)) from None
    for d in every:
        try:
            real.require_measurable(d)
        except UserError as exc:
            named_one = any(d is n for n in named)
            raise ConfigError(str(exc), **_where(text, source, ("datasets", "names") if named_one else target_key)) \
                from None
        found, rows = real.files_found(d)
        if rows and not found:  # extraction would record every image as a failure, and the probe refuse
            role = "dataset" if any(d is n for n in named) else "shift target"
            raise ConfigError(f"none of the {rows} images of {role} {d.name} is where its rows say (under "
                              f"{d.root}); name the folder that holds them (datasets.roots, or datasets.image_root "
                              "for a csv: dataset) or fix the paths; `crs datasets check` lists each missing file",
                              **_where(text, source, ("datasets", "names") if role == "dataset" else target_key))
    return [d.name for d in every]
