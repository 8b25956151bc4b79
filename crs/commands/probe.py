"""`crs probe`: fit the probes of (encoder, dataset) pairs of the store and write their run records."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import out, progress_bar
from crs.commands.outputs import locate_outputs, print_note
from crs.commands.tables import warn_not_converged

PROBE = [("encoders", "names"), ("datasets", "names"), ("store",), ("results",), ("probe", "seeds"),
         ("probe", "fractions"), ("probe", "l2"), ("probe", "select_by"), ("probe", "tol"), ("probe", "head"),
         ("probe", "hidden"), ("log_interval",)]


@stage_command(PROBE)
def probe_cmd(
    given: dict,
    all_: Annotated[bool, typer.Option("--all", help="Every (encoder, dataset) with embeddings in the store.")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Train linear probes (all seeds x label fractions x L2 at once) and evaluate them.

    Name --encoder and --dataset, or --all. With --dataset alone, every encoder the store holds for
    those datasets is probed (with --encoder alone, every dataset of those encoders).

    With --head mlp, one-hidden-layer MLP probes instead, written as a model of their own, ENCODER+mlp."""
    from crs import stages  # the stages layer: crs --help loads no stage

    encoders = list(given.pop(("encoders", "names"), ()))
    datasets = list(given.pop(("datasets", "names"), ()))
    print_note(locate_outputs(given, "store"), quiet or as_json)
    cfg = options.to_config(given)
    pairs = stages.probe_pairs(cfg.store, encoders, datasets, every=all_)
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="solver loops") as progress:  # fraction groups of a pair
        summaries = stages.probe.run(cfg.store, Path(cfg.results), pairs, cfg.probe, progress)
    report = {"results": str(Path(cfg.results)), "seconds": round(time.perf_counter() - t0, 2),
              "runs": [s.as_dict() for s in summaries]}
    if as_json:
        print(json.dumps(report))
    elif not quiet:
        probes = sum(s.probes for s in summaries)
        out.print(f"fitted {probes} probes for {len(summaries)} (encoder, dataset) pairs in "
                  f"{report['seconds']:.1f} s; run records in {Path(cfg.results) / 'run_records'}")
        warn_not_converged(summaries)
