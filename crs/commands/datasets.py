"""`crs datasets check NAME`: a dataset, and the shift target it names, read as `crs extract` reads them."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.markup import escape

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import err, out, progress_bar
from crs.commands.tables import print_check
from crs.foundations.errors import BadInput

# The dataset options of `crs extract`, with the same flags, defaults and requirements (one schema).
CHECK = [("datasets", "roots"), ("datasets", "image_root"), ("datasets", "modality"), ("datasets", "shift_target"),
         ("datasets", "uncertain"), ("datasets", "findings"), ("datasets", "split_seed"), ("datasets", "size"),
         ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks"), ("log_interval",)]


@stage_command(CHECK)
def datasets_check_cmd(
    given: dict,
    name: Annotated[str, typer.Argument(help="Dataset name (isic2019, aptos2019, chexpert, mimic-cxr, csv:PATH).",
                                        metavar="NAME")],
    all_: Annotated[bool, typer.Option("--all", help="Decode every image, not a sample.")] = False,
    sample: Annotated[int, typer.Option(help="Images decoded when --all is not given.")] = 200,
    as_json: JsonOpt = False, verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """Validate a dataset, and the shift target it names, as `crs extract` would read them: files, ids, label
    codes, columns, images. Takes every dataset option of `crs extract`. Exit 0 usable, 2 not."""
    from crs import stages  # the stages layer: crs --help loads no stage
    from crs.stages import datasets as data  # the stages layer: crs --help loads no stage

    stages.check_dataset_names([name])
    stages.check_shift_target(given.get(("datasets", "shift_target")), [name])
    if sample < 0:
        raise BadInput(f"--sample must be at least 0, not {sample}")
    given[("datasets", "roots")] = stages.parse_roots(given.pop(("datasets", "roots"), None), [name])
    cfg = options.to_config(given)
    ds = data.open_dataset(cfg, name)  # as `crs extract` opens it, so both read the dataset the same way
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="images") as progress:  # images decoded
        report = data.check(ds, all_, sample, progress)
        # the target's classes and test rows are compared with a readable dataset's only
        target, target_report, target_error = (data.check_shift_target(cfg, ds, all_, sample, progress)
                                               if report.usable else (None, None, None))
    usable = report.usable and target_error is None and (target_report is None or target_report.usable)
    if as_json:
        shift = target_report.as_dict() if target_report is not None else None
        if target_error:
            shift = {**(shift or {}), "error": target_error, "usable": False}
        print(json.dumps({**report.as_dict(), "usable": usable, "shift_target": shift}))
    else:
        for rep, d in ((report, ds), (target_report, target)):
            if rep is None:
                continue
            if quiet:  # the fatal problems alone; the exit code says usable (0) or not (2)
                for p in rep.problems:
                    if p.fatal:
                        err.print(f"[red]error[/]: {escape(str(p))}", highlight=False, soft_wrap=True)
            else:
                if d is target:
                    out.print(f"shift target of {ds.name}: {target.name}", highlight=False)
                print_check(rep, d)
        if target_error:
            err.print(f"[red]error[/]: shift target of {ds.name}: {escape(target_error)}", highlight=False,
                      soft_wrap=True)
        if not quiet:
            out.print(f"checked in {time.perf_counter() - t0:.1f} s", highlight=False)
    if not usable:
        raise typer.Exit(2)

