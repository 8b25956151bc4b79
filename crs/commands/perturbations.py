"""`crs perturbations`: every perturbation of a dataset's suite drawn on one image, or the severity table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import out
from crs.foundations.errors import BadInput

PERTURBATIONS = [("datasets", "roots"), ("datasets", "image_root"), ("datasets", "modality"),
                 ("datasets", "uncertain"), ("datasets", "findings"), ("datasets", "split_seed"), ("datasets", "size"),
                 ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks")]


# a tool with the dataset options of `crs extract` (one schema), not a stage of the pipeline
@stage_command(PERTURBATIONS)
def perturbations_cmd(
    given: dict,
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Dataset whose modality suite to draw "
                                                   "(`crs datasets`; a real one with --root DIR).")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="PNG to write the grid to.")] = None,
    row: Annotated[int, typer.Option(help="Which image of the dataset to draw (row of its table).")] = 0,
    table: Annotated[bool, typer.Option("--table", help="Print the severity table (Markdown) and exit.")] = False,
    as_json: JsonOpt = False, verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """Draw every perturbation of a dataset's suite at every severity on one image (a PNG grid)."""
    from crs import stages  # the stages layer: crs --help loads no stage
    from crs.stages import catalog  # the stages layer: crs --help loads no stage
    from crs.stages import datasets as data  # the stages layer: crs --help loads no stage

    if table:
        if as_json:
            print(json.dumps(catalog.perturbations()))
        else:
            print(catalog.perturbations_markdown())
        return
    if dataset is None or out_path is None:
        raise BadInput("pass --dataset NAME and --out grid.png (or --table); a real dataset also needs --root DIR")
    stages.check_dataset_names([dataset])
    given[("datasets", "roots")] = stages.parse_roots(given.pop(("datasets", "roots"), None), [dataset])
    cfg = options.to_config(given)
    # read as `crs extract` reads it (its options, its split), so the image drawn is the one extraction embeds
    drawn = data.draw_perturbations(cfg, dataset, row, out_path)
    families, severities = drawn["families"], drawn["severities"]
    if as_json:
        print(json.dumps({k: v for k, v in drawn.items() if k != "image"}))
    elif not quiet:
        out.print(f"{dataset} ({drawn['modality']}): {len(families)} families x {len(severities)} severities "
                  f"drawn on image {drawn['image']} -> {out_path}", highlight=False)
