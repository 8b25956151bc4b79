"""A helper process forked to take a share of one job off a busy process, on Linux where two cores are free.

The helper inherits everything the parent built (nothing is pickled) and must touch none of the libraries
that keep threads of their own (JAX, polars, torch's pools): it runs ``work()`` and ends with ``os._exit``,
0 when ``work`` returned and 1 when it raised, without the parent's atexit functions, buffers or unwinding.
Ctrl-C and SIGTERM are the parent's to act on: they are blocked across the fork and ignored by the helper,
which dies with the parent (``PR_SET_PDEATHSIG``), so a killed parent leaves no process behind. The
parent reaps it with :meth:`Helper.end`, which kills it first if it is still running.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import warnings
from collections.abc import Callable

INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
_PR_SET_PDEATHSIG = 1


def available(minimum: int = 2) -> bool:
    """Whether forking a helper can pay: Linux, and at least ``minimum`` cores this process may use."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return False
    return len(os.sched_getaffinity(0)) >= minimum


class Helper:
    """A forked helper process, seen from its parent."""

    def __init__(self, pid: int):
        self.pid = pid
        self._reaped = False

    def end(self) -> bool:
        """Reap the helper, killing it first if it is still running. Returns whether it had to be killed."""
        if self._reaped:
            return False
        self._reaped = True
        try:
            finished, _ = os.waitpid(self.pid, os.WNOHANG)
            if finished == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return True
        except ChildProcessError:
            pass
        return False


def start(work: Callable[[], None]) -> Helper | None:
    """Fork a helper that runs ``work()``; None where no process could be had (EAGAIN, ENOMEM), in which
    case the caller does the work itself. An interrupt that came during the fork is raised here, after the
    helper is ended."""
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        with warnings.catch_warnings():
            # JAX's fork hook (a RuntimeWarning) and Python 3.12+ (a DeprecationWarning) warn of a fork beside
            # their threads: the helper runs none of their code
            warnings.filterwarnings("ignore", message=r".*fork\(\)", category=RuntimeWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return None
    if pid == 0:
        _run(work, parent, mask)  # never returns
    helper = Helper(pid)
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # an interrupt that came meanwhile is raised here
    except BaseException:
        helper.end()
        raise
    return helper


def _run(work: Callable[[], None], parent: int, mask) -> None:
    """The helper's whole life: its setup, ``work()``, and its exit."""
    code = 1
    try:
        for sig in INTERRUPTS:  # still blocked here: the parent's interrupt is the parent's
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        gc.disable()  # no finaliser of an inherited object (a JAX buffer, a thread pool) runs here
        _die_with(parent)
        work()
        code = 0
    except BaseException:  # noqa: BLE001 -- the parent does whatever the helper did not finish; nothing to print
        code = 1
    finally:
        os._exit(code)  # no atexit function, no flush of the parent's buffers, no unwinding of its stack


def _die_with(parent: int) -> None:
    """Ask Linux to SIGKILL this process when the parent dies; exit if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
