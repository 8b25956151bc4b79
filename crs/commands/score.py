"""`crs score` (the axes, the CRS and the bootstrap from the run records) and `crs report` (the HTML page)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import err, out, progress_bar
from crs.commands.outputs import locate_outputs, print_note
from crs.commands.tables import print_comparisons, print_notes, print_scores
from crs.foundations import config as cfgmod
from crs.foundations.errors import BadInput

SCORE = [("results",), ("score", "bootstrap"), ("score", "reference"), ("score", "weights"), ("score", "seed"),
         ("score", "bootstrap_unit"), ("score", "crs_version"), ("score", "min_difference"), ("store",),
         ("log_interval",)]


@stage_command(SCORE)
def score_cmd(given: dict, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """Compute the four axes, the CRS (v2 unless --crs-version 1), AUROC-vs-CRS ranks and the paired bootstrap
    from the run records."""
    from crs import stages  # the stages layer: crs --help loads no stage

    print_note(locate_outputs(given, "results"), quiet or as_json)
    cfg = options.to_config(given)
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval) as progress:
        scores = stages.score.run(Path(cfg.results), cfg.score, store=cfg.store, progress=progress)
    if as_json:
        print(json.dumps(scores.to_json()))
    elif not quiet:
        print_scores(scores, cfg.results)
        print_comparisons(scores)
        if verbose:
            print_notes(scores)
        out.print(f"scored in {time.perf_counter() - t0:.1f} s", highlight=False)
    else:
        for w in scores.settings.get("warnings", []):
            err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


@stage_command([("results",), ("report", "out"), ("store",), ("log_interval",)])
def report_cmd(given: dict, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """Write the scores as one self-contained HTML page, with its figures as PNG and tables as CSV and Parquet.

    --store: the store to read reliability bins from when `crs score` ran without one."""
    from crs import stages  # the stages layer: crs --help loads no stage

    note = locate_outputs(given, "results")  # the report then goes to the demo's RESULTS/report, where the demo put it
    default = Path(cfgmod.Config().results)
    if ("results",) not in given and not (default / "scores" / "scores.json").is_file():
        from crs.foundations.records import ELSEWHERE  # polars (crs.foundations.records): keeps crs --help fast

        raise BadInput(f"no scores under {default / 'scores'} (the default --results); run `crs score` first, or "
                       f"{ELSEWHERE}")
    print_note(note, quiet or as_json)
    cfg = options.to_config(given)
    with progress_bar(quiet or as_json, cfg.log_interval) as progress:
        progress.add_task("report", total=None)  # the stage reports no steps: the display shows the time taken
        summary = stages.report.run(Path(cfg.results), cfg.report.out, store=given.get(("store",)), quiet=True)
    if as_json:
        print(json.dumps(summary))
        return
    if not quiet:
        out.print(f"report: {summary['html']} ({len(summary['figures'])} figures, "
                  f"{len(summary['tables']) // 2} tables as CSV and Parquet) in {summary['seconds']:.1f} s",
                  highlight=False, soft_wrap=True)
    for key, why in summary["absent"].items():  # like score's warnings: shown even with --quiet
        for w in why:
            err.print(f"[yellow]not drawn[/] ({key}): {w}", highlight=False, soft_wrap=True)
