"""The ``crs`` command line: extract, probe, score, report, run, demo.

A leaf: each command parses its options (made from the settings schema, ``crs.options``),
calls a stage of ``crs.stages`` and prints. Heavy libraries (torch, jax) are imported
inside the stages, so ``crs --help`` is instant. Exit codes: 0 done, 1 a failure of ours,
2 bad input (``crs.errors.UserError``, or an OSError of the user's files), 130 interrupted by
Ctrl-C and 143 by SIGTERM (what was committed is kept; re-run to resume).
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crs import config as cfgmod
from crs import options
from crs.errors import BadInput, UserError, user_os_error

__all__ = ["BadInput", "app", "main"]

app = typer.Typer(
    add_completion=False, rich_markup_mode=None,
    no_args_is_help=True,
    help="CRS-Bench: which pretrained medical image encoder to build on. "
    "Pipeline: `crs extract` -> `crs probe` -> `crs score`; `crs run CONFIG.toml` runs them all (and the report) "
    "from one file; `crs demo` runs the built-in benchmark.",
)


class _Console(Console):
    """rich's Console, except that a reader going away (`crs encoders | head -2`) ends the command quietly
    with exit 0, as for ``print`` (``friendly_errors``): rich's own choice is exit 1 without a word."""

    def on_broken_pipe(self) -> None:
        _quiet_stdout()
        raise SystemExit(0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not meet the closed pipe again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# a pipe or a file gets at least 120 columns for text (more where COLUMNS says so); a terminal keeps its own width
_COLUMNS = os.environ.get("COLUMNS", "")
out = _Console(width=None if sys.stdout.isatty() else max(120, int(_COLUMNS) if _COLUMNS.isdigit() else 0))
err = _Console(stderr=True)


def show(table) -> None:
    """Print a table whole: a pipe or a file gets the width the table needs, so that no number is cut
    (a terminal keeps its own width, where rich folds what does not fit)."""
    if out.is_terminal:
        out.print(table)
        return
    from rich.measure import Measurement

    need = Measurement.get(out, out.options.update(width=10_000), table).maximum
    text_width = out.width
    out.width = max(text_width, need)  # Console.print(width=) cannot go beyond the console's own width
    try:
        out.print(table)
    finally:
        out.width = text_width

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the program unwinds as on Ctrl-C: ``finally`` blocks run, locks
    are released, what was committed stays (exit 143 instead of 130)."""


def _on_sigterm(signum, frame) -> None:
    # a second SIGTERM must not break the unwinding; SIGKILL still ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def _bug(exc: BaseException, verbose: bool) -> typer.Exit:
    if verbose:
        traceback.print_exc()
    err.print(f"[red]internal error[/] ({type(exc).__name__}): {escape(str(exc))}\nthis is a bug in CRS-Bench, not a "
              "problem with your input; " + ("please report it with the traceback above" if verbose else
                                             "re-run with --verbose for the traceback and report it"),
              highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _user(exc: UserError, verbose: bool) -> typer.Exit:
    if verbose:
        traceback.print_exc()
    err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@contextmanager
def friendly_errors(verbose: bool):
    """A UserError (or an OSError of the user's files, ``crs.errors.user_os_error``) is one clear line and
    exit 2; anything else is our bug, exit 1, saying so; tracebacks only with --verbose. Ctrl-C exits 130,
    SIGTERM 143, each after a message."""
    try:
        yield
    except typer.Exit:
        raise
    except BrokenPipeError:  # the reader went away (`crs encoders -q | head`): nothing is wrong
        _quiet_stdout()
        raise typer.Exit(0)
    except KeyboardInterrupt as exc:
        what, code = ("terminated (SIGTERM)", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        err.print(f"[yellow]{what}[/]: everything committed so far is kept; run the same command again to resume",
                  soft_wrap=True)
        raise typer.Exit(code)
    except UserError as exc:
        raise _user(exc, verbose) from None
    except OSError as exc:
        mine = user_os_error(exc)
        if mine is None:
            raise _bug(exc, verbose) from None
        raise _user(mine, verbose) from None
    except Exception as exc:
        raise _bug(exc, verbose) from None


def progress_bar(quiet: bool, interval: float = cfgmod.Config().log_interval, unit: str | None = None):
    """The progress display (it satisfies ``crs.progress.Progress``), on stderr; nothing with --quiet.

    A terminal gets a rich bar; a file or a pipe (a batch job's log) gets a plain line per running
    task every ``interval`` seconds (``crs.progress.LineProgress``). Both show the average rate since
    the start with the task's unit (``add_task(..., unit=)``, else ``unit``: what the one stage a
    command runs counts), and the time left at that rate."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn)
    from rich.text import Text

    from crs import progress as prog

    unit = unit or prog.DEFAULT_UNIT
    if not quiet and not err.is_terminal:
        return prog.LineProgress(interval, lambda line: err.print(line, markup=False, highlight=False,
                                                                   soft_wrap=True), unit=unit)

    class Count(MofNCompleteColumn):
        def render(self, task):  # a step without a count (scoring, the report) shows its time alone
            return Text("") if task.total is None else super().render(task)

    class Rate(ProgressColumn):
        def render(self, task):
            if task.total is None:
                return Text("")
            return Text(prog.rate_text(prog.average_rate(task.completed, task.elapsed or 0),
                                       task.fields.get("unit") or unit))

    class Left(ProgressColumn):
        def render(self, task):
            if task.total is None:
                return Text("")
            left = prog.time_left(task.completed, task.total, task.elapsed or 0)
            return Text("-:--:--" if left is None or task.finished else prog.clock(left), style="progress.remaining")

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), Count(), Rate(),
        TimeElapsedColumn(), Left(), console=err, disable=quiet,
    )


