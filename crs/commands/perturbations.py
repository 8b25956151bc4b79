"""`crs perturbations`: every perturbation of a dataset's suite drawn on one image, or the severity table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from crs import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import out
from crs.errors import BadInput

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
    from crs.extract import perturb  # noqa: PLC0415 -- the extract stage: crs --help loads no stage

    if table:
        if as_json:
            print(json.dumps({"severity": {k: {"parameter": p, "values": list(v), "meaning": m}
                                           for k, (p, v, m) in perturb.SEVERITY.items()},
                              "suites": {k: list(v) for k, v in perturb.SUITES.items()}}))
        else:
            print(perturb.table_markdown())
        return
    if dataset is None or out_path is None:
        raise BadInput("pass --dataset NAME and --out grid.png (or --table); a real dataset also needs --root DIR")
    from crs import stages  # noqa: PLC0415 -- the stages layer: crs --help loads no stage
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: keeps crs --help fast
    from crs.stages.steps import dataset_options  # noqa: PLC0415 -- the stages layer: crs --help loads no stage

    stages.check_dataset_names([dataset])
    given[("datasets", "roots")] = stages.parse_roots(given.pop(("datasets", "roots"), None), [dataset])
    cfg = options.to_config(given)
    # read as `crs extract` reads it (its options, its split), so the image drawn is the one extraction embeds
    ds = dsreg.get(dataset, size=cfg.datasets.size, seed=0 if dataset in dsreg.BUILTIN else cfg.datasets.split_seed,
                   **dataset_options(cfg))
    ids = ds.table().ids
    if not 0 <= row < len(ids):
        raise BadInput(f"--row must be in 0..{len(ids) - 1}, not {row}")
    modality = ds.modality
    if modality is None:
        raise BadInput(f"dataset {dataset!r} has no modality, so no perturbation suite; pass --modality")
    import numpy as np  # noqa: PLC0415 -- numpy: keeps crs --help fast
    import torch  # noqa: PLC0415 -- torch: keeps crs --help fast

    img = ds.load_image(row)
    x = torch.from_numpy(np.array(img, copy=True)).permute(2, 0, 1).float().div(255)  # a writable copy
    canvas = perturb.grid(x, str(ids[row]), modality)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out_path)
    families = perturb.suite(modality)
    if as_json:
        print(json.dumps({"out": str(out_path), "dataset": dataset, "modality": modality,
                          "families": list(families), "severities": list(perturb.SEVERITIES)}))
    elif not quiet:
        out.print(f"{dataset} ({modality}): {len(families)} families x {len(perturb.SEVERITIES)} severities "
                  f"drawn on image {ids[row]} -> {out_path}", highlight=False)
