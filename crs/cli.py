"""The ``crs`` command line: extract, probe, score, run, demo.

Heavy libraries (torch, jax) are imported inside the command that needs them, so
``crs --help`` is instant. Exit codes: 0 done, 1 a failure of ours, 2 bad input,
130 interrupted (what was written is kept; re-run to resume).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="CRS-Bench: which pretrained medical image encoder to build on. "
    "Pipeline: `crs extract` -> `crs probe` -> `crs score`; `crs run CONFIG.toml` runs them all (and the report) "
    "from one file; `crs demo` runs the built-in benchmark.",
)
# a pipe or a file gets lines wide enough for the leaderboard; a terminal keeps its own width
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)

DEFAULT_RESULTS = "./crs-results"
StoreOpt = Annotated[str, typer.Option("--store", help="Store path or fsspec URL.")]
ResultsOpt = Annotated[Path, typer.Option("--results", help="Folder for run records and scores.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")]


class BadInput(Exception):
    """The user's input is wrong; exit code 2."""


@contextmanager
def friendly_errors(verbose: bool):
    """Turn known errors into one clear line and an exit code; tracebacks only with --verbose."""
    from crs.store import StoreError

    try:
        yield
    except typer.Exit:
        raise
    except BrokenPipeError:  # the reader went away (`crs encoders -q | head`): nothing is wrong
        try:
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        except (OSError, ValueError, AttributeError):
            pass
        raise typer.Exit(0)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: everything written so far is kept; run the same command again to resume")
        raise typer.Exit(130)
    except (BadInput, StoreError, FileNotFoundError) as exc:
        if verbose:
            traceback.print_exc()
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except Exception as exc:  # a failure of ours, unless a dataset or image error (bad input)
        if isinstance(exc, _dataset_errors()):
            if verbose:
                traceback.print_exc()
            err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        if verbose:
            traceback.print_exc()
        err.print(f"[red]internal error[/] ({type(exc).__name__}): {escape(str(exc))}\nre-run with --verbose for the traceback",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _dataset_errors() -> tuple:
    """The dataset and image error classes (exit 2), from their modules if loaded: a module never
    imported cannot have raised, and importing it here would slow every command."""
    mods = (("crs.extract.real", "DatasetError"), ("crs.extract.images", "ImageError"))
    return tuple(getattr(sys.modules[m], n) for m, n in mods if m in sys.modules)


def progress_bar(quiet: bool):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task):
            return Text(f"{task.speed:.2f}/s" if task.speed else "-/s")

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err, disable=quiet,
    )


def _check_names(given: list[str], valid: list[str], what: str) -> list[str]:
    if not given:
        raise BadInput(f"no {what} given; pass --{what} NAME (valid: {', '.join(valid)}) or --all")
    for name in given:
        if name not in valid:
            raise BadInput(f"unknown {what} {name!r}; valid {what}s: {', '.join(valid)}")
    return list(dict.fromkeys(given))


