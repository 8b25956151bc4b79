"""What the commands share: the --json/--quiet/--verbose options, and the command built from settings of
the schema (``stage_command``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated

import typer

from crs.commands import options
from crs.commands.exits import friendly_errors
from crs.foundations import config as cfgmod

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More detail: tracebacks on errors; where a command "
                                          "scores or reports, the scores' notes and each figure file written.")]

def stage_command(paths: list[tuple[str, ...]], base: cfgmod.Config | None = None):
    """Make ``fn(given, **own options)`` a typer command with an option for each setting in ``paths``.

    typer reads the signature, so the command's signature is made here: the settings' options
    (``crs.commands.options.parameter``) followed by ``fn``'s own (--all, --json, ...). ``fn`` receives the
    settings given, checked, as {path: value}; errors anywhere become exit codes. The command's
    ``settings`` attribute names the settings it has options for; crs/cli.py registers it.
    """
    shown = base or cfgmod.Config()

    def make(fn: Callable) -> Callable:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]

        def command(**values):
            with friendly_errors(values.get("verbose", False)):
                given = options.read(paths, values)
                fn(given, **values)

        command.__signature__ = inspect.Signature([options.parameter(p, shown) for p in paths]
                                                  + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own])
        command.__doc__, command.__name__ = fn.__doc__, fn.__name__
        command.settings = list(paths)
        return command
    return make
