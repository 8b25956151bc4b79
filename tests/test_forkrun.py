"""tests/forkrun.py's forked commands end as the same commands do in a fresh interpreter: exit status,
output, an uncaught exception or Ctrl-C, a signal, the environment and working folder they are given."""

import os
import signal
import subprocess
import sys
import time

import pytest

import forkrun

CASES = {
    "exit status and output": ["-c", "import sys; print('out', sys.argv[1:]); print('err', file=sys.stderr); "
                                     "sys.exit(3)", "a", "b"],
    "an uncaught exception": ["-c", "print('before', flush=True); 1 / 0"],
    "an uncaught Ctrl-C": ["-c", "raise KeyboardInterrupt"],
    "sys.exit with a message": ["-c", "import sys; sys.exit('no good')"],
    "environment and folder": ["-c", "import os; print(os.getcwd(), os.environ.get('CRS_FORKRUN_X'), "
                                     "os.environ.get('HF_HUB_OFFLINE'), os.getsid(0) == os.getpid())"],
    "atexit and default handlers": ["-c", "import atexit, signal; atexit.register(print, 'bye'); "
                                          "print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "
                                          "signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
    "the CLI": ["-m", "crs.cli", "encoders", "--json"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_a_forked_command_ends_as_in_a_fresh_interpreter(argv, tmp_path):
    env = {**os.environ, "CRS_FORKRUN_X": "given"}
    forked = forkrun.start(argv, env=env, cwd=tmp_path)
    assert isinstance(forked, forkrun.Forked)
    out, err = forked.communicate(timeout=120)
    fresh = subprocess.run([sys.executable, *argv], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, start_new_session=True)
    assert (forked.returncode, out) == (fresh.returncode, fresh.stdout)
    assert err.strip().splitlines()[-1:] == fresh.stderr.strip().splitlines()[-1:]


@pytest.mark.parametrize("sig, rc", [(signal.SIGKILL, -9), (signal.SIGTERM, -15), (signal.SIGINT, -2)])
def test_a_forked_command_can_be_signalled(sig, rc):
    p = forkrun.start(["-c", "import time; print('up', flush=True); time.sleep(60)"])
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if open(p._out).read() == "up\n":
            break
        time.sleep(0.01)
    os.kill(p.pid, sig)
    assert p.wait(timeout=30) == rc


def test_an_environment_a_preloaded_library_reads_on_import_gets_a_fresh_interpreter():
    p = forkrun.start(["-c", "import os; print(os.environ['HF_HOME'])"], env={**os.environ, "HF_HOME": "/elsewhere"})
    assert isinstance(p, subprocess.Popen)
    assert p.communicate(timeout=120) == ("/elsewhere\n", "")