def _parse_floats(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise BadInput(f"--{what} must be comma-separated numbers, not {text!r}") from None
    if not values:
        raise BadInput(f"--{what} is empty")
    return values


# ------------------------------------------------------------------ extract
def run_extract(store_path, encoders_, datasets_, *, size, chunk, batch, device, dtype, perturbations, quiet,
                dataset_options=None, extra_encoders=None, weights=None, trust_remote_code=False, workers=0,
                strict=False, severities=None, precision="auto", executor="local", ray_options=None):
    from crs.extract import datasets as dsreg
    from crs.extract import encoders as encreg
    from crs.extract import perturb
    from crs.extract.models import WeightsError
    from crs.extract.run import StrictFailure, extract
    from crs.store import Store

    # a dataset's shift target is extracted with it, so that probing can evaluate the shift
    opts = dict(dataset_options or {})
    seed = opts.pop("seed", 0)
    todo = {}
    for d in datasets_:
        ds = dsreg.get(d, size=size, seed=0 if d in dsreg.BUILTIN else seed, **opts)
        for x in (ds, dsreg.shift_target_of(ds, **{**opts, "shift_target": None})):
            if x is not None and x.name not in todo:
                todo[x.name] = x
    todo = list(todo.values())
    store = Store(store_path, mode="a")
    specs = [encreg.resolve(e, extra_encoders) for e in encoders_]
    summaries = []
    with progress_bar(quiet) as progress:
        for spec in specs:
            for d in todo:
                try:
                    summaries.append(extract(
                        store, spec, d, size=size, chunk=chunk, batch=batch, device=device, dtype=dtype,
                        perturbations=perturbations, progress=progress, weights=weights,
                        trust_remote_code=trust_remote_code, workers=workers, strict=strict,
                        severities=tuple(severities or perturb.SEVERITIES), precision=precision,
                        executor=executor, ray_options=ray_options))
                except (WeightsError, StrictFailure) as exc:
                    raise BadInput(str(exc)) from exc
                except Exception as exc:
                    if type(exc).__name__ == "RayUnavailable":  # Ray not installed or not reachable
                        raise BadInput(str(exc)) from exc
                    raise
    return store, summaries


@app.command("extract")
def extract_cmd(
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", "-e", help="Encoder name (repeatable).")] = None,
    dataset: Annotated[Optional[list[str]], typer.Option("--dataset", "-d", help="Dataset name (repeatable).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every demo encoder (no download) on every built-in dataset.")] = False,
    store: StoreOpt = "./crs-store.zarr",
    size: Annotated[float, typer.Option(help="Scale of the built-in datasets (1.0 = demo size).")] = 1.0,
    chunk: Annotated[int, typer.Option(help="Store chunk length in images (the resume unit).")] = 256,
    batch: Annotated[int, typer.Option(help="Images per forward pass.")] = 64,
    device: Annotated[Optional[str], typer.Option(help="torch device; default cuda if available, else cpu.")] = None,
    dtype: Annotated[str, typer.Option(help="Embedding dtype in the store: float16 or float32.")] = "float16",
    no_perturb: Annotated[bool, typer.Option("--no-perturb", help="Clean embeddings only.")] = False,
    root: Annotated[Optional[list[str]], typer.Option("--root", help="A real dataset's folder: NAME=DIR "
                    "(repeatable), or DIR when one real dataset is given.")] = None,
    image_root: Annotated[Optional[str], typer.Option("--image-root", help="Folder the paths of a csv:PATH "
                          "dataset are relative to (default: the CSV's folder).")] = None,
    uncertain: Annotated[str, typer.Option(help="Uncertain chest X-ray labels: ignore (masked), ones or zeros.")]
    = "ignore",
    modality: Annotated[Optional[str], typer.Option(help="A csv:PATH dataset's modality: dermatology, "
                        "ophthalmology or radiology.")] = None,
    shift_target: Annotated[Optional[str], typer.Option("--shift-target", help="A csv:PATH dataset's shift "
                            "target (a dataset name or csv:PATH).")] = None,
    split_seed: Annotated[int, typer.Option("--split-seed", help="Seed of the train/val/test split of the "
                          "file-based datasets without an official split.")] = 0,
    findings: Annotated[str, typer.Option(help="Chest X-ray findings: competition (5), all (14), or a "
                        "comma-separated list.")] = "competition",
    encoder_file: Annotated[Optional[Path], typer.Option("--encoder-file", help="TOML file of extra encoder records ([[encoder]] tables).")] = None,
    weights: Annotated[Optional[str], typer.Option("--weights", help="Local checkpoint file or folder instead of the hub (one encoder).")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow a hub model's own Python code to run.")] = False,
    workers: Annotated[int, typer.Option(help="DataLoader worker processes decoding images ahead.")] = 0,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first image that cannot be decoded.")] = False,
    severities: Annotated[Optional[str], typer.Option(help="Perturbation severities, comma-separated (default 1,2,3,4,5).")] = None,
    precision: Annotated[str, typer.Option(help="auto (bf16 autocast on CUDA, float32 on CPU), bf16 or float32.")] = "auto",
    executor: Annotated[str, typer.Option(help="local (this process) or ray (work units spread over a Ray "
                        "cluster; pip install 'crs-bench\\[ray]').")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster to join with --executor ray ('auto' or "
                       "ray://HOST:PORT); default: start a local Ray instance.")] = None,
    actors: Annotated[Optional[int], typer.Option(help="Model replicas with --executor ray (default: one per "
                      "GPU of the cluster, else one per CPU).")] = None,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Embed datasets with encoders (clean, and the test split under every perturbation) into the store.

    Encoders: registry names (`crs encoders`), timm:NAME, hf:ORG/NAME, or names from --encoder-file."""
    from crs.extract import datasets as dsreg
    from crs.extract import encoders as encreg

    with friendly_errors(verbose):
        extra = {}
        if encoder_file is not None:
            try:
                extra = {s.name: s for s in encreg.from_toml(str(encoder_file))}
            except (ValueError, TypeError) as exc:
                raise BadInput(str(exc)) from exc
        known = encreg.names() + list(extra)
        for e in encoder or []:
            if e.startswith(("timm:", "hf:")):
                try:
                    encreg.from_id(e)
                except ValueError as exc:
                    raise BadInput(str(exc)) from exc
        if all_ and not encoder:
            encs = encreg.demo_names()  # the real families download weights: name them one by one
        else:
            ids = [e for e in encoder or [] if e.startswith(("timm:", "hf:"))]
            named = [e for e in encoder or [] if not e.startswith(("timm:", "hf:"))]
            if named or not ids:
                _check_names(named, known, "encoder")
            encs = list(dict.fromkeys(encoder or []))
        if weights is not None and len(encs) != 1:
            raise BadInput(f"--weights names one checkpoint; pass exactly one --encoder (got {len(encs)})")
        if workers < 0:
            raise BadInput(f"--workers must be 0 or more, not {workers}")
        if precision not in ("auto", "bf16", "float32"):
            raise BadInput(f"--precision must be auto, bf16 or float32, not {precision!r}")
        sev = None
        if severities is not None:
            try:
                sev = tuple(sorted({int(v) for v in severities.split(",") if v.strip()}))
            except ValueError:
                raise BadInput(f"--severities must be comma-separated integers 1..5, not {severities!r}") from None
            if not sev or any(v not in (1, 2, 3, 4, 5) for v in sev):
                raise BadInput(f"--severities must be integers 1..5, not {severities!r}")
        dss = dsreg.names() if all_ and not dataset else _check_dataset_names(dataset or [])
        dataset_options = {"roots": _parse_roots(root, dss), "image_root": image_root, "uncertain": uncertain,
                           "modality": modality, "shift_target": shift_target, "seed": split_seed,
                           "findings": findings}
        if uncertain not in ("ignore", "ones", "zeros"):
            raise BadInput(f"--uncertain must be ignore, ones or zeros, not {uncertain!r}")
        if not size > 0:
            raise BadInput(f"--size must be positive, not {size!r}")
        if dtype not in ("float16", "float32"):
            raise BadInput(f"--dtype must be float16 or float32, not {dtype!r}")
        if chunk < 1 or batch < 1:
            raise BadInput("--chunk and --batch must be positive")
        if executor not in ("local", "ray"):
            raise BadInput(f"--executor must be local or ray, not {executor!r}")
        if executor == "local" and (address is not None or actors is not None):
            raise BadInput("--address and --actors apply to --executor ray only")
        if actors is not None and actors < 1:
            raise BadInput(f"--actors must be 1 or more, not {actors}")
        t0 = time.perf_counter()
        st, summaries = run_extract(store, encs, dss, size=size, chunk=chunk, batch=batch, device=device,
                                    dtype=dtype, perturbations=not no_perturb, quiet=quiet or as_json,
                                    dataset_options=dataset_options, extra_encoders=extra, weights=weights,
                                    trust_remote_code=trust_remote_code, workers=workers, strict=strict,
                                    severities=sev, precision=precision, executor=executor,
                                    ray_options={"address": address, "actors": actors})
        report = {"store": st.path, "seconds": round(time.perf_counter() - t0, 2),
                  "runs": [s.as_dict() for s in summaries]}
        if as_json:
            print(json.dumps(report))
        elif not quiet:
            written = sum(s.chunks_written for s in summaries)
            skipped = sum(s.chunks_skipped for s in summaries)
            imgs = sum(s.forward_images for s in summaries)
            out.print(f"extracted {len(summaries)} (encoder, dataset) pairs into {st.path}: {written} chunks "
                      f"written, {skipped} already complete, {imgs} forward passes in {report['seconds']:.1f} s")
            failed = {s.dataset: s.failures for s in summaries if s.failures}
            if failed:
                err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures "
                          "table, left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))


def _check_dataset_names(given: list[str]) -> list[str]:
    from crs.extract import datasets as dsreg

    if not given:
        raise BadInput(f"no dataset given; pass --dataset NAME (valid: {', '.join(dsreg.all_names())}) or --all")
    for name in given:
        if not dsreg.is_known(name):
            raise BadInput(f"unknown dataset {name!r}; valid datasets: {', '.join(dsreg.all_names())}")
    return list(dict.fromkeys(given))


def _parse_roots(values: list[str] | None, datasets_: list[str]) -> dict[str, str]:
    """--root NAME=DIR binds a folder to a real dataset; a bare --root DIR goes to the one real dataset given."""
    from crs.extract import datasets as dsreg

    roots, bare = {}, []
    for v in values or []:
        name, sep, path = v.partition("=")
        if sep and name in dsreg.REAL:
            roots[name] = path
        else:
            bare.append(v)
    unbound = [d for d in datasets_ if d in dsreg.REAL and d not in roots]
    if bare:
        if len(bare) > 1 or len(unbound) != 1:
            raise BadInput(f"--root {bare[0]!r} names no dataset and the datasets needing a folder are "
                           f"{unbound or 'none'}; pass --root NAME=DIR for each of {', '.join(dsreg.REAL)}")
        roots[unbound[0]] = bare[0]
    return roots


# -------------------------------------------------------------------- probe
def run_probe(store_path, results, pairs, *, seeds, fractions, l2, quiet, select_by="loss", tol=1e-4, on_done=None,
              head="linear", hidden=None):
    from crs.probe.run import DEFAULT_HIDDEN, head_name, probe

    from crs.store import Store

    store = Store(store_path, mode="a")
    summaries = []
    with progress_bar(quiet) as progress:
        task = progress.add_task("probes", total=len(pairs))
        for enc, d in pairs:
            progress.update(task, description=f"probes {head_name(enc, head)} × {d}")
            summaries.append(probe(store, enc, d, results=Path(results), seeds=seeds, fractions=fractions,
                                   l2_grid=l2, select_by=select_by, tol=tol, head=head,
                                   hidden=DEFAULT_HIDDEN if hidden is None else hidden))
            progress.advance(task)
            if on_done is not None:  # crs run records each pair's settings as soon as it is written
                on_done(summaries[-1])
    return summaries


@app.command("probe")
def probe_cmd(
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", "-e", help="Encoder (repeatable).")] = None,
    dataset: Annotated[Optional[list[str]], typer.Option("--dataset", "-d", help="Dataset (repeatable).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every (encoder, dataset) with embeddings in the store.")] = False,
    store: StoreOpt = "./crs-store.zarr",
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    seeds: Annotated[int, typer.Option(help="Number of probe seeds.")] = 5,
    fractions: Annotated[str, typer.Option(help="Label fractions, comma-separated.")] = "0.01,0.02,0.05,0.1,0.25,0.5,1",
    l2: Annotated[str, typer.Option(help="L2 grid, comma-separated.")] = "1e-3,1e-2,1e-1,1",
    select_by: Annotated[str, typer.Option("--select-by", help="Choose L2 per seed and fraction by validation "
                                           "'loss' (NLL) or 'auroc'.")] = "loss",
    tol: Annotated[float, typer.Option(help="Gradient tolerance each linear probe is solved to (--head mlp "
                                       "probes have their own stopping rule).")] = 1e-4,
    head: Annotated[str, typer.Option("--head", help="Probe head: 'linear', or 'mlp' (Dense-GELU-Dense; --l2 is "
                                      "its weight-decay grid; results go under the name ENCODER+mlp).")] = "linear",
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="Hidden width of the --head mlp probe "
                                                  "(default 128).")] = None,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Train linear probes (all seeds x label fractions x L2 at once) and evaluate them.

    With --head mlp, one-hidden-layer MLP probes instead, written as a model of their own, ENCODER+mlp."""
    from crs.extract import datasets as dsreg
    from crs.extract import encoders as encreg
    from crs.probe.run import HEADS, pairs_in_store
    from crs.store import Store

    with friendly_errors(verbose):
        dataset = [dsreg.store_name(d) for d in dataset] if dataset else dataset  # csv:PATH -> its store name
        fr = tuple(sorted(set(_parse_floats(fractions, "fractions"))))
        grid = tuple(sorted(set(_parse_floats(l2, "l2"))))
        if any(not v > 0 for v in grid):
            raise BadInput(f"--l2 values must be positive: {l2!r}")
        if any(not 0 < f <= 1 for f in fr):
            raise BadInput(f"--fractions must lie in (0, 1]: {fractions!r}")
        if 1.0 not in fr:
            raise BadInput("--fractions must include 1 (the full-label probe defines D, C and R)")
        if seeds < 1:
            raise BadInput(f"--seeds must be at least 1, not {seeds}")
        if select_by not in ("loss", "auroc"):
            raise BadInput(f"--select-by must be 'loss' or 'auroc', not {select_by!r}")
        if not 0 < tol < 1:
            raise BadInput(f"--tol must lie in (0, 1), not {tol!r}")
        if head not in HEADS:
            raise BadInput(f"--head must be {' or '.join(repr(h) for h in HEADS)}, not {head!r}")
        if hidden is not None and head != "mlp":
            raise BadInput(f"--hidden {hidden} applies to --head mlp only; add --head mlp or drop --hidden")
        if hidden is not None and hidden < 1:
            raise BadInput(f"--hidden must be at least 1, not {hidden}; it is the MLP's hidden width (default 128)")
        st = Store(store, mode="r")
        available = pairs_in_store(st)
        known_encoders = sorted(set(encreg.names()) | {e for e, _ in available})
        if encoder:
            _check_names(encoder, known_encoders, "encoder")
        if dataset:
            _check_names(dataset, sorted(set(dsreg.names()) | set(dsreg.REAL) | set(st.datasets())), "dataset")
        for d in dataset or []:
            if st.has_dataset(d) and not (st.dataset(d).split == 0).any():
                raise BadInput(f"dataset {d!r} has no training split (an external test set); it is evaluated "
                               "as the shift target of the dataset that names it, not probed itself")
        held = ", ".join(f"{e} × {d}" for e, d in available) or "nothing yet"
        if all_:
            pairs = [(e, d) for e, d in available
                     if (not encoder or e in encoder) and (not dataset or d in dataset)]
            if not pairs:
                raise BadInput(f"nothing to probe in {store!r} for that selection (it holds: {held}); "
                               "run `crs extract` first")
        else:
            if not encoder or not dataset:
                raise BadInput("pass --encoder and --dataset, or --all")
            pairs = [(e, d) for e in encoder for d in dataset]
            for e, d in pairs:
                if (e, d) not in available:
                    raise BadInput(f"no complete clean embeddings of {d!r} by {e!r} in {store!r} (it holds: "
                                   f"{held}); run `crs extract --encoder {e} --dataset {d} --store {store}`")
        t0 = time.perf_counter()
        summaries = run_probe(store, results, pairs, seeds=tuple(range(seeds)), fractions=fr,
                              l2=grid, quiet=quiet or as_json, select_by=select_by, tol=tol, head=head, hidden=hidden)
        report = {"results": str(results), "seconds": round(time.perf_counter() - t0, 2),
                  "runs": [s.as_dict() for s in summaries]}
        if as_json:
            print(json.dumps(report))
        elif not quiet:
            probes = sum(s.probes for s in summaries)
            out.print(f"fitted {probes} probes for {len(summaries)} (encoder, dataset) pairs in "
                      f"{report['seconds']:.1f} s; run records in {Path(results) / 'run_records'}")
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


# -------------------------------------------------------------------- score
def run_score(results, *, reference, weights, n_bootstrap, seed, store=None, bootstrap_unit="seed", pairs=None,
              quiet=True):
    from crs import records
    from crs.extract.encoders import default_reference
    from crs.scoring.run import METRIC_TABLE, score
    from crs.store import Store, StoreError

    table = records.read(results)
    if pairs is not None:  # crs run scores the (encoder, dataset) pairs its config names, not older leftovers
        import polars as pl

        keep = pl.DataFrame({"encoder": [e for e, _ in pairs], "dataset": [d for _, d in pairs]})
        table = table.join(keep, on=["encoder", "dataset"], how="semi")
    encoders_ = sorted(table["encoder"].unique().to_list())
    ref = default_reference(encoders_) if reference == "auto" else reference
    opened, note = None, None
    if store is not None:
        try:
            opened = Store(str(store), mode="r")
        except StoreError as exc:  # the run records still allow a score: say so and go on
            note = f"{exc}; scoring from the run records alone"
    try:
        # the bootstrap is vectorised, so there is nothing to count: the bar shows the elapsed time
        with progress_bar(quiet) as progress:
            progress.add_task(f"score ({table['encoder'].n_unique()} encoders, {bootstrap_unit} bootstrap "
                              f"B={n_bootstrap})", total=None)
            scores = score(table, reference=ref, weights=weights, n_bootstrap=n_bootstrap, seed=seed,
                           bootstrap_unit=bootstrap_unit, store=opened)
    except ValueError as exc:  # the run records or the options do not allow a score
        raise BadInput(str(exc)) from exc
    if note:
        scores.settings["warnings"].insert(0, note)
    scores.write(Path(results) / "scores", metric_table=Path(results) / METRIC_TABLE)
    return scores


def leaderboard(scores) -> Table:
    t = Table(title="CRS leaderboard (overall, comparison set)", title_justify="left")
    for col, just in (("rank", "right"), ("encoder", "left"), ("CRS", "right"), ("95% interval", "center"),
                      ("tier", "center"), ("AUROC", "right"), ("AUROC rank", "right"),
                      ("C", "right"), ("L", "right"), ("R", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for row in scores.encoders.iter_rows(named=True):
        t.add_row(
            f"{row['crs_rank']:g}", row["encoder"], f"{row['crs']:.1f}", f"[{row['crs_low']:.1f}, {row['crs_high']:.1f}]",
            "★" if row["tier"] else "", f"{row['auroc']:.3f}", f"{row['auroc_rank']:g}",
            f"{row['calibration']:.3f}", f"{row['label_efficiency']:.3f}",
            f"{row['robustness']:.3f}",
        )
    return t


def print_scores(scores, results):
    s = scores.settings
    rc = scores.rank_comparison
    out.print(leaderboard(scores))
    w = ", ".join(f"{k} {v:.3g}" for k, v in s["weights"].items())
    out.print(f"AUROC = D (discrimination); C calibration, L label efficiency, R robustness (seed means over "
              f"{', '.join(s['datasets'])}).\n★ = leading tier (paired {s['bootstrap']['unit']} bootstrap, "
              f"B={s['bootstrap']['n']}); reference: {s['reference']}; weights: {w}; CRS v{s['crs_version']}")
    out.print(f"AUROC vs CRS: {rc['discordant_pairs']} of {rc['pairs']} pairs reversed, mean |rank shift| "
              f"{rc['mean_abs_rank_shift']:.2f}, Kendall tau-b {rc['kendall_tau_b']:.2f}")
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
    for w in scores.settings.get("warnings", []):
        err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


def _parse_weights(text: str) -> tuple[float, float, float]:
    parts = text.split(",")
    try:
        vals = tuple(float(eval_fraction(p)) for p in parts)
    except (ValueError, ZeroDivisionError):
        raise BadInput(f"--weights must be three numbers (dominance,balance,worst), not {text!r}") from None
    if len(vals) != 3:
        raise BadInput(f"--weights needs three numbers (dominance,balance,worst), got {len(vals)}: {text!r}")
    return vals  # type: ignore[return-value]


def eval_fraction(text: str) -> float:
    text = text.strip()
    if "/" in text:
        a, b = text.split("/", 1)
        return float(a) / float(b)
    return float(text)


@app.command("score")
def score_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap replicates.")] = 1000,
    reference: Annotated[str, typer.Option(help="Reference encoder, 'median', or 'auto' (the registry's).")] = "auto",
    weights: Annotated[str, typer.Option(help="CRS weights dominance,balance,worst.")] = "1/3,1/3,1/3",
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
    bootstrap_unit: Annotated[str, typer.Option(
        "--bootstrap-unit", help="Resample 'seed' (crs-v1), test 'image' (needs --store) or 'both'.")] = "seed",
    store: StoreOpt = "./crs-store.zarr",
):
    """Compute the four axes, CRS v1, AUROC-vs-CRS ranks and the paired bootstrap from the run records."""
    with friendly_errors(verbose):
        if bootstrap < 1:
            raise BadInput(f"--bootstrap must be at least 1, not {bootstrap}")
        if bootstrap_unit not in ("seed", "image", "both"):
            raise BadInput(f"--bootstrap-unit must be seed, image or both, not {bootstrap_unit!r}")
        t0 = time.perf_counter()
        scores = run_score(results, reference=reference, weights=_parse_weights(weights), n_bootstrap=bootstrap,
                           seed=seed, store=store, bootstrap_unit=bootstrap_unit, quiet=quiet or as_json)
        if as_json:
            print(json.dumps(scores.to_json()))
        elif not quiet:
            print_scores(scores, results)
            print_comparisons(scores)
            out.print(f"scored in {time.perf_counter() - t0:.1f} s", highlight=False)
        else:
            for w in scores.settings.get("warnings", []):
                err.print(f"[yellow]warning[/]: {w}", highlight=False, soft_wrap=True)


@app.command("report")
def report_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Folder for report.html, figures/ and tables/ "
                                                    "(default RESULTS/report).")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="Store to read reliability bins from when "
                                                 "`crs score` ran without one.")] = None,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Write the scores as one self-contained HTML page, with its figures as PNG and tables as CSV and Parquet."""
    from crs.scoring.report import write_report

    with friendly_errors(verbose):
        target = out_dir if out_dir is not None else Path(results) / "report"
        summary = write_report(results, target, store=store, quiet=True)
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
# The demo embeds two severities of each family (2 and 4) instead of five: the modality
# suites have 8-15 families, and five severities would make the laptop demo ~2.5x slower.
DEMO_SEVERITIES = "2,4"
@app.command("demo")
def demo_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the demo's store and results.")] = Path("./crs-demo"),
    size: Annotated[float, typer.Option(help="Scale of the built-in datasets.")] = 1.0,
    seeds: Annotated[int, typer.Option(help="Probe seeds.")] = 5,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap replicates.")] = 1000,
    severities: Annotated[str, typer.Option(help="Perturbation severities of the demo (crs extract uses 1..5); "
                                                 "'1,2,3,4,5' for the full suites.")] = DEMO_SEVERITIES,
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip the HTML report stage.")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Run the built-in synthetic benchmark: `crs run` on the built-in config (`crs run --print-default`).

    Extract, probe, score and report with every built-in encoder; a re-run skips what is complete."""
    from crs import config as cfgmod

    with friendly_errors(verbose):
        if not size > 0 or seeds < 1 or bootstrap < 1:
            raise BadInput(f"--size must be positive and --seeds, --bootstrap at least 1 (got {size}, {seeds}, "
                           f"{bootstrap})")
        try:
            sev = tuple(sorted({int(v) for v in severities.split(",") if v.strip()}))
        except ValueError:
            sev = ()
        if not sev or any(v not in (1, 2, 3, 4, 5) for v in sev):
            raise BadInput(f"--severities must be comma-separated integers 1..5, not {severities!r}")
        cfg = cfgmod.with_overrides(
            cfgmod.parse(cfgmod.EXAMPLE, "built-in demo config"),
            store=str(out_dir / "store.zarr"), results=str(out_dir / "results"),
            datasets={"size": size}, probe={"seeds": seeds}, score={"bootstrap": bootstrap},
            extract={"severities": sev}, report={"enabled": not no_report, "out": str(out_dir / "report")})
        result = _run_pipeline(cfg, quiet=quiet or as_json, source="built-in demo config",
                               store_hint="for `crs demo`: pass a new --out folder, or the --size it was made with")
        _print_run(result, "built-in demo config", as_json=as_json, quiet=quiet, verbose=verbose)


@app.command("encoders")
def encoders_cmd(
    as_json: JsonOpt = False,
    encoder_file: Annotated[Optional[Path], typer.Option("--encoder-file", help="Also list the records of this TOML file.")] = None,
    verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """List the encoder registry (name, family, width, input size, gated, ...)."""
    from crs.extract import encoders as encreg

    with friendly_errors(verbose):
        specs = list(encreg.ENCODERS.values())
        if encoder_file is not None:
            try:
                specs += encreg.from_toml(str(encoder_file))
            except (ValueError, TypeError) as exc:
                raise BadInput(str(exc)) from exc
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
        out.print(t)
        out.print("Also: --encoder timm:NAME, --encoder hf:ORG/NAME, --encoder-file spec.toml. Gated models: accept the "
                  "terms on the model page, then set HF_TOKEN.")


@app.command("perturbations")
def perturbations_cmd(
    dataset: Annotated[Optional[str], typer.Option("--dataset", "-d", help="Dataset whose modality suite to draw.")] = None,
    out_path: Annotated[Optional[Path], typer.Option("--out", help="PNG to write the grid to.")] = None,
    row: Annotated[int, typer.Option(help="Which image of the dataset to draw (row of its table).")] = 0,
    table: Annotated[bool, typer.Option("--table", help="Print the severity table (Markdown) and exit.")] = False,
    as_json: JsonOpt = False, verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """Draw every perturbation of a dataset's suite at every severity on one image (a PNG grid)."""
    from crs.extract import perturb

    with friendly_errors(verbose):
        if table:
            if as_json:
                print(json.dumps({"severity": {k: {"parameter": p, "values": list(v), "meaning": m}
                                               for k, (p, v, m) in perturb.SEVERITY.items()},
                                  "suites": {k: list(v) for k, v in perturb.SUITES.items()}}))
            else:
                print(perturb.table_markdown())
            return
        if dataset is None or out_path is None:
            raise BadInput("pass --dataset NAME and --out grid.png (or --table)")
        from crs.extract import datasets as dsreg

        if dataset not in dsreg.names():
            raise BadInput(f"unknown dataset {dataset!r}; valid datasets: {', '.join(dsreg.names())}")
        import numpy as np
        import torch

        ds = dsreg.get(dataset)
        n = len(ds.table().ids)
        if not 0 <= row < n:
            raise BadInput(f"--row must be in 0..{n - 1}, not {row}")
        modality = ds.modality
        if modality is None:
            raise BadInput(f"dataset {dataset!r} has no modality, so no perturbation suite")
        img = ds.load_image(row)
        x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div(255)
        canvas = perturb.grid(x, str(ds.table().ids[row]), modality)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        canvas.save(out_path)
        families = perturb.suite(modality)
        if as_json:
            print(json.dumps({"out": str(out_path), "dataset": dataset, "modality": modality,
                              "families": list(families), "severities": list(perturb.SEVERITIES)}))
        elif not quiet:
            out.print(f"{dataset} ({modality}): {len(families)} families x {len(perturb.SEVERITIES)} severities "
                      f"drawn on image {ds.table().ids[row]} -> {out_path}")


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
    out.print(t)
    out.print("csv:PATH: a CSV with 'path' and 'label' (or 'label:NAME' columns), optional 'group', 'split', 'id'; "
              "images under --image-root")


@datasets_app.command("check")
def datasets_check_cmd(
    name: Annotated[str, typer.Argument(help="Dataset name (isic2019, aptos2019, chexpert, mimic-cxr, csv:PATH).")],
    root: Annotated[Optional[str], typer.Option("--root", help="The dataset's folder as it ships.")] = None,
    image_root: Annotated[Optional[str], typer.Option("--image-root", help="Image folder of a csv:PATH dataset.")]
    = None,
    all_: Annotated[bool, typer.Option("--all", help="Decode every image, not a sample.")] = False,
    sample: Annotated[int, typer.Option(help="Images decoded when --all is not given.")] = 200,
    uncertain: Annotated[str, typer.Option(help="Uncertain-label policy: ignore, ones or zeros.")] = "ignore",
    modality: Annotated[str, typer.Option(help="Modality of a csv:PATH dataset.")] = "radiology",
    split_seed: Annotated[int, typer.Option("--split-seed", help="Split seed.")] = 0,
    findings: Annotated[str, typer.Option(help="Chest X-ray findings: competition, all, or a list.")] = "competition",
    as_json: JsonOpt = False, verbose: VerboseOpt = False, quiet: QuietOpt = False,
):
    """Validate a dataset folder before a long run: files, ids, label codes, columns, images. Exit 0 usable, 2 not."""
    from crs.extract import datasets as dsreg
    from crs.extract import real

    with friendly_errors(verbose):
        _check_dataset_names([name])
        if sample < 0:
            raise BadInput(f"--sample must be at least 0, not {sample}")
        roots = {name: root} if root is not None else {}
        ds = dsreg.get(name, seed=0 if name in dsreg.BUILTIN else split_seed, roots=roots, image_root=image_root,
                       uncertain=uncertain, modality=modality, findings=findings)
        t0 = time.perf_counter()
        with progress_bar(quiet or as_json) as progress:
            report = real.check(ds, all_images=all_, sample=sample, progress=progress)
        if as_json:
            print(json.dumps(report.as_dict()))
        elif quiet:  # the fatal problems alone; the exit code says usable (0) or not (2)
            for p in report.problems:
                if p.fatal:
                    err.print(f"[red]error[/]: {escape(str(p))}", highlight=False, soft_wrap=True)
        else:
            print_check(report, ds)
            out.print(f"checked in {time.perf_counter() - t0:.1f} s", highlight=False)
        if not report.usable:
            raise typer.Exit(2)


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
        out.print(t)
    verdict = "usable" if report.usable else f"NOT usable ({len(fatal)} problems above)"
    out.print(f"{report.dataset} at {report.root}: {verdict}; {report.images_checked} images decoded",
              highlight=False)


# ---------------------------------------------------------------------- run
@app.command("run")
def run_cmd(
    config: Annotated[Optional[Path], typer.Argument(help="The benchmark's TOML file.", show_default=False)] = None,
    print_default: Annotated[bool, typer.Option("--print-default", help="Print a commented example config "
                                                "(the built-in demo) and exit.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Check the config and its names, run nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Recompute probe, score and report even where their "
                                        "outputs match the config (extraction always resumes).")] = False,
    as_json: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = False,
):
    """Run a whole benchmark from one TOML file: extract, probe, score and report, skipping what is current.

    `crs run --print-default > bench.toml` writes an example to start from."""
    from crs import config as cfgmod

    with friendly_errors(verbose):
        if print_default:
            print(cfgmod.EXAMPLE, end="")
            return
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
        try:
            cfg = cfgmod.resolve(cfgmod.parse(text, str(config)), config.resolve().parent)
        except cfgmod.ConfigError as exc:
            raise BadInput(str(exc)) from None
        if check:
            from crs import pipeline

            try:
                pipeline.check_names(cfg, text=text, source=str(config))
            except cfgmod.ConfigError as exc:
                raise BadInput(str(exc)) from None
            if as_json:
                print(json.dumps({"config": str(config), "ok": True, "settings": cfgmod.as_dict(cfg)}))
            elif not quiet:
                out.print(f"{config}: valid ({len(cfg.encoders.names)} encoders x {len(cfg.datasets.names)} "
                          f"datasets; store {cfg.store}, results {cfg.results})", highlight=False)
            return
        result = _run_pipeline(cfg, quiet=quiet or as_json, text=text, source=str(config), force=force)
        _print_run(result, str(config), as_json=as_json, quiet=quiet, verbose=verbose)


def _run_pipeline(cfg, *, quiet, text="", source="", force=False, store_hint=""):
    from crs import config as cfgmod
    from crs import pipeline

    try:
        return pipeline.run(cfg, quiet=quiet, text=text, source=source, force=force, store_hint=store_hint)
    except cfgmod.ConfigError as exc:
        raise BadInput(str(exc)) from None


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
    out.print(t)
    if result.report_html:
        out.print(f"report: {result.report_html}", highlight=False)
    failed = result.stages["extract"].detail.get("failures")
    if failed:
        err.print("[yellow]warning[/]: images that could not be decoded (recorded in the store's failures table, "
                  "left out later): " + ", ".join(f"{d}: {n}" for d, n in failed.items()))


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
