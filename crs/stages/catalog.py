"""What the registries hold, for the listing commands: encoders, datasets and perturbations.

Each function imports the registry it reads when called, so `crs --help` loads none of them.
"""

from __future__ import annotations


def encoders(encoder_file=None) -> list:
    """The encoder registry's records, then those of ``encoder_file`` (TOML ``[[encoder]]`` tables)."""
    from crs.extract import encoders as encreg  # the extract stage: crs --help loads no stage
    from crs.stages.names import encoder_records  # the extract stage: crs --help loads no stage

    return list(encreg.ENCODERS.values()) + list(encoder_records(encoder_file).values())


def dataset_names() -> list[str]:
    """The built-in datasets' names (what `crs extract --demo` embeds without --dataset)."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs --help loads no stage

    return dsreg.names()


def datasets() -> list[dict]:
    """One row per dataset: the built-in ones, then the layouts of the real ones read from a folder (with
    ``root``, what the folder holds, and ``source``)."""
    from crs.extract import datasets as dsreg  # polars, PIL: crs --help loads no stage
    from crs.extract import real  # polars, PIL: crs --help loads no stage

    rows = []
    for name in dsreg.names():
        d = dsreg.get(name)
        rows.append({"name": name, "task": d.task, "classes": list(d.classes), "shift_target": d.shift_target,
                     "description": d.description})
    for lay in real.LAYOUTS.values():
        rows.append({"name": lay.name, "task": lay.task, "classes": list(lay.classes), "shift_target":
                     lay.shift_target, "description": lay.description, "root": lay.root_holds, "source": lay.source})
    return rows


def perturbations() -> dict:
    """The perturbation severities (per family its parameter, the values at severities 1..5 and their meaning)
    and the suite of each modality."""
    from crs.extract import perturb  # the extract stage: crs --help loads no stage

    return {"severity": {k: {"parameter": p, "values": list(v), "meaning": m}
                         for k, (p, v, m) in perturb.SEVERITY.items()},
            "suites": {k: list(v) for k, v in perturb.SUITES.items()}}


def perturbations_markdown() -> str:
    """The severity table as Markdown (docs/perturbations.md's)."""
    from crs.extract import perturb  # the extract stage: crs --help loads no stage

    return perturb.table_markdown()
