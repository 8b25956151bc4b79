"""Exit codes: 0 done, 1 a failure of ours, 2 bad input (``crs.foundations.errors.UserError``, or an OSError of the
user's files), 130 interrupted by Ctrl-C and 143 by SIGTERM (what was committed is kept; re-run to resume)."""

from __future__ import annotations

import signal
import traceback
from contextlib import contextmanager

import typer
from rich.markup import escape

from crs.commands.console import err, quiet_stdout
from crs.foundations.errors import UserError, user_os_error


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the program unwinds as on Ctrl-C: ``finally`` blocks run, locks
    are released, what was committed stays (exit 143 instead of 130)."""


def on_sigterm(signum, frame) -> None:
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
    """A UserError (or an OSError of the user's files, ``crs.foundations.errors.user_os_error``) is one clear line and
    exit 2; anything else is our bug, exit 1, saying so; tracebacks only with --verbose. Ctrl-C exits 130,
    SIGTERM 143, each after a message."""
    try:
        yield
    except typer.Exit:
        raise
    except BrokenPipeError:  # the reader went away (`crs encoders -q | head`): nothing is wrong
        quiet_stdout()
        raise typer.Exit(0) from None
    except KeyboardInterrupt as exc:
        what, code = ("terminated (SIGTERM)", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        err.print(f"[yellow]{what}[/]: everything committed so far is kept; run the same command again to resume",
                  soft_wrap=True)
        raise typer.Exit(code) from None
    except UserError as exc:
        raise _user(exc, verbose) from None
    except OSError as exc:
        mine = user_os_error(exc)
        if mine is None:
            raise _bug(exc, verbose) from None
        raise _user(mine, verbose) from None
    except Exception as exc:
        raise _bug(exc, verbose) from None
