"""The listings: `crs encoders` (the encoder registry) and `crs datasets` (the datasets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt
from crs.commands.console import out, show
from crs.commands.exits import friendly_errors


def encoders_cmd(
    as_json: JsonOpt = False,
    encoder_file: Annotated[Path | None, typer.Option("--encoder-file", help="Also list the records of this "
                                                        "TOML file.")] = None,
    verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """List the encoder registry (name, family, width, input size, gated, ...)."""
    from crs.stages import catalog  # the stages layer: crs --help loads no stage

    with friendly_errors(verbose):
        specs = catalog.encoders(encoder_file)
        if as_json:
            print(json.dumps([s.as_dict() for s in specs]))
            return
        if quiet:  # the names alone, one a line
            print("\n".join(s.name for s in specs))
            return
        t = Table("name", "family", "width", "input", "gated", "loader", "model", "pooling")
        for s in specs:
            t.add_row(s.name, s.family, str(s.width), str(s.input_size), "yes" if s.gated else "no",
                      s.loader,
                      s.model_id if s.pretrained or s.source == "builtin" else f"{s.model_id} (random weights)",
                      s.pooling)
        show(t)
        out.print("Also: --encoder timm:NAME, --encoder hf:ORG/NAME, --encoder-file spec.toml. Gated models: accept "
                  "the terms on the model page, then set HF_TOKEN.")


def datasets_cmd(ctx: typer.Context, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """List the datasets: built-in ones, and the real ones read from a folder with --root."""
    if ctx.invoked_subcommand is not None:
        return
    with friendly_errors(verbose):
        _list_datasets(as_json, quiet)


def _list_datasets(as_json: bool, quiet: bool) -> None:
    from crs.stages import catalog  # the stages layer: crs --help loads no stage

    rows = catalog.datasets()
    if as_json:
        print(json.dumps(rows))
        return
    if quiet:  # the names alone, one a line
        print("\n".join(r["name"] for r in rows))
        return
    t = Table("name", "task", "classes", "shift target", "--root holds")
    for r in rows:
        t.add_row(r["name"], r["task"], ", ".join(r["classes"]), r["shift_target"] or "", r.get("root", "(built in)"))
    show(t)
    out.print("csv:PATH: a CSV with 'path' and 'label' (or 'label:NAME' columns), optional 'group', 'split', 'id'; "
              "images under --image-root; its shift target: --shift-target NAME or csv:PATH")
    out.print("A shift target is a target only: its test rows (every row of a CSV without 'split') are embedded "
              "clean and scored as the shift condition of the dataset that names it, never probed or averaged "
              "into the CRS as a dataset; name it with --dataset too to have it probed as one.")
