"""`crs run CONFIG.toml` (every stage from one file, skipping what is current) and `crs demo` (the same on
the built-in config)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from crs.commands import options
from crs.commands.common import JsonOpt, QuietOpt, VerboseOpt, stage_command
from crs.commands.console import err, out, progress_bar
from crs.commands.exits import friendly_errors
from crs.commands.tables import print_run
from crs.foundations import config as cfgmod
from crs.foundations.errors import BadInput


def _read_config(config: Path | None) -> tuple[cfgmod.Config, str]:
    if config is None:
        raise BadInput("pass a config file: `crs run bench.toml` (`crs run --print-default > bench.toml` "
                       "writes an example)")
    try:
        text = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"no config file {str(config)!r}; `crs run --print-default > {config.name}` writes an "
                       "example") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the config file {str(config)!r}: {exc}") from None
    return cfgmod.resolve(cfgmod.parse(text, str(config)), config.resolve().parent), text


def run_cmd(
    config: Annotated[Path | None, typer.Argument(help="The benchmark's TOML file.", show_default=False)] = None,
    print_default: Annotated[bool, typer.Option("--print-default", help="Print a commented example config "
                                                "(the built-in demo) and exit.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Print the config's JSON Schema (for editors) and "
                                         "exit.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Check the config and its names, run nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Recompute probe, score and report even where their "
                                        "outputs match the config (extraction always resumes).")] = False,
    crs_version: Annotated[str | None, typer.Option("--crs-version", help="CRS definition, overriding the "
                                                       "config's score.crs_version: 2 (the default) or 1.",
                                                       show_default=False)] = None,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Run a whole benchmark from one TOML file: extract, probe, score and report, skipping what is current.

    `crs run --print-default > bench.toml` writes an example to start from."""
    with friendly_errors(verbose):
        if print_default or schema:
            print(cfgmod.EXAMPLE if print_default else json.dumps(cfgmod.json_schema(), indent=2) + "\n", end="")
            return
        cfg, text = _read_config(config)
        if crs_version is not None:
            cfg = cfgmod.with_crs_version(cfg, crs_version)
        from crs import stages  # the stages layer: crs --help loads no stage

        extra = stages.check_names(cfg, text=text, source=str(config))
        cfg = stages.with_sets(cfg)
        scored = check_reference(cfg, extra, text, str(config))
        if check:
            stages.check_datasets(cfg, text=text, source=str(config))
            reference, note = stages.resolve_reference(cfg.score.reference, scored)
            if as_json:
                print(json.dumps({"config": str(config), "ok": True, "settings": cfgmod.as_dict(cfg),
                                  "reference": reference, "warnings": [note] if note else []}))
            elif not quiet:
                out.print(f"{config}: valid ({len(cfg.encoders.names)} encoders x {len(cfg.datasets.names)} "
                          f"datasets; store {cfg.store}, results {cfg.results}; reference {reference})",
                          highlight=False)
            if note and not as_json:
                err.print(f"[yellow]warning[/]: {escape(note)}", highlight=False, soft_wrap=True)
            return
        result = _run_stages(cfg, quiet=quiet or as_json, verbose=verbose, text=text, source=str(config), force=force)
        print_run(result, str(config), as_json=as_json, quiet=quiet, verbose=verbose)


def check_reference(cfg: cfgmod.Config, extra: dict, text: str = "", source: str = "") -> list[str]:
    """``score.reference`` must be 'auto', 'median' or an encoder the run scores (under the name its results
    go by: the store key of a timm:/hf: id, ENCODER+mlp with the mlp head); a ConfigError naming the key and
    its line otherwise, before any stage runs. Returns the names the run scores."""
    from crs import stages  # the stages layer: crs --help loads no stage

    ref = cfg.score.reference
    scored = stages.scored_names(cfg, extra)
    if len(set(scored)) < 2:  # CRS ranks encoders against each other: `crs score` would refuse after the probes
        raise cfgmod.ConfigError(f"CRS compares encoders and needs at least 2, this run names {len(set(scored))} "
                                 f"({', '.join(map(repr, scored)) or 'none'}); add another to encoders.names "
                                 "(`crs encoders` lists them)", "encoders.names",
                                 cfgmod.locate(text, ("encoders", "names")) if text else None, source)
    if ref in ("auto", "median"):
        return scored
    if ref not in scored:
        raise cfgmod.ConfigError(f"{ref!r} is not an encoder this run scores; write \"auto\" (the registry's "
                                 f"reference), \"median\", or one of {', '.join(map(repr, scored))}",
                                 "score.reference", cfgmod.locate(text, ("score", "reference")) if text else None,
                                 source)
    return scored


