"""The report's figure renderer: the same files from one process or two, and the parent finishes the job
whatever happens to its forked helper (crashed, stuck, or the parent itself killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from crs.scoring.report import render

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the helper is forked on Linux only")


class Fake:
    """Stands for a matplotlib figure: savefig writes bytes of its own, records which process drew it,
    and can misbehave in the helper (any process but the one that built it). With ``wait``, the parent
    draws nothing until the helper has taken a figure (it writes its pid to ``wait`` first), so each case sees the
    helper at work however slowly it starts."""

    dpi = 72

    def __init__(self, name: str, log: Path, *, in_helper=None, wait: Path | None = None):
        self.name, self.log, self.in_helper, self.wait = name, log, in_helper, wait
        self.parent = os.getpid()

    def savefig(self, buf, format, dpi):  # noqa: A002 -- matplotlib's keyword
        helper = os.getpid() != self.parent
        if helper and self.wait is not None:  # its pid, whole (renamed into place)
            part = self.wait.with_name(f"{self.wait.name}.{os.getpid()}")
            part.write_text(str(os.getpid()))
            part.replace(self.wait)
        if helper and self.in_helper:
            self.in_helper(self)
        if not helper and self.wait is not None:
            deadline = time.monotonic() + 60
            while not self.wait.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self.wait.exists(), "the helper took no figure in 60 s"
        with open(self.log, "a") as f:
            f.write(f"{self.name} {os.getpid()}\n")
        buf.write(f"PNG {self.name}".encode() * 50)


def _figures(tmp_path: Path, n: int, **kw) -> list[tuple[str, Fake]]:
    return [(f"f{i:02d}", Fake(f"f{i:02d}", tmp_path / "log", **kw)) for i in range(n)]


def _draws(tmp_path: Path) -> list[tuple[str, int]]:
    return [(name, int(pid)) for name, pid in (ln.split() for ln in (tmp_path / "log").read_text().splitlines())]


def _run(figures, folder: Path, **kw) -> dict[str, bytes]:
    folder.mkdir(exist_ok=True)
    return render.render_figures(figures, lambda stem: folder / f"{stem}.png", **kw)


def _expected(figures) -> dict[str, bytes]:
    return {stem: f"PNG {stem}".encode() * 50 for stem, _ in figures}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_both_processes_draw_each_figure_once_and_the_files_are_the_serial_ones(tmp_path):
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()  # JAX's threads are up, as in `crs run`: its fork hook warns, and must be quiet
    figures = _figures(tmp_path, 12, wait=tmp_path / "helper-took-one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _run(figures, tmp_path / "two", parallel=True)
    assert not caught, [str(w.message) for w in caught]  # nothing on a user's terminal
    assert got == _expected(figures)
    draws = _draws(tmp_path)
    assert sorted(name for name, _ in draws) == sorted(got)  # each figure drawn exactly once
    assert {pid for _, pid in draws} - {os.getpid()}, "the helper drew none"
    serial = _run(_figures(tmp_path, 12), tmp_path / "one", parallel=False)
    assert serial == got
    assert _files(tmp_path / "one") == _files(tmp_path / "two")  # no temporary left beside them


def _crash(fig):
    os.kill(os.getpid(), signal.SIGKILL)


def _raise(fig):
    raise RuntimeError("a helper that fails")


@pytest.mark.parametrize("misbehave", [_crash, _raise], ids=["killed", "raises"])
def test_figures_the_helper_did_not_finish_are_drawn_by_the_parent(tmp_path, misbehave):
    figures = _figures(tmp_path, 8, in_helper=misbehave, wait=tmp_path / "helper-took-one")
    got = _run(figures, tmp_path / "out", parallel=True)
    assert got == _expected(figures)
    assert _files(tmp_path / "out") == {f"{s}.png": b for s, b in got.items()}


def test_a_stuck_helper_is_killed_and_its_figures_drawn_by_the_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "STALL_SECONDS", 0.5)

    def stick(fig):
        time.sleep(3600)

    figures = _figures(tmp_path, 6, in_helper=stick, wait=tmp_path / "helper-took-one")
    got = _run(figures, tmp_path / "out", parallel=True)
    assert got == _expected(figures)
    assert _files(tmp_path / "out") == {f"{s}.png": b for s, b in got.items()}
    pid = int((tmp_path / "helper-took-one").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


# A process that renders six figures, each waiting for TMP/go, with a helper (each drawing process touches
# TMP/pid-PID); SIGTERM unwinds it as crs.cli's handler does, and every process that unwinds the render's
# caller touches TMP/unwound-PID.
GATED = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from crs.scoring.report import render
    def terminated(*_):
        raise SystemExit(143)
    signal.signal(signal.SIGTERM, terminated)
    tmp = Path(sys.argv[1])
    class Gate:
        dpi = 72
        def savefig(self, buf, format, dpi):
            (tmp / f"pid-{os.getpid()}").touch()
            while not (tmp / "go").exists():
                time.sleep(0.01)
            buf.write(b"png")
    out = tmp / "out"
    out.mkdir()
    try:
        got = render.render_figures([(f"f{i}", Gate()) for i in range(6)], lambda s: out / f"{s}.png", parallel=True)
        assert got == {f"f{i}": b"png" for i in range(6)}
    finally:
        (tmp / f"unwound-{os.getpid()}").touch()
""")


