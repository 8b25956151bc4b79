"""Python subprocesses for the tests, forked from a warm server instead of started as fresh interpreters.

The fault and resume tests start `python -m crs.cli ...` (or `python -c CODE`) dozens of times to
kill it, race it or watch it exit; a fresh interpreter spends seconds importing torch and timm
before a `crs extract` does any work. Here such a command is forked from a server process
that imported those libraries once (one server per test process, started on first use, ended
when that process ends, with the folder that holds its socket and the commands' output files).
The command's process is still a process of its own, as a fresh one would be: its own pid and
session, its own environment, working folder and output files, the default signal handlers; the
test can SIGKILL, SIGTERM or SIGINT it. It runs the command as the interpreter does (``runpy`` for
``-m``, ``exec`` for ``-c``, the exit status from SystemExit, an uncaught exception printed with
exit 1, an uncaught KeyboardInterrupt ending it by SIGINT, atexit functions at the end).

What a fork cannot give a command, it gets a fresh interpreter for (``subprocess.Popen``): an
environment that differs from the server's in a variable a preloaded library reads when it is
imported (``FROZEN``), any other form of command line, and every command when
``CRS_TESTS_EXEC=1`` (the way to rule this module out when a test fails). Tests that measure a
child's memory use plain ``subprocess``: a forked child's resident size counts the server's pages.

The server preloads only libraries that start no thread on import but numpy's BLAS pool (which
re-initialises after a fork); polars, which starts threads when imported, is left to the child.
How it works: the server forks a watcher per command, the watcher forks the command, sends its pid
over the client's socket, waits for it and sends its exit status (as ``Popen.returncode``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

PRELOAD = ["numpy", "torch", "timm", "zarr", "jax", "crs.cli", "crs.extract.models", "crs.store.zarr_store"]
# variables that the interpreter or a preloaded library reads at start or import (huggingface_hub's constants,
# JAX's and Zarr's configuration, thread pools, sys.path): a child whose value differs gets a fresh interpreter.
# Others (TORCHINDUCTOR_CACHE_DIR, which torch sets in the test process once it compiles) are read when used.
FROZEN = ("HF_", "HUGGINGFACE", "TIMM_", "PYTORCH_", "OMP_", "MKL_", "OPENBLAS", "JAX_", "XLA_", "ZARR_", "PYTHON",
          "CUDA_")

SERVER = textwrap.dedent("""
    import json, os, select, signal, socket, sys
    path, preload = sys.argv[1], json.loads(sys.argv[2])
    for name in preload:
        __import__(name)
    sys.path.insert(0, sys.argv[3])
    import forkrun
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # watchers are reaped as they end
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(64)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([srv, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process is gone: so are the socket and the output files
            import shutil
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            os._exit(0)
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            forkrun._watch(conn)
        conn.close()
""")

_server: dict = {}


def _start_server() -> dict:
    if _server.get("proc") is not None and _server["proc"].poll() is None:
        return _server
    folder = tempfile.mkdtemp(prefix="crs-forkrun-")
    path = os.path.join(folder, "s")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, path, json.dumps(PRELOAD), os.path.dirname(__file__)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ), text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"the tests' fork server did not start (exit {proc.wait()}); "
                           "run with CRS_TESTS_EXEC=1 to start fresh interpreters instead")
    _server.update(proc=proc, path=path, env=dict(os.environ))
    return _server


def _frozen_differs(env: dict, server_env: dict) -> bool:
    keys = {k for k in set(env) | set(server_env) if k.startswith(FROZEN)}
    return any(env.get(k) != server_env.get(k) for k in keys)


def _readline(conn) -> str:
    buf = b""
    while not buf.endswith(b"\n"):
        part = conn.recv(4096)
        if not part:
            break
        buf += part
    return buf.decode()


# ------------------------------------------------------------------ in the server's forks
def _watch(conn) -> None:
    """The watcher: fork the command, report its pid, wait for it, report its exit status."""
    try:
        req = json.loads(_readline(conn))
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _become(req["argv"], req["env"], req["cwd"], req["out"], req["err"])
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def _become(argv: list[str], env: dict, cwd: str | None, out: str, err: str) -> None:
    """Run ``python ARGV`` in this process and exit with its status."""
    import atexit
    import runpy
    import traceback

    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the interpreter's own handlers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for fd, path in ((0, os.devnull), (1, out), (2, err)):
        f = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    sys.path[0] = os.getcwd() if argv[0] == "-m" else ""
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.modules.pop(argv[1], None)  # preloaded, but run afresh as __main__ (as `python -m` does)
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 (the interpreter prints it and exits 1)
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code == -signal.SIGINT:  # as the interpreter ends on an uncaught Ctrl-C: by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


# ------------------------------------------------------------------ in the test process
class Forked:
    """The parts of ``subprocess.Popen`` the tests use, for a command forked by the server."""

    def __init__(self, conn, out: str, err: str, args: list[str]):
        self._conn, self._out, self._err, self.args = conn, out, err, args
        self.pid = int(_readline(conn))
        self.returncode = None

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if ready:
                line = _readline(self._conn).strip()
                self.returncode = int(line) if line else -9  # the watcher itself was killed
                self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        texts = []
        for path in (self._out, self._err):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    texts.append(f.read())
                os.unlink(path)
            except FileNotFoundError:  # read once already
                texts.append("")
        return texts[0], texts[1]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def start(argv: list[str], env: dict | None = None, cwd=None):
    """``python ARGV`` (ARGV ``["-m", MODULE, ...]`` or ``["-c", CODE, ...]``) forked from the server where
    it can be, else ``subprocess.Popen`` in a new session with text output captured; both have pid,
    poll, wait, communicate (stdout, stderr), send_signal and kill."""
    argv = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    fresh = os.environ.get("CRS_TESTS_EXEC") == "1" or len(argv) < 2 or argv[0] not in ("-m", "-c")
    server = None if fresh else _start_server()
    if server is None or _frozen_differs(env, server["env"]):
        return subprocess.Popen([sys.executable, *argv], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    paths = []
    for what in ("out", "err"):
        fd, path = tempfile.mkstemp(prefix=f"{what}-", dir=os.path.dirname(server["path"]))
        os.close(fd)
        paths.append(path)
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(server["path"])
    req = {"argv": argv, "env": env, "cwd": None if cwd is None else str(cwd), "out": paths[0], "err": paths[1]}
    conn.sendall((json.dumps(req) + "\n").encode())
    return Forked(conn, *paths, [sys.executable, *argv])


def run(argv: list[str], env: dict | None = None, cwd=None, timeout: float | None = None,
        check: bool = False) -> subprocess.CompletedProcess:
    """``start``, then wait: a ``CompletedProcess`` with text stdout and stderr."""
    p = start(argv, env, cwd)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    done = subprocess.CompletedProcess([sys.executable, *map(str, argv)], p.returncode, out, err)
    if check and done.returncode:
        raise Failed(done.returncode, done.args, out, err)
    return done


class Failed(subprocess.CalledProcessError):
    """A ``check=True`` command that exited non-zero; the message ends with its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{(self.stderr or '')[-3000:]}"
