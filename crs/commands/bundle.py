"""`crs export RESULTS --out BUNDLE` (one site's results as a bundle it can release) and `crs merge BUNDLE...
--out RESULTS` (several sites' bundles as one results folder); docs/export-merge.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt
from crs.commands.console import out
from crs.commands.exits import friendly_errors


def export_cmd(
    results: Annotated[Path, typer.Argument(help="The site's results folder (run records and scores).",
                                            show_default=False, metavar="RESULTS")],
    bundle: Annotated[Path, typer.Option("--out", help="The bundle folder to write: new, or empty.",
                                         show_default=False)],
    site: Annotated[str, typer.Option("--site", help="The site's name: its datasets become strata SITE.DATASET "
                                      "when merged.")] = "site",
    store: Annotated[str | None, typer.Option("--store", help="The store the probes read (default: the one the "
                                              "run records name).", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what the bundle would share, array by array "
                                          "with sizes, and write nothing.")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Write one site's results as a bundle it can release: run records, stored test predictions, test and
    validation labels with hashed ids, settings and provenance, sha256 digests; no image, embedding or path."""
    with friendly_errors(verbose):
        from crs import stages  # the stages layer: crs --help loads no stage

        done = stages.bundles.export(results, bundle, site, store=store, dry_run=dry_run)
        if as_json:
            print(json.dumps({"out": str(done.out), "dry_run": done.dry_run,
                              "files": [{"path": p, "bytes": b} for p, b in done.files]}))
            return
        if dry_run:
            for name, size in done.files:
                out.print(f"{size:>12,}  {name}", highlight=False, soft_wrap=True)
        if not quiet:
            total = sum(b for _, b in done.files)
            verb = "would write" if dry_run else "wrote"
            out.print(f"{verb} {len(done.files)} files, {total:,} bytes, to {done.out}", highlight=False,
                      soft_wrap=True)


def merge_cmd(
    bundles: Annotated[list[Path], typer.Argument(help="Bundles written by `crs export`, one a site.",
                                                  show_default=False, metavar="BUNDLE...")],
    results: Annotated[Path, typer.Option("--out", help="The results folder to write: new, or empty.",
                                          show_default=False)],
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Merge sites' bundles into one results folder that `crs score` and `crs report` read; refuses (exit 2) a
    bundle whose digests fail and bundles that differ in what makes a comparison fair, naming every mismatch."""
    with friendly_errors(verbose):
        from crs import stages  # the stages layer: crs --help loads no stage

        done = stages.merge.merge(bundles, results)
        if as_json:
            print(json.dumps({"out": str(done.out), "sites": done.sites, "encoders": done.encoders,
                              "left_out": done.left_out, "score": done.score}))
            return
        if quiet:
            return
        out.print(f"merged {len(done.sites)} sites ({', '.join(done.sites)}) on {len(done.encoders)} encoders into "
                  f"{done.out}", highlight=False, soft_wrap=True)
        for encoder, where in done.left_out.items():
            out.print(f"left out: {encoder} (run only at {', '.join(where)})", highlight=False, soft_wrap=True)
        version, ref = done.score.get("crs_version"), done.score.get("reference")
        out.print(f"score it as the sites did: crs score --results {done.out} --crs-version {version} "
                  f"--reference {ref}", highlight=False, soft_wrap=True)