STAGE_OPTIONS: dict[str, list[tuple[str, ...]]] = {}  # command -> the settings it has options for


def stage_command(name: str, paths: list[tuple[str, ...]], base: cfgmod.Config | None = None,
                  group: typer.Typer | None = None):
    """Register ``fn(given, **own options)`` as command ``name`` with an option for each setting in ``paths``.

    typer reads the signature, so the command's signature is made here: the settings' options
    (``crs.options.parameter``) followed by ``fn``'s own (--all, --json, ...). ``fn`` receives the
    settings given, checked, as {path: value}; errors anywhere become exit codes. ``group``: a
    sub-command of that group (a tool such as `crs datasets check`, not a stage) instead of `crs`.
    """
    shown = base or cfgmod.Config()
    if group is None:
        STAGE_OPTIONS[name] = list(paths)

    def register(fn: Callable) -> Callable:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]

        def command(**values):
            with friendly_errors(values.get("verbose", False)):
                given = options.read(paths, values)
                fn(given, **values)

        command.__signature__ = inspect.Signature([options.parameter(p, shown) for p in paths]
                                                  + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own])
        command.__doc__, command.__name__ = fn.__doc__, fn.__name__
        (group or app).command(name)(command)
        return fn
    return register


def _warn_failures(summaries) -> None:
    failed = {s.dataset: s.failures for s in summaries if s.failures}
    if failed:
        err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures table, "
                  "left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))


# ------------------------------------------------------------------ extract
EXTRACT = [("encoders", "names"), ("encoders", "set"), ("encoders", "revisions"), ("datasets", "names"), ("store",), ("datasets", "size"), ("extract", "chunk"),
           ("extract", "batch"), ("extract", "device"), ("extract", "dtype"), ("extract", "perturb"),
           ("datasets", "roots"), ("datasets", "image_root"), ("datasets", "uncertain"), ("datasets", "modality"),
           ("datasets", "shift_target"), ("datasets", "split_seed"), ("datasets", "findings"),
           ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks"), ("encoders", "file"), ("encoders", "weights"), ("encoders", "trust_remote_code"),
           ("extract", "workers"), ("extract", "strict"), ("extract", "max_models"), ("extract", "severities"),
           ("extract", "precision"),
           ("extract", "executor"), ("extract", "address"), ("extract", "actors"), ("log_interval",)]


