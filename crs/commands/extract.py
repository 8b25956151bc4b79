"""`crs extract`: embed datasets with encoders into the store (or, with --plan, say what that would cost)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import err, out, progress_bar
from crs.commands.tables import print_plan
from crs.foundations.errors import BadInput


def _warn_failures(summaries) -> None:
    failed = {s.dataset: s.failures for s in summaries if s.failures}
    if failed:
        err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures table, "
                  "left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))


EXTRACT = [("encoders", "names"), ("encoders", "set"), ("encoders", "revisions"), ("datasets", "names"), ("store",),
           ("datasets", "size"), ("extract", "chunk"),
           ("extract", "batch"), ("extract", "device"), ("extract", "dtype"), ("extract", "perturb"),
           ("datasets", "roots"), ("datasets", "image_root"), ("datasets", "uncertain"), ("datasets", "modality"),
           ("datasets", "shift_target"), ("datasets", "split_seed"), ("datasets", "findings"),
           ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks"), ("encoders", "file"),
           ("encoders", "weights"), ("encoders", "trust_remote_code"),
           ("extract", "workers"), ("extract", "strict"), ("extract", "max_models"), ("extract", "severities"),
           ("extract", "families"), ("extract", "precision"),
           ("extract", "executor"), ("extract", "address"), ("extract", "actors"), ("log_interval",)]


@stage_command(EXTRACT)
def extract_cmd(
    given: dict,
    demo: Annotated[bool, typer.Option("--demo", help="The demo encoders (random weights, no download); without "
                                       "--dataset, on every built-in dataset. Same as --set demo.")] = False,
    pretrained: Annotated[bool, typer.Option("--pretrained", help="Every pretrained encoder of the registry "
                                             "(`crs encoders`). Same as --set pretrained.")] = False,
    family: Annotated[list[str] | None, typer.Option("--family", help="Every pretrained encoder of a family: "
                                                        "general, medical or specialty (repeatable). Same as --set "
                                                        "FAMILY.", show_default=False)] = None,
    plan: Annotated[bool, typer.Option("--plan", help="Print what the extraction would do (pairs, images, "
                                       "conditions, forward passes, store size, estimated GPU time) and what is "
                                       "missing (weights not cached, a gated model without HF_TOKEN, a dataset "
                                       "whose files cannot be read), loading no model and decoding no image. "
                                       "Exit 0 when nothing is missing, 2 otherwise.")] = False,
    all_: Annotated[bool, typer.Option("--all", hidden=True)] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Embed datasets with encoders (clean, and the test split under every perturbation) into the store.

    Encoders: registry names (`crs encoders`), timm:NAME, hf:ORG/NAME, names from --encoder-file, or a set
    of the registry (--demo, --pretrained, --family). Run with --plan first to see the cost."""
    from crs import stages  # the stages layer: crs --help loads no stage

    extra = _select_encoders(given, demo=demo, pretrained=pretrained, family=family, all_=all_)
    cfg = options.to_config(given)
    if plan:
        print_plan(stages.extract.plan(cfg, extra), as_json=as_json, quiet=quiet)
        return
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="chunks") as progress:  # (chunk, condition)s
        store, summaries = stages.extract.run(cfg, progress, extra_encoders=extra)
    report = {"store": store.path, "seconds": round(time.perf_counter() - t0, 2),
              "runs": [s.as_dict() for s in summaries]}
    if as_json:
        print(json.dumps(report))
    elif not quiet:
        written = sum(s.chunks_written for s in summaries)
        skipped = sum(s.chunks_skipped for s in summaries)
        imgs = sum(s.forward_images for s in summaries)
        out.print(f"extracted {len(summaries)} (encoder, dataset) pairs into {store.path}: {written} chunks "
                  f"written, {skipped} already complete, {imgs} forward passes in {report['seconds']:.1f} s")
        _warn_failures(summaries)


def _select_encoders(given: dict, *, demo: bool, pretrained: bool, family: list[str] | None, all_: bool):
    """Resolve `crs extract`'s encoder and dataset selection into ``given`` (names, sets, roots) and return
    the records of --encoder-file. Refuses --all and an unknown --family, naming the choices."""
    from crs import stages  # the stages layer: crs --help loads no stage
    from crs.stages import catalog  # the stages layer: crs --help loads no stage

    if all_:
        raise BadInput("crs extract takes no --all (it would not say which encoders); choose the encoders: "
                       "--demo (the demo encoders, on every built-in dataset without --dataset), --pretrained "
                       "(every pretrained encoder), --family general|medical|specialty, or --encoder NAME")
    for f in family or []:
        if f not in ("general", "medical", "specialty"):
            raise BadInput(f"--family must be general, medical or specialty, not {f!r}")
    sets = list(given.pop(("encoders", "set"), ())) + ["demo"] * demo + ["pretrained"] * pretrained + list(family or [])
    encoders = list(given.pop(("encoders", "names"), ()))
    datasets = list(given.pop(("datasets", "names"), ()))
    extra = stages.encoder_records(given.get(("encoders", "file")))
    if encoders or not sets:
        encoders = stages.check_encoders(encoders, extra)
    if not datasets and "demo" in sets:
        datasets = catalog.dataset_names()
    datasets = stages.check_dataset_names(datasets)
    stages.check_shift_target(given.get(("datasets", "shift_target")), datasets)
    given.update({("encoders", "names"): tuple(encoders), ("encoders", "set"): tuple(dict.fromkeys(sets)),
                  ("datasets", "names"): tuple(datasets),
                  ("datasets", "roots"): stages.parse_roots(given.pop(("datasets", "roots"), None), datasets)})
    return extra