def _run_stages(cfg, *, quiet, verbose=False, text="", source="", force=False, store_hint=""):
    """Every stage, with a line on stderr as each starts and ends and the progress between; the report's figure
    files are named only with --verbose."""
    from crs import stages  # the stages layer: crs --help loads no stage

    say = None if quiet else (lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True))
    with progress_bar(quiet, cfg.log_interval) as progress:
        return stages.run(cfg, progress, text=text, source=source, force=force, store_hint=store_hint,
                          quiet=quiet or not verbose, say=say)


DEMO = cfgmod.parse(cfgmod.EXAMPLE, "built-in demo config")


@stage_command([("datasets", "size"), ("probe", "seeds"), ("score", "bootstrap"), ("extract", "severities"),
                ("score", "crs_version"), ("report", "enabled"), ("log_interval",)], base=DEMO)
def demo_cmd(
    given: dict,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the demo's store and "
                                          "results.")] = Path("./crs-demo"),
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Run the built-in synthetic benchmark: `crs run` on the built-in config (`crs run --print-default`).

    Extract, probe, score and report with every built-in encoder; a re-run skips what is complete."""
    cfg = demo_config(out_dir, given)
    result = _run_stages(cfg, quiet=quiet or as_json, verbose=verbose, source="built-in demo config",
                         store_hint="for `crs demo`: pass a new --out folder, or the --size it was made with")
    print_run(result, "built-in demo config", as_json=as_json, quiet=quiet, verbose=verbose)
    if not (quiet or as_json):
        out.print(demo_next(out_dir, cfg.report.enabled), highlight=False, soft_wrap=True)


def demo_config(out_dir: Path, given: dict | None = None) -> cfgmod.Config:
    """The built-in config with its store and results under ``out_dir``, and the settings ``given`` on the
    command line; the report goes where the config puts it (RESULTS/report), as `crs run` and `crs report`
    put it."""
    given = {**(given or {}), ("store",): str(out_dir / "store.zarr"), ("results",): str(out_dir / "results")}
    return options.to_config(given, DEMO)


def demo_next(out_dir: Path, report: bool = True) -> str:
    """Where `crs demo --out OUT_DIR` put its outputs, and the commands to run next in the same folder."""
    store, results = out_dir / "store.zarr", out_dir / "results"
    paths = f"store {store}, results {results}" + (f", report {cfgmod.report_folder(str(results))}" if report else "")
    defaults, q = cfgmod.Config(), shlex.quote
    # `crs probe`, `crs score` and `crs report` find the demo's folder in the current one (``locate_outputs``)
    # while the default store and results folder are absent; otherwise the paths are named
    found = out_dir == Path("./crs-demo") and not (Path(defaults.store).exists() or Path(defaults.results).exists())
    where = "" if found else f" --store {q(str(store))} --results {q(str(results))}"
    there = "" if found else f" --results {q(str(results))} --store {q(str(store))}"
    steps = [(f"crs score{there} --bootstrap 2000", "score again, other settings: crs score --help"),
             (f"crs probe --all{where} --head mlp", "MLP probes beside the linear ones"),
             (f"crs report{there}", "the HTML page"),
             ("crs run --print-default > bench.toml", "a config of your own to edit, then: crs run bench.toml")]
    width = max(len(c) for c, _ in steps)
    return "\n".join([f"the demo's outputs: {paths}", "next, from this folder:",
                      *(f"  {c.ljust(width)}   # {why}" for c, why in steps)])