@stage_command("extract", EXTRACT)
def extract_cmd(
    given: dict,
    demo: Annotated[bool, typer.Option("--demo", help="The demo encoders (random weights, no download); without "
                                       "--dataset, on every built-in dataset. Same as --set demo.")] = False,
    pretrained: Annotated[bool, typer.Option("--pretrained", help="Every pretrained encoder of the registry "
                                             "(`crs encoders`). Same as --set pretrained.")] = False,
    family: Annotated[Optional[list[str]], typer.Option("--family", help="Every pretrained encoder of a family: "
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
    from crs import stages

    extra = _select_encoders(given, demo=demo, pretrained=pretrained, family=family, all_=all_)
    cfg = options.to_config(given)
    if plan:
        _print_plan(stages.plan(cfg, extra), as_json=as_json, quiet=quiet)
        return
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="chunks") as progress:  # (chunk, condition)s
        store, summaries = stages.extract(cfg, progress, extra_encoders=extra)
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
    from crs import stages
    from crs.extract import datasets as dsreg

    if all_:
        raise BadInput("crs extract takes no --all (it once meant the demo encoders only); choose the encoders: "
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
        datasets = dsreg.names()
    datasets = stages.check_dataset_names(datasets)
    given.update({("encoders", "names"): tuple(encoders), ("encoders", "set"): tuple(dict.fromkeys(sets)),
                  ("datasets", "names"): tuple(datasets),
                  ("datasets", "roots"): stages.parse_roots(given.pop(("datasets", "roots"), None), datasets)})
    return extra


def _print_plan(p: dict, *, as_json: bool, quiet: bool) -> None:
    """`crs extract --plan`: the pairs and their cost, then what is missing; exit 2 when anything is."""
    def size(b):
        return "?" if b is None else f"{b / 1e9:.2f} GB" if b >= 1e8 else f"{b / 1e6:.1f} MB"

    def hours(sec):
        if sec is None:
            return "?"
        return f"{sec / 3600:.2f} h" if sec >= 360 else f"{sec:.1f} s" if sec >= 1 else f"{sec:.2f} s" if sec >= 0.01 else "< 0.01 s"

    def n(v):
        return "?" if v is None else f"{v:,}"

    if as_json:
        print(json.dumps(p))
    elif not quiet:
        t = Table(title=f"crs extract --plan: {p['totals']['pairs']} (encoder, dataset) pairs into {p['store']}",
                  title_justify="left")
        for col in ("encoder", "dataset", "images", "test images", "conditions", "forward passes",
                    f"store ({p['dtype']})", "GFLOPs/image", f"GPU time ({p['device']})"):
            t.add_column(col, justify="left" if col in ("encoder", "dataset") else "right")
        for r in p["pairs"]:
            t.add_row(r["encoder"], r["dataset"], n(r["images"]), n(r["test_images"]), n(r["conditions"]),
                      n(r["forward_passes"]), size(r["store_bytes"]),
                      "?" if r["gflops_per_image"] is None else f"{r['gflops_per_image']:.3g}", hours(r["gpu_seconds"]))
        show(t)
        tot = p["totals"]
        out.print(f"total: {n(tot['forward_passes'])} forward passes, store {size(tot['store_bytes'])} "
                  f"({p['store_size_note']}), GPU time {hours(tot['gpu_seconds'])} (forward passes only; decoding "
                  f"and perturbing add to it). GPU rates: {p['gpu_time_source']}", highlight=False, soft_wrap=True)
        unknown = [e["encoder"] for e in p["encoders"] if e["in_cache"] is None]
        if unknown:
            out.print(f"weights of {', '.join(unknown)}: whether they are in the local cache is not known "
                      "(this installation cannot look without downloading)", highlight=False, soft_wrap=True)
        if p["no_gpu_time_for"]:
            out.print(f"no FLOP figure for {', '.join(p['no_gpu_time_for'])}: their GPU time is not estimated",
                      highlight=False, soft_wrap=True)
    for m in p["missing"]:
        err.print(f"[red]missing[/]: {escape(m)}", highlight=False, soft_wrap=True)
    if not p["complete"]:
        if not quiet and not as_json:
            err.print(f"the plan is not complete: {len(p['missing'])} missing (above); fix them before the run",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(2)


# -------------------------------------------------------------------- probe
PROBE = [("encoders", "names"), ("datasets", "names"), ("store",), ("results",), ("probe", "seeds"),
         ("probe", "fractions"), ("probe", "l2"), ("probe", "select_by"), ("probe", "tol"), ("probe", "head"),
         ("probe", "hidden"), ("log_interval",)]


@stage_command("probe", PROBE)
def probe_cmd(
    given: dict,
    all_: Annotated[bool, typer.Option("--all", help="Every (encoder, dataset) with embeddings in the store.")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Train linear probes (all seeds x label fractions x L2 at once) and evaluate them.

    Name --encoder and --dataset, or --all. With --dataset alone, every encoder the store holds for
    those datasets is probed (with --encoder alone, every dataset of those encoders).

    With --head mlp, one-hidden-layer MLP probes instead, written as a model of their own, ENCODER+mlp."""
    from crs import stages

    encoders = list(given.pop(("encoders", "names"), ()))
    datasets = list(given.pop(("datasets", "names"), ()))
    _note(locate_outputs(given, "store"), quiet or as_json)
    cfg = options.to_config(given)
    pairs = stages.probe_pairs(cfg.store, encoders, datasets, every=all_)
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="solver loops") as progress:  # fraction groups of a pair
        summaries = stages.probe(cfg.store, Path(cfg.results), pairs, cfg.probe, progress)
    report = {"results": str(Path(cfg.results)), "seconds": round(time.perf_counter() - t0, 2),
              "runs": [s.as_dict() for s in summaries]}
    if as_json:
        print(json.dumps(report))
    elif not quiet:
        probes = sum(s.probes for s in summaries)
        out.print(f"fitted {probes} probes for {len(summaries)} (encoder, dataset) pairs in "
                  f"{report['seconds']:.1f} s; run records in {Path(cfg.results) / 'run_records'}")
        warn_not_converged(summaries)


def warn_not_converged(summaries) -> None:
    bad = [(s.encoder, s.dataset, s.not_converged) for s in summaries if s.not_converged]
    linear = [b for b in bad if "+mlp" not in b[0]]
    mlp = [b for b in bad if "+mlp" in b[0]]
    if linear:
        where = ", ".join(f"{e} × {d}: {n}" for e, d, n in linear)
        err.print(f"[yellow]warning[/]: chosen probes that stopped above the gradient tolerance ({where}); "
                  "their rows have converged = false in the run records", soft_wrap=True)
    if mlp:
        where = ", ".join(f"{e} × {d}: {n}" for e, d, n in mlp)
        err.print(f"[yellow]warning[/]: chosen MLP probes that used every step without their largest gradient "
                  f"component reaching the tolerance ({where}); their rows have converged = false in the run records", soft_wrap=True)


# ------------------------------------------------- where the outputs are
def _has_records(results: Path) -> bool:
    return any((results / "run_records").glob("*.parquet"))


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def demo_folders(here: Path) -> list[Path]:
    """The folders directly under ``here`` laid out as `crs demo --out` lays them out: store.zarr, results
    (with run records) and report side by side."""
    try:
        subs = sorted(p for p in here.iterdir() if p.is_dir())
    except OSError:
        return []
    return [p for p in subs if _is_store(p / "store.zarr") or _has_records(p / "results")]


def locate_outputs(given: dict, need: str, here: Path = Path(".")) -> str | None:
    """Fill in --store and --results from a `crs demo` folder in ``here`` when the command needs what the
    defaults do not hold (``need``: "store" for probe, "results" for score and report) and the user did not
    name it; a path the user named stands.

    Returns a note naming the folder used, or None where the defaults or the given paths stand. Where no
    folder qualifies the defaults stand, and the stage's own error names what is missing and where the demo
    keeps its outputs (``records.ELSEWHERE``); where several do, BadInput lists them."""
    defaults = cfgmod.Config()
    if need == "store":
        if ("store",) in given or _is_store(Path(defaults.store)):
            return None
        found = [f for f in demo_folders(here) if _is_store(f / "store.zarr")]
    else:
        if ("results",) in given or _has_records(Path(defaults.results)):
            return None
        found = [f for f in demo_folders(here) if _has_records(f / "results")]
    if len(found) != 1:
        if len(found) > 1:
            raise BadInput(f"{defaults.store if need == 'store' else defaults.results} holds no "
                           f"{'store' if need == 'store' else 'run records'} and several folders here hold the "
                           f"outputs of `crs demo`: {', '.join(str(f) for f in found)}; pick one with "
                           "--store DIR/store.zarr --results DIR/results")
        return None
    folder = found[0]
    given.setdefault(("results",), str(folder / "results"))
    if _is_store(folder / "store.zarr"):
        given.setdefault(("store",), str(folder / "store.zarr"))
    what = f"store {defaults.store}" if need == "store" else f"results folder {defaults.results}"
    return (f"using the `crs demo` outputs in {folder} (store {given.get(('store',), defaults.store)}, results "
            f"{given[('results',)]}): the default {what} holds no {'store' if need == 'store' else 'run records'}; "
            "pass --store and --results to choose")


def _note(text: str | None, quiet: bool) -> None:
    if text and not quiet:
        err.print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)


# -------------------------------------------------------------------- score
def _is_reference(row: dict, reference: str | None) -> bool:
    """The scores' ``reference`` column where the scoring writes one, else the settings' reference name."""
    flag = row.get("reference")
    return bool(flag) if flag is not None else row["encoder"] == reference


def _number(x) -> bool:
    return x is not None and x == x  # NaN or null: no number (a test split too small for the image bootstrap)


def interval_text(lo, hi, signed: bool = False) -> str:
    if not (_number(lo) and _number(hi)):
        return "n/a"
    f = "{:+.1f}" if signed else "{:.1f}"
    return f"[{f.format(lo)}, {f.format(hi)}]"


def leaderboard_rows(encoders: list[dict], reference: str | None) -> list[dict]:
    """The leaderboard's cells (strings) for each row of the scores' encoders table, in its order.

    The reference scores 50 by construction (the zero point of the scale): "50.0 (reference)", no
    interval. Rank: the tie group where the scoring gives one ("tied 1st-2nd"), else the rank. Against
    the leader: the paired CRS difference and its 95 % interval, where the scoring gives them. An axis value
    resting on tied AUROCs carries the mark of ``crs.scoring.diagnostics``."""
    from crs.scoring.diagnostics import mark

    rows = []
    for r in encoders:
        ref = _is_reference(r, reference)
        diff = r.get("crs_diff")
        if not _number(diff):
            versus = ""
        elif diff == 0 and all(not _number(r.get(k)) or r[k] == 0 for k in ("crs_diff_low", "crs_diff_high")):
            versus = "leader"
        else:
            versus = f"{diff:+.1f} {interval_text(r.get('crs_diff_low'), r.get('crs_diff_high'), signed=True)}"
        rows.append({
            "rank": r.get("tie_group") or f"{r['crs_rank']:g}",
            "encoder": r["encoder"],
            "CRS [95% interval]": (f"{r['crs']:.1f} (reference)" if ref else
                                   f"{r['crs']:.1f} {interval_text(r.get('crs_low'), r.get('crs_high'))}"),
            "tier": "no tier" if r.get("tier") is None else "★" if r["tier"] else "",
            "vs leader": versus,
            "AUROC": f"{r['auroc']:.3f}{mark(r, 'D')}", "AUROC\nrank": f"{r['auroc_rank']:g}",
            "C": f"{r['calibration']:.3f}{mark(r, 'C')}", "L": f"{r['label_efficiency']:.3f}{mark(r, 'L')}",
            "R": f"{r['robustness']:.3f}{mark(r, 'R')}",
        })
    return rows


def diagnostics_rows(health: list[dict]) -> list[dict]:
    """The probe diagnostics table's cells, per (encoder, dataset) (``crs.scoring.diagnostics.probe_health``)."""
    def num(v, spec):
        return "" if v is None else format(v, spec)

    return [{"encoder": h["encoder"], "dataset": h["dataset"],
             "features\nleft out": num(h.get("features_left_out"), "d"),
             "largest |z|\nclean": num(h.get("max_scaled_clean"), ".1f"),
             "largest |z|\nany condition": (f"{num(h.get('max_scaled'), '.1f')} ({h['max_scaled_condition']})"
                                            if h.get("max_scaled") is not None else ""),
             "tied test scores > 5%": h.get("tied") or ""} for h in health]


COST = (("parameters", "parameters", lambda v: f"{v / 1e6:.1f} M"), ("gflops", "GFLOPs/image", "{:.3g}".format),
        ("width", "width", str), ("images_per_s", "images/s", "{:.0f}".format), ("device", "device", str),
        ("revision", "revision", lambda v: str(v)[:12]))


def cost_rows(encoders: list[dict]) -> list[dict]:
    """Per encoder what it costs to run and which weights were scored, where the store recorded it; [] where it
    recorded none (stores written before that was recorded)."""
    if not any(_present(r.get(k)) for r in encoders for k in ("parameters", "gflops", "images_per_s")):
        return []
    cols = [(k, name, fmt) for k, name, fmt in COST if any(_present(r.get(k)) for r in encoders)]
    return [{"encoder": r["encoder"], **{name: fmt(r[k]) if _present(r.get(k)) else "" for k, name, fmt in cols}}
            for r in encoders]


def _present(x) -> bool:
    return _number(x) and x != ""


def _table(title: str, rows: list[dict], left=("encoder", "device", "revision"), center=("tier",)) -> Table:
    # a light box: the leaderboard fits the 120 columns a log or a pipe gets
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in rows[0] if rows else ():
        t.add_column(col, justify="left" if col in left else "center" if col in center else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r.values())
    return t


def leaderboard(scores) -> Table:
    rows = leaderboard_rows(scores.encoders.to_dicts(), scores.settings.get("reference"))
    if rows and not any(r["vs leader"] for r in rows):  # scores without the paired differences
        rows = [{k: v for k, v in r.items() if k != "vs leader"} for r in rows]
    return _table("CRS leaderboard (overall, comparison set)", rows)


def scale_note(reference: str | None) -> str:
    who = f"the reference encoder {reference}" if reference and reference != "median" else "the per-axis median"
    return (f"CRS 50 is the level of {who}: an encoder equal to it on every axis (q = 0) that dominates as many "
            "encoders as dominate it scores 50; above 50 is better on balance, below worse (docs/crs-v1.md).")


def verdict_lines(scores_json: dict) -> list[str]:
    """The verdict in sentences (``crs.scoring.verdict.sentences``); none for scores from before the verdict."""
    from crs.scoring import verdict

    v = scores_json.get("verdict")
    return list(verdict.sentences(v)) if v else []


def print_scores(scores, results):
    s = scores.settings
    rc = scores.rank_comparison
    show(leaderboard(scores))
    out.print(scale_note(s.get("reference")), highlight=False, soft_wrap=True)
    marked = "ties_marked" in scores.encoders.columns and any(scores.encoders["ties_marked"].fill_null(""))
    if marked:
        from crs.scoring.diagnostics import TIE_MARK

        out.print(f"{TIE_MARK} computed from AUROCs with more than 20% tied test scores: read with care "
                  "(Verdict notes)")
    health = getattr(scores, "diagnostics", None)  # absent from a summary rebuilt from older scores
    if health is not None and health.height:
        show(_table("Probe diagnostics (features left out, largest standardised value, ties)",
                    diagnostics_rows(health.to_dicts()), left=("encoder", "dataset", "tied test scores > 5%")))
    cost = cost_rows(scores.encoders.to_dicts())
    if cost:
        show(_table("Cost to run (recorded by crs extract)", cost))
    w = ", ".join(f"{k} {v:.3g}" for k, v in s["weights"].items())
    out.print(f"AUROC = D (discrimination); C calibration, L label efficiency, R robustness (seed means over "
              f"{', '.join(s['datasets'])}).\n★ = leading tier (paired {s['bootstrap']['unit']} bootstrap, "
              f"B={s['bootstrap']['n']}); "
              + ("vs leader: paired CRS difference to the leader [95% interval]; "
                 if "crs_diff" in scores.encoders.columns else "")
              + f"reference: {s['reference']}; weights: {w}; CRS v{s['crs_version']}")
    doc = scores.to_json()
    targets = doc.get("shift_targets") or {}
    if targets:
        out.print("Shift targets (each its dataset's shift condition, not a dataset of the CRS): "
                  + "; ".join(f"{d} -> {', '.join(t)}" for d, t in targets.items()), highlight=False)
    out.print(f"AUROC vs CRS: {rc['discordant_pairs']} of {rc['pairs']} pairs reversed, mean |rank shift| "
              f"{rc['mean_abs_rank_shift']:.2f}, Kendall tau-b {rc['kendall_tau_b']:.2f}")
    lines = verdict_lines(doc)
    if lines:
        out.print("Verdict: " + " ".join(lines), markup=False, highlight=False, soft_wrap=True)
    out.print(f"scores written to {Path(results) / 'scores'} (Parquet, CSV, JSON)")


def print_comparisons(scores):
    """Pareto front, weight-sensitivity leaders and the warnings, after the leaderboard."""
    front = scores.to_json()["pareto"]
    if front:
        out.print("Pareto front on the four q-axes: overall " + ", ".join(front.get("overall", [])) + "; "
                  + "; ".join(f"{k} {', '.join(v)}" for k, v in front.items() if k != "overall"))
    leaders = scores.weight_leaders
    if leaders.height:
        out.print(f"CRS leader over the weight simplex (step {scores.settings.get('simplex_step')}): "
                  + ", ".join(f"{r['encoder']} {100 * r['share']:.0f}%" for r in leaders.iter_rows(named=True)))
    print_warnings(scores)


def print_warnings(scores):
    """The scores' warnings (ties, encoders left out, no interval, ...), on stderr."""
    for w in scores.settings.get("warnings", []):
        err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


SCORE = [("results",), ("score", "bootstrap"), ("score", "reference"), ("score", "weights"), ("score", "seed"),
         ("score", "bootstrap_unit"), ("score", "crs_version"), ("store",), ("log_interval",)]


@stage_command("score", SCORE)
def score_cmd(given: dict, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """Compute the four axes, the CRS (v2 unless --crs-version 1), AUROC-vs-CRS ranks and the paired bootstrap
    from the run records."""
    from crs import stages

    _note(locate_outputs(given, "results"), quiet or as_json)
    cfg = options.to_config(given)
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval) as progress:
        scores = stages.score(Path(cfg.results), cfg.score, store=cfg.store, progress=progress)
    if as_json:
        print(json.dumps(scores.to_json()))
    elif not quiet:
        print_scores(scores, cfg.results)
        print_comparisons(scores)
        out.print(f"scored in {time.perf_counter() - t0:.1f} s", highlight=False)
    else:
        for w in scores.settings.get("warnings", []):
            err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


# ------------------------------------------------------------------- report
@stage_command("report", [("results",), ("report", "out"), ("store",), ("log_interval",)])
def report_cmd(given: dict, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """Write the scores as one self-contained HTML page, with its figures as PNG and tables as CSV and Parquet.

    --store: the store to read reliability bins from when `crs score` ran without one."""
    from crs import stages

    note = locate_outputs(given, "results")
    if note and ("report", "out") not in given:  # beside the demo's store and results, where the demo put its own
        given[("report", "out")] = str(Path(given[("results",)]).parent / "report")
    default = Path(cfgmod.Config().results)
    if ("results",) not in given and not (default / "scores" / "scores.json").is_file():
        from crs.records import ELSEWHERE

        raise BadInput(f"no scores under {default / 'scores'} (the default --results); run `crs score` first, or "
                       f"{ELSEWHERE}")
    _note(note, quiet or as_json)
    cfg = options.to_config(given)
    with progress_bar(quiet or as_json, cfg.log_interval) as progress:
        progress.add_task("report", total=None)  # the stage reports no steps: the display shows the time taken
        summary = stages.report(Path(cfg.results), cfg.report.out, store=given.get(("store",)), quiet=True)
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


# --------------------------------------------------------------------- demo
DEMO = cfgmod.parse(cfgmod.EXAMPLE, "built-in demo config")


@stage_command("demo", [("datasets", "size"), ("probe", "seeds"), ("score", "bootstrap"), ("extract", "severities"),
                        ("score", "crs_version"), ("report", "enabled"), ("log_interval",)], base=DEMO)
def demo_cmd(
    given: dict,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the demo's store and results.")] = Path("./crs-demo"),
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Run the built-in synthetic benchmark: `crs run` on the built-in config (`crs run --print-default`).

    Extract, probe, score and report with every built-in encoder; a re-run skips what is complete."""
    given.update({("store",): str(out_dir / "store.zarr"), ("results",): str(out_dir / "results"),
                  ("report", "out"): str(out_dir / "report")})
    cfg = options.to_config(given, DEMO)
    result = _run_stages(cfg, quiet=quiet or as_json, source="built-in demo config",
                         store_hint="for `crs demo`: pass a new --out folder, or the --size it was made with")
    _print_run(result, "built-in demo config", as_json=as_json, quiet=quiet, verbose=verbose)
    if not (quiet or as_json):
        out.print(demo_next(out_dir, cfg.report.enabled), highlight=False, soft_wrap=True)


def demo_next(out_dir: Path, report: bool = True) -> str:
    """Where `crs demo --out OUT_DIR` put its outputs, and the commands to run next in the same folder."""
    store, results = out_dir / "store.zarr", out_dir / "results"
    paths = f"store {store}, results {results}" + (f", report {out_dir / 'report'}" if report else "")
    defaults, q = cfgmod.Config(), shlex.quote
    # `crs probe`, `crs score` and `crs report` find the demo's folder in the current one (``locate_outputs``)
    # while the default store and results folder are absent; otherwise the paths are named
    found = out_dir == Path("./crs-demo") and not (Path(defaults.store).exists() or Path(defaults.results).exists())
    where = "" if found else f" --store {q(str(store))} --results {q(str(results))}"
    there = "" if found else f" --results {q(str(results))} --store {q(str(store))}"
    steps = [(f"crs score{there} --bootstrap 2000", "score again, other settings: crs score --help"),
             (f"crs probe --all{where} --head mlp", "MLP probes beside the linear ones"),
             (f"crs report{there}" + ("" if found else f" --out {q(str(out_dir / 'report'))}"),
              "the HTML page"),
             ("crs run --print-default > bench.toml", "a config of your own to edit, then: crs run bench.toml")]
    width = max(len(c) for c, _ in steps)
    return "\n".join([f"the demo's outputs: {paths}", "next, from this folder:",
                      *(f"  {c.ljust(width)}   # {why}" for c, why in steps)])


@app.command("encoders")
def encoders_cmd(
    as_json: JsonOpt = False,
    encoder_file: Annotated[Optional[Path], typer.Option("--encoder-file", help="Also list the records of this TOML file.")] = None,
    verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """List the encoder registry (name, family, width, input size, gated, ...)."""
    from crs import stages
    from crs.extract import encoders as encreg

    with friendly_errors(verbose):
        specs = list(encreg.ENCODERS.values()) + list(stages.encoder_records(encoder_file).values())
        if as_json:
            print(json.dumps([s.as_dict() for s in specs]))
            return
        if quiet:  # the names alone, one a line
            print("\n".join(s.name for s in specs))
            return
        t = Table("name", "family", "width", "input", "gated", "loader", "model", "pooling")
        for s in specs:
            t.add_row(s.name, s.family, str(s.width), str(s.input_size), "yes" if s.gated else "no",
                      s.loader, s.model_id if s.pretrained or s.source == "builtin" else f"{s.model_id} (random weights)",
                      s.pooling)
        show(t)
        out.print("Also: --encoder timm:NAME, --encoder hf:ORG/NAME, --encoder-file spec.toml. Gated models: accept the "
                  "terms on the model page, then set HF_TOKEN.")


PERTURBATIONS = [("datasets", "roots"), ("datasets", "image_root"), ("datasets", "modality"),
                 ("datasets", "uncertain"), ("datasets", "findings"), ("datasets", "split_seed"), ("datasets", "size"),
                 ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks")]


def perturbations_cmd(
    given: dict,
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="Dataset whose modality suite to draw "
                                                   "(`crs datasets`; a real one with --root DIR).")] = None,
    out_path: Annotated[Optional[Path], typer.Option("--out", help="PNG to write the grid to.")] = None,
    row: Annotated[int, typer.Option(help="Which image of the dataset to draw (row of its table).")] = 0,
    table: Annotated[bool, typer.Option("--table", help="Print the severity table (Markdown) and exit.")] = False,
    as_json: JsonOpt = False, verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """Draw every perturbation of a dataset's suite at every severity on one image (a PNG grid)."""
    from crs.extract import perturb

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
    from crs import stages
    from crs.extract import datasets as dsreg
    from crs.stages.steps import dataset_options

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
    import numpy as np
    import torch

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


# a tool with the dataset options of `crs extract` (one schema), not a stage of the pipeline
stage_command("perturbations", PERTURBATIONS, group=app)(perturbations_cmd)


datasets_app = typer.Typer(help="List the datasets; `crs datasets check NAME --root DIR` validates a folder.")
app.add_typer(datasets_app, name="datasets")


@datasets_app.callback(invoke_without_command=True)
def datasets_cmd(ctx: typer.Context, as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False):
    """List the datasets: built-in ones, and the real ones read from a folder with --root."""
    if ctx.invoked_subcommand is not None:
        return
    with friendly_errors(verbose):
        _list_datasets(as_json, quiet)


def _list_datasets(as_json: bool, quiet: bool) -> None:
    from crs.extract import datasets as dsreg
    from crs.extract import real

    rows = []
    for name in dsreg.names():
        d = dsreg.get(name)
        rows.append({"name": name, "task": d.task, "classes": list(d.classes), "shift_target": d.shift_target,
                     "description": d.description})
    for lay in real.LAYOUTS.values():
        rows.append({"name": lay.name, "task": lay.task, "classes": list(lay.classes), "shift_target":
                     lay.shift_target, "description": lay.description, "root": lay.root_holds, "source": lay.source})
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


# The dataset options of `crs extract`, with the same flags, defaults and requirements (one schema).
CHECK = [("datasets", "roots"), ("datasets", "image_root"), ("datasets", "modality"), ("datasets", "shift_target"),
         ("datasets", "uncertain"), ("datasets", "findings"), ("datasets", "split_seed"), ("datasets", "size"),
         ("datasets", "allow_absolute_paths"), ("datasets", "follow_symlinks"), ("log_interval",)]
# A label and class check of the data stage (one class only, a split without a class the probe needs, ...):
# ``extract.real.<LABEL_CHECK>(ds) -> list[Problem]``, called where that stage has it.
LABEL_CHECK = "check_labels"


@stage_command("check", CHECK, group=datasets_app)
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
    from crs import stages
    from crs.extract import datasets as dsreg
    from crs.stages.steps import dataset_options

    stages.check_dataset_names([name])
    if sample < 0:
        raise BadInput(f"--sample must be at least 0, not {sample}")
    given[("datasets", "roots")] = stages.parse_roots(given.pop(("datasets", "roots"), None), [name])
    cfg = options.to_config(given)
    opts = dataset_options(cfg)  # what `crs extract` passes, so both read the dataset the same way
    ds = dsreg.get(name, size=cfg.datasets.size, seed=0 if name in dsreg.BUILTIN else cfg.datasets.split_seed, **opts)
    t0 = time.perf_counter()
    with progress_bar(quiet or as_json, cfg.log_interval, unit="images") as progress:  # images decoded
        report = _check_one(ds, all_, sample, progress)
        # the target's classes and test rows are compared with a readable dataset's only
        target, target_report, target_error = (_check_shift_target(ds, opts, all_, sample, progress)
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


def _check_shift_target(ds, opts: dict, all_images: bool, sample: int, progress):
    """(the shift target ``ds`` names, its check report, a UserError's message or None); all None where ``ds``
    names none. The target is opened as extraction opens it and checked like ``ds``; where its files are
    usable, ``shift_target_of`` compares its classes and test rows with ``ds``'s."""
    from crs.extract import datasets as dsreg

    spec = getattr(ds, "shift_spec", None) or ds.shift_target
    target = report = None
    if not spec:
        return None, None, None
    try:
        target = dsreg.get(spec, size=ds.size, seed=ds.seed, **{**opts, "shift_target": None})
        report = _check_one(target, all_images, sample, progress)
        if report.usable:
            dsreg.shift_target_of(ds, **{**opts, "shift_target": None})
    except UserError as exc:
        return target, report, str(exc)
    return target, report, None


def _check_one(ds, all_images: bool, sample: int, progress):
    """``extract.real.check`` of one dataset, with the data stage's label and class checks where it has them."""
    from crs.extract import real

    report = real.check(ds, all_images=all_images, sample=sample, progress=progress)
    labels = getattr(real, LABEL_CHECK, None)
    if labels is not None and report.usable:
        report.problems.extend(labels(ds))
    return report


def print_check(report, ds) -> None:
    fatal = [p for p in report.problems if p.fatal]
    warnings = [p for p in report.problems if not p.fatal]
    for p in fatal:
        err.print(f"[red]error[/]: {escape(str(p))}", highlight=False, soft_wrap=True)
    for p in warnings:
        err.print(f"[yellow]warning[/]: {p}", highlight=False, soft_wrap=True)
    for n in report.notes:
        out.print(f"note: {n}", highlight=False, soft_wrap=True)
    if report.counts is not None:
        c = report.counts
        multilabel = "positive" in c.columns
        t = Table(title=f"{report.dataset}: {report.rows} images" + (" (positive / negative / unknown)" if
                  multilabel else ""), title_justify="left")
        t.add_column("class")
        for split in ("train", "val", "test"):
            t.add_column(split, justify="right")
        for cls in ds.classes:  # registry order, not alphabetical
            cells = []
            for split in ("train", "val", "test"):
                r = c.filter((c["class"] == cls) & (c["split"] == split))
                if r.height == 0:
                    cells.append("0")
                elif multilabel:
                    cells.append(f"{r['positive'][0]} / {r['negative'][0]} / {r['unknown'][0]}")
                else:
                    cells.append(str(r["images"][0]))
            t.add_row(cls, *cells)
        show(t)
    verdict = "usable" if report.usable else f"NOT usable ({len(fatal)} problems above)"
    out.print(f"{report.dataset} at {report.root}: {verdict}; {report.images_checked} images decoded",
              highlight=False)



store_app = typer.Typer(help="Inspect a store: `crs store verify PATH` checks every array and chunk against "
                         "what was committed; `crs store info PATH` lists what it holds.", no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command("verify")
def store_verify_cmd(
    path: Annotated[str, typer.Argument(help="The store: a path or an fsspec URL.", show_default=False,
                                        metavar="PATH")],
    repair: Annotated[bool, typer.Option("--repair", help="Also repair what can be repaired in place (what "
                                         "cannot is listed with the command that recomputes it).")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Check a whole store: every array, chunk and metadata file against what was committed. Exit 0 sound, 2 not."""
    import dataclasses
    import importlib

    with friendly_errors(verbose):
        integrity = importlib.import_module("crs.store.integrity")  # the store's own checks (numpy + zarr only)
        findings = list(integrity.verify(path, repair=repair))
        if as_json:
            print(json.dumps([dataclasses.asdict(f) for f in findings]))
        elif findings:
            text = integrity.format_findings(findings)
            (err if quiet else out).print(escape(text), highlight=False, soft_wrap=True)
        elif not quiet:
            out.print(f"{path}: every array, chunk and metadata file is as committed" + (" (nothing to repair)" if
                      repair else ""), highlight=False, soft_wrap=True)
        if findings:
            raise typer.Exit(2)


@store_app.command("info")
def store_info_cmd(
    path: Annotated[str, typer.Argument(help="The store: a path or an fsspec URL.", show_default=False,
                                        metavar="PATH")],
    as_json: JsonOpt = False, verbose: VerboseOpt = False,
):
    """What a store holds: per dataset its images, encoders, embedding arrays and the perturbation generator
    that drew its perturbed embeddings."""
    with friendly_errors(verbose):
        from crs.store import Store
        from crs.store.info import describe

        rows = describe(Store(path, mode="r"))
        if as_json:
            print(json.dumps(rows))
            return
        t = Table("dataset", "images", "encoders", "arrays complete", "perturbation generator")
        for r in rows:
            gens = ", ".join(f"{g} ({n} arrays)" for g, n in r["perturbation_generators"].items()) or "(none perturbed)"
            t.add_row(r["dataset"], str(r["images"]), ", ".join(r["encoders"]), f"{r['complete']} of {r['arrays']}",
                      gens)
        show(t)


# ---------------------------------------------------------------------- run
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


@app.command("run")
def run_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="The benchmark's TOML file.", show_default=False)] = None,
    print_default: Annotated[bool, typer.Option("--print-default", help="Print a commented example config "
                                                "(the built-in demo) and exit.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Print the config's JSON Schema (for editors) and "
                                         "exit.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Check the config and its names, run nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Recompute probe, score and report even where their "
                                        "outputs match the config (extraction always resumes).")] = False,
    crs_version: Annotated[Optional[str], typer.Option("--crs-version", help="CRS definition, overriding the "
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
        from crs import stages

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
        result = _run_stages(cfg, quiet=quiet or as_json, text=text, source=str(config), force=force)
        _print_run(result, str(config), as_json=as_json, quiet=quiet, verbose=verbose)


def check_reference(cfg: cfgmod.Config, extra: dict, text: str = "", source: str = "") -> list[str]:
    """``score.reference`` must be 'auto', 'median' or an encoder the run scores (under the name its results
    go by: the store key of a timm:/hf: id, ENCODER+mlp with the mlp head); a ConfigError naming the key and
    its line otherwise, before any stage runs. Returns the names the run scores."""
    from crs.extract import encoders as encreg
    from crs.probe import heads

    ref = cfg.score.reference
    head = heads.get(cfg.probe.head)
    scored = [head.result_name(encreg.resolve(e, extra).name) for e in cfg.encoders.names]
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


def _run_stages(cfg, *, quiet, text="", source="", force=False, store_hint=""):
    from crs import stages

    with progress_bar(quiet, cfg.log_interval) as progress:
        return stages.run(cfg, progress, text=text, source=source, force=force, store_hint=store_hint, quiet=quiet)


def _print_run(result, source: str, *, as_json: bool, quiet: bool, verbose: bool) -> None:
    """The end-of-run summary: the leaderboard, then per stage what was done or already complete, where, how long."""
    if as_json:
        print(json.dumps(result.as_json(source)))
        return
    warn_not_converged(result.probe_summaries)
    if quiet:
        return
    print_scores(result.scores, result.results)
    if verbose:
        print_comparisons(result.scores)
    else:  # what could mislead a reader of the leaderboard is said also without --verbose
        print_warnings(result.scores)
    t = Table(title=f"crs run {source}: {result.seconds:.1f} s", title_justify="left")
    for col, just in (("stage", "left"), ("done", "right"), ("already complete", "right"), ("time", "right"),
                      ("output", "left")):
        t.add_column(col, justify=just)
    for name, st in result.stages.items():
        if not st.enabled:
            t.add_row(name, "-", "-", "-", "disabled in the config")
            continue
        t.add_row(name, str(len(st.done)), str(len(st.skipped)), f"{st.seconds:.1f} s", st.out)
        if verbose:
            for item in st.done:
                t.add_row("", "", "", "", f"  done: {item}")
    show(t)
    if result.report_html:
        out.print(f"report: {result.report_html}", highlight=False)
    failed = result.stages["extract"].detail.get("failures")
    if failed:
        err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures table, "
                  "left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))


def _version(value: bool) -> None:
    if value:
        from crs import provenance

        print(provenance.version_line())
        raise typer.Exit(0)


@app.callback()
def _app(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version of CRS-Bench (with its git commit "
                                               "when run from a checkout) and exit.")] = False) -> None:
    """CRS-Bench: which pretrained medical image encoder to build on."""


def main() -> None:
    ours = threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app()
    finally:
        if ours:
            # The command has ended and its exit code is set. Python's shutdown (threads joined, modules
            # freed: up to a second after `crs score`) puts back the default action of a signal with a
            # handler of ours, so a SIGTERM then killed a finished command (exit -15, 3 in 30 late
            # SIGTERMs). An ignored signal stays ignored through it; SIGKILL still ends a stuck exit.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