def _gated(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """GATED started in a session of its own, once both processes draw: (the process, the helper's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", GATED, str(tmp_path)], start_new_session=True,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = {int(p.name.split("-")[1]) for p in tmp_path.glob("pid-*")}
    assert proc.pid in pids and len(pids) == 2, pids
    (helper,) = pids - {proc.pid}
    return proc, helper


def _unwound(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.glob("unwound-*")]


def test_the_helper_dies_with_a_killed_parent(tmp_path):
    """SIGKILL the parent while both draw: the helper must not live on and write into the folder."""
    proc, helper = _gated(tmp_path)
    proc.kill()
    proc.wait()  # not communicate(): a helper that lived on would hold the stderr pipe open
    proc.stderr.close()
    deadline = time.monotonic() + 30
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _alive(helper):
        os.kill(helper, signal.SIGKILL)
        pytest.fail(f"the helper {helper} outlived its killed parent")


def _alive(pid: int) -> bool:
    """Running or stopped; a zombie (dead, not yet reaped by whoever adopted it) counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_it_forks_only_where_it_pays(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not render.parallel_ok(17)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert render.parallel_ok(17)
    assert not render.parallel_ok(3)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not render.parallel_ok(17)


def test_a_failed_fork_renders_everything_here_and_leaks_no_descriptor(tmp_path, monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    before = len(os.listdir("/proc/self/fd"))
    figures = _figures(tmp_path, 6)
    assert _run(figures, tmp_path / "out", parallel=True) == _expected(figures)
    assert {pid for _, pid in _draws(tmp_path)} == {os.getpid()}
    assert len(os.listdir("/proc/self/fd")) == before


def test_ctrl_c_to_the_whole_group_unwinds_the_parent_only(tmp_path):
    """SIGINT to the process group (a terminal's Ctrl-C) while both draw: the parent unwinds as on any
    Ctrl-C; the helper neither unwinds the parent's stack (its `finally` blocks, a lock's release) nor
    outlives it."""
    proc, helper = _gated(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert b"KeyboardInterrupt" in err
    assert _unwound(tmp_path) == [f"unwound-{proc.pid}"]
    assert not _alive(helper)
    assert not list((tmp_path / "out").iterdir())  # nothing half-written


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_helper_ignores_an_interrupt_of_its_own(tmp_path, sig):
    """SIGINT or SIGTERM to the helper alone: it draws on (the interrupt is the parent's to act on) and never
    runs the parent's `finally` blocks; the render ends whole."""
    proc, helper = _gated(tmp_path)
    os.kill(helper, sig)  # it sleeps in its wait: a handled signal would end that sleep at once
    time.sleep(0.2)  # lets a helper that did not ignore it unwind before it may go on (no effect otherwise)
    (tmp_path / "go").touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert _unwound(tmp_path) == [f"unwound-{proc.pid}"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"f{i}.png" for i in range(6)]
