"""The ``crs`` command line: the typer app and its commands, registered from ``crs.commands``.

A leaf: each command parses its options (made from the settings schema, ``crs.commands.options``), calls a
stage of ``crs.stages`` and prints. Heavy libraries (torch, jax) are imported inside the stages, so
``crs --help`` is instant. Exit codes: ``crs.commands.exits``.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Annotated

import typer

from crs.commands import bundle, datasets, extract, listings, perturbations, probe, run, score, store
from crs.commands.exits import on_sigterm
from crs.foundations import provenance
from crs.foundations.errors import BadInput

__all__ = ["BadInput", "app", "entry", "main"]

app = typer.Typer(
    add_completion=False, rich_markup_mode=None,
    no_args_is_help=True,
    help="CRS-Bench: which pretrained medical image encoder to build on. "
    "Pipeline: `crs extract` -> `crs probe` -> `crs score`; `crs run CONFIG.toml` runs them all (and the report) "
    "from one file; `crs demo` runs the built-in benchmark.",
)

# the stages, in pipeline order: each has an option for every setting it names (command.settings)
STAGES = {"extract": extract.extract_cmd, "probe": probe.probe_cmd, "score": score.score_cmd,
          "report": score.report_cmd, "demo": run.demo_cmd}
STAGE_OPTIONS: dict[str, list[tuple[str, ...]]] = {name: fn.settings for name, fn in STAGES.items()}
for _name, _fn in STAGES.items():
    app.command(_name)(_fn)
app.command("encoders")(listings.encoders_cmd)
# a tool with the dataset options of `crs extract` (one schema), not a stage of the pipeline
app.command("perturbations")(perturbations.perturbations_cmd)
app.command("run")(run.run_cmd)
app.command("export")(bundle.export_cmd)
app.command("merge")(bundle.merge_cmd)

datasets_app = typer.Typer(help="List the datasets; `crs datasets check NAME --root DIR` validates a folder.")
datasets_app.callback(invoke_without_command=True)(listings.datasets_cmd)
datasets_app.command("check")(datasets.datasets_check_cmd)
app.add_typer(datasets_app, name="datasets")

store_app = typer.Typer(help="Inspect a store: `crs store verify PATH` checks every array and chunk against "
                        "what was committed; `crs store info PATH` lists what it holds.", no_args_is_help=True)
store_app.command("verify")(store.store_verify_cmd)
store_app.command("info")(store.store_info_cmd)
app.add_typer(store_app, name="store")


def _version(value: bool) -> None:
    if value:
        print(provenance.version_line())
        raise typer.Exit(0)


@app.callback()
def _app(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version of CRS-Bench (with its git commit "
                                               "when run from a checkout) and exit.")] = False) -> None:
    """CRS-Bench: which pretrained medical image encoder to build on."""


# OpenMP's threads (torch's CPU kernels) sleep between parallel regions instead of spinning, unless the user's
# environment says otherwise: a spinning thread holds a core that the decoding, the writer thread or another
# process needs, which on a small or shared machine doubles extract's CPU time and slows it down. libgomp
# reads the variable once, when torch loads it, after this.
OMP_WAIT_POLICY = "PASSIVE"


def main() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    ours = threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app()
    finally:
        if ours:
            # Python's shutdown after the command (threads joined, modules freed) puts back the default action
            # of a signal with a handler of ours, so a late SIGTERM would kill a finished command; an ignored
            # signal stays ignored through it, and SIGKILL still ends a stuck exit.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


def entry() -> None:
    """The ``crs`` program: ``main()``, then the end of the process without the interpreter's teardown.

    Python's own exit joins the threads and runs the atexit functions, then frees every module and object,
    and after a stage that loaded torch and JAX that last part alone takes about 2 s of a finished command
    (a third of what `crs demo` spends outside its stages). Here the first two happen as Python does them,
    stdout and stderr are flushed, and the process ends with the command's exit code. Everything the
    commands write is closed before they return (``crs.foundations.files.atomic_write``), so nothing is lost.
    An exit with a message instead of a code, or an exception, takes Python's usual way out."""
    try:
        main()
        code = 0
    except SystemExit as done:
        if done.code is not None and not isinstance(done.code, int):
            raise
        code = done.code or 0
    shutdown = getattr(threading, "_shutdown", None)  # joins the threads that are not daemons, as Python's exit
    if shutdown is None:
        sys.exit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: Python's own exit would not write it either
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    entry()
