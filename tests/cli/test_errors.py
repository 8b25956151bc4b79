"""Whose fault an error is: the user's (exit 2, naming the path and the repair) or ours (exit 1, saying it is
a bug); Ctrl-C and SIGTERM unwind the same way (exit 130 and 143, after a message)."""

import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from crs import stages
from crs.cli import app
from crs.foundations.errors import user_os_error

runner = CliRunner()


@pytest.mark.parametrize("code, words", [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only"),
                                         (errno.EISDIR, "is a folder"), (errno.ENOTDIR, "has a file"),
                                         (errno.ENOSPC, "no space")])
def test_an_os_error_on_a_path_is_the_users_and_names_path_and_repair(code, words):
    e = user_os_error(OSError(code, os.strerror(code), "/data/results/scores.json"))
    assert e is not None and "/data/results/scores.json" in str(e) and words in str(e)
    assert ";" in str(e)  # the repair follows the problem


def test_an_os_error_without_a_path_or_of_another_kind_is_not_the_users():
    assert user_os_error(OSError(errno.EACCES, "Permission denied")) is None
    assert user_os_error(OSError(errno.EBADF, "Bad file descriptor", "/x")) is None


def _score_raising(monkeypatch, exc):
    def fake(*a, **k):
        raise exc
    monkeypatch.setattr(stages.score, "run", fake)


def test_permission_denied_on_the_results_exits_2_naming_the_path(monkeypatch, tmp_path):
    where = str(tmp_path / "results" / "scores")
    _score_raising(monkeypatch, PermissionError(errno.EACCES, "Permission denied", where))
    r = runner.invoke(app, ["score", "--results", str(tmp_path / "results")])
    assert r.exit_code == 2, r.output
    assert where in r.output and "permission denied" in r.output and "bug" not in r.output


def test_a_results_path_that_is_a_file_exits_2(tmp_path):
    f = tmp_path / "results"
    f.write_text("not a folder")
    r = runner.invoke(app, ["score", "--results", str(f)])
    assert r.exit_code == 2 and str(f) in r.output


@pytest.mark.parametrize("exc", [ValueError("shapes (3,) and (4,) not aligned"), OSError(errno.EBADF, "Bad fd"),
                                 KeyError("auroc")])
def test_a_value_error_or_stray_os_error_is_a_bug_exit_1(monkeypatch, tmp_path, exc):
    _score_raising(monkeypatch, exc)
    r = runner.invoke(app, ["score", "--results", str(tmp_path)])
    assert r.exit_code == 1
    assert "internal error" in r.output and "bug in CRS-Bench" in r.output and "--verbose" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(app, ["score", "--results", str(tmp_path), "--verbose"])
    assert r.exit_code == 1 and "Traceback" in r.output


NAP = textwrap.dedent("""
    import time
    from crs import cli
    from crs.commands.exits import friendly_errors

    @cli.app.command("nap")
    def nap():
        with friendly_errors(False):
            try:
                print("ready", flush=True)
                time.sleep(60)
            finally:
                print("unwound", flush=True)

    cli.main()
""")


@pytest.mark.parametrize("sig, code, words", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted")])
def test_sigterm_unwinds_like_ctrl_c_with_a_message(sig, code, words):
    p = subprocess.Popen([sys.executable, "-c", NAP, "nap"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == code, err
    assert "unwound" in out  # finally blocks ran: what they commit is kept
    assert words in err and "run the same command again to resume" in err


DONE = textwrap.dedent("""
    import sys, threading, time
    from crs import cli
    from crs.commands.exits import friendly_errors

    def hold_the_shutdown():  # Python's shutdown waits for this thread, which ends when the test says so
        while threading.main_thread().is_alive():  # alive until the shutdown begins
            time.sleep(0.001)
        print("shutting down", flush=True)
        sys.stdin.readline()

    @cli.app.command("done")
    def done():
        with friendly_errors(False):
            threading.Thread(target=hold_the_shutdown).start()
            print("finished", flush=True)

    cli.main()
""")


def test_a_sigterm_after_the_command_finished_leaves_its_exit_code():
    """Once the command has ended, Python's shutdown (threads joined, modules freed) can take a second;
    a SIGTERM then must not turn a finished command's exit 0 into death by signal (-15) or a traceback.
    The signal is sent once the shutdown has begun and while a thread still holds it, on every run."""
    p = subprocess.Popen([sys.executable, "-c", DONE, "done"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "finished"
        assert p.stdout.readline().strip() == "shutting down"  # past main()'s return: the thread holds the exit
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate("go\n", timeout=30)  # lets the thread, and so the shutdown, end
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err
