"""`crs store verify PATH` (every array and chunk against what was committed) and `crs store info PATH`."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt
from crs.commands.console import err, out, show
from crs.commands.exits import friendly_errors


def store_verify_cmd(
    path: Annotated[str, typer.Argument(help="The store: a path or an fsspec URL.", show_default=False,
                                        metavar="PATH")],
    repair: Annotated[bool, typer.Option("--repair", help="Also repair what can be repaired in place (what "
                                         "cannot is listed with the command that recomputes it).")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Check a whole store: every array, chunk and metadata file against what was committed. Exit 0 sound, 2 not."""
    with friendly_errors(verbose):
        from crs.stages import stores  # the stages layer: crs --help loads no stage

        changed: list[str] = []
        findings = stores.verify(path, repair=repair, changed=changed)
        if as_json:
            print(json.dumps([dataclasses.asdict(f) for f in findings]))
        elif findings or (changed and not quiet):  # what a repair changed, then what is left to do
            text = stores.format_findings(findings, changed)
            (err if quiet else out).print(escape(text), highlight=False, soft_wrap=True)
        elif not quiet:
            out.print(f"{path}: every array, chunk and metadata file is as committed" + (" (nothing to repair)" if
                      repair else ""), highlight=False, soft_wrap=True)
        if findings:
            raise typer.Exit(2)


def store_info_cmd(
    path: Annotated[str, typer.Argument(help="The store: a path or an fsspec URL.", show_default=False,
                                        metavar="PATH")],
    as_json: JsonOpt = False, verbose: VerboseOpt = False,
):
    """What a store holds: per dataset its images, encoders, embedding arrays and the perturbation generator
    that drew its perturbed embeddings."""
    with friendly_errors(verbose):
        from crs.stages import stores  # the stages layer: crs --help loads no stage

        rows = stores.describe(path)
        if as_json:
            print(json.dumps(rows))
            return
        t = Table("dataset", "images", "encoders", "arrays complete", "perturbation generator")
        for r in rows:
            gens = ", ".join(f"{g} ({n} arrays)" for g, n in r["perturbation_generators"].items()) or "(none perturbed)"
            t.add_row(r["dataset"], str(r["images"]), ", ".join(r["encoders"]), f"{r['complete']} of {r['arrays']}",
                      gens)
        show(t)
