"""Shared pieces of the fault-injection suite (the rule and the case table: conftest.py).

* ``crs(*args)``: ``python -m crs.cli ARGS`` in a process of its own (HF_HUB_OFFLINE=1, PYTHONPATH
  inherited; forked from the warm server of tests/forkrun.py, or a fresh interpreter with
  CRS_TESTS_EXEC=1), returning ``Ran(rc, stdout, stderr)``; ``start(*args)`` is the same as a
  ``Popen``-like handle for the kill and two-writer cases. ``crs_here(*args)`` runs the same command
  inside this process (typer's CliRunner): the store-damage cases use it because a subprocess pays for
  the imports and the probe's compilation on every call; set ``CRS_FAULTS_SUBPROCESS=1`` to run those in
  subprocesses too.
* ``baseline``: one small uninterrupted run (2 demo encoders x demo_derm at size 0.1, one severity, one seed,
  bootstrap 5, report), made once a session; ``case(baseline, tmp_path)`` copies it for one case.
* ``outputs(folder)``: every output of a run in canonical form (store arrays with their attributes,
  run records, probe selection, subsets, scores tables and scores.json, report tables, and any
  temporary file left behind), from ``tests/golden/fingerprint.py``'s helpers; ``assert_same`` names
  what differs.
* ``settle(...)``: the one rule every case ends with: exit 0 with outputs equal to the uninterrupted
  run's, or exit 2 naming the fault and a `crs ...` repair, after which the command succeeds and the
  outputs are equal again. Anything else fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "golden"))
sys.path.insert(0, str(ROOT / "tests"))

import fingerprint as fp  # noqa: E402

import forkrun  # noqa: E402
import shared_builds  # noqa: E402

ENCODERS = ("demo-stats", "demo-resnet")
DATASET = "demo_derm"
STORE, RESULTS, REPORT = "store.zarr", "results", "report"


# ------------------------------------------------------------------ the commands of the small run
def stage_args(stage: str, folder: Path, **change) -> list[str]:
    """The arguments of ``stage`` in the baseline run, with ``folder``'s paths; ``change`` replaces options."""
    folder = Path(folder)
    store, results = str(folder / STORE), str(folder / RESULTS)
    opts = {
        "extract": {"--encoder": list(ENCODERS), "--dataset": [DATASET], "--size": "0.1", "--severities": "1",
                    "--chunk": "32", "--store": store},
        "probe": {"--all": None, "--store": store, "--results": results, "--seeds": "1", "--fractions": "0.5,1",
                  "--l2": "1"},
        "score": {"--results": results, "--store": store, "--bootstrap": "5"},
        "report": {"--results": results, "--out": str(folder / REPORT)},
    }[stage]
    for k, v in change.items():
        key = "--" + k.replace("_", "-")
        if v is False:
            opts.pop(key, None)
        else:
            opts[key] = v
    args = [stage]
    for k, v in opts.items():
        if v is None:
            args.append(k)
        elif isinstance(v, list):
            for x in v:
                args += [k, x]
        else:
            args += [k, str(v)]
    return args + ["--quiet"]


# ------------------------------------------------------------------ running the CLI
class Ran(NamedTuple):
    rc: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        return self.stdout + self.stderr


def cli_env() -> dict:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env["COLUMNS"] = "200"  # one message a line, whatever the terminal
    return env


def crs(*args, cwd=None, timeout: float = 300) -> Ran:
    """``python -m crs.cli ARGS`` in a process of its own (tests/forkrun.py); its exit status and output."""
    p = forkrun.run(["-m", "crs.cli", *args], env=cli_env(), cwd=cwd, timeout=timeout)
    return Ran(p.returncode, p.stdout, p.stderr)


def start(*args, cwd=None):
    """``python -m crs.cli ARGS`` started in a process and session of its own (forked from tests/forkrun.py's
    warm server, or a fresh interpreter), for the kill and two-writer cases: a ``Popen``-like handle."""
    return forkrun.start(["-m", "crs.cli", *args], env=cli_env(), cwd=cwd)


def finish(p, timeout: float = 300) -> Ran:
    out, err = p.communicate(timeout=timeout)
    return Ran(p.returncode, out, err)


def crs_here(*args) -> Ran:
    """The same command in this process (typer's CliRunner), or in a subprocess with CRS_FAULTS_SUBPROCESS=1."""
    if os.environ.get("CRS_FAULTS_SUBPROCESS") == "1":
        return crs(*args)
    from typer.testing import CliRunner

    from crs.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    stderr = r.stderr if r.stderr_bytes is not None else ""
    stdout = r.stdout
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        stderr += f"\n(exception escaped the CLI: {r.exception!r})"
    return Ran(r.exit_code, stdout, stderr)


def wait_for(predicate, p, timeout: float = 120, poll: float = 0.01) -> bool:
    """Poll ``predicate()`` until it holds (True) or ``p`` ended or the time is up (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        if p.poll() is not None:
            return predicate()
        time.sleep(poll)
    return False


def kill(p, sig: int) -> None:
    p.send_signal(sig)  # Popen's and forkrun.Forked's: nothing once the process has ended


# ------------------------------------------------------------------ outputs in canonical form
LEFTOVER = re.compile(r"(\.tmp|\.partial|\.swp|~)$|^\.tmp|\.tmp[.-]")


def outputs(folder: Path, roots=()) -> dict:
    """Every output of the run in ``folder`` as ``{name: canonical value or digest}``; unreadable -> a marker.

    ``roots``: folders whose path text in stored strings (the failures table's file and reason) is
    replaced by ``<root>``, so that a dataset read from another folder compares equal."""
    folder = Path(folder)
    out: dict = {}
    results = folder / RESULTS

    def guard(key, fn, *a):
        try:
            out[key] = fn(*a)
        except Exception as exc:  # a damaged output is a difference, not a crash of the comparison
            out[key] = f"unreadable: {type(exc).__name__}: {str(exc)[:200]}"

    for sub in ("run_records", "probe_selection", "subsets"):
        for f in sorted((results / sub).glob("*.parquet")):
            guard(f"results/{sub}/{f.name}", fp._digest_table, f)
    for f in sorted((results / "scores").glob("*.parquet")):
        guard(f"results/scores/{f.name}", fp._table_values, f)
    if (results / "scores" / "scores.json").exists():
        import json

        guard("results/scores/scores.json",
              lambda: json.loads(json.dumps(fp._strip(json.loads((results / "scores" / "scores.json").read_text())),
                                            default=str)))
    for f in sorted((folder / REPORT / "tables").glob("*.parquet")):
        guard(f"report/tables/{f.name}", fp._table_values, f)
    if (folder / REPORT).exists():
        out["report/files"] = sorted(str(p.relative_to(folder / REPORT)) for p in (folder / REPORT).rglob("*")
                                     if p.is_file())
    guard("store", _store_arrays, folder / STORE, tuple(str(r) for r in roots))
    if isinstance(out.get("store"), dict):
        out.update(out.pop("store"))
    out["leftovers"] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if LEFTOVER.search(p.name))
    return out


def _store_arrays(path: Path, roots: tuple[str, ...] = ()) -> dict:
    import zarr

    got: dict = {}
    root = zarr.open_group(str(path), mode="r")
    for dname, dgroup in sorted(root["datasets"].groups()):
        _walk(dgroup, f"store/{dname}", roots, got)
    return got


def _walk(group, prefix: str, roots: tuple[str, ...], got: dict) -> None:
    """Digest every array under ``group``; a node that cannot be read is recorded as such, the rest still are."""
    try:
        arrays, groups = sorted(group.arrays()), sorted(group.groups())
    except Exception as exc:
        got[prefix] = f"unreadable: {type(exc).__name__}: {str(exc)[:200]}"
        return
    for name, arr in arrays:
        try:
            got[f"{prefix}/{name}"] = _digest_rooted(arr, roots) if roots else fp._digest_array(arr)
        except Exception as exc:
            got[f"{prefix}/{name}"] = f"unreadable: {type(exc).__name__}: {str(exc)[:200]}"
    for name, sub in groups:
        _walk(sub, f"{prefix}/{name}", roots, got)


def _digest_rooted(arr, roots: tuple[str, ...]) -> str:
    """``fp._digest_array``, with each of ``roots`` in a string array's values replaced by ``<root>``."""
    import hashlib
    import json

    import numpy as np

    values = np.asarray(arr[...])
    if values.dtype.kind not in "OUST":
        return fp._digest_array(arr)
    texts = []
    for v in values.ravel().tolist():
        v = str(v)
        for r in sorted(roots, key=len, reverse=True):
            v = v.replace(r, "<root>")
        texts.append(v)
    h = hashlib.sha256(f"text:{values.shape}:".encode())
    h.update(json.dumps(texts).encode())
    h.update(fp._digest_json(dict(arr.attrs)).encode())
    return h.hexdigest()


def differences(got: dict, want: dict, only: str | tuple[str, ...] | None = None) -> list[str]:
    """Names of the outputs that differ (``only``: a prefix or prefixes to compare, e.g. ``store/``)."""
    keys = set(got) | set(want)
    if only is not None:
        keys = {k for k in keys if k.startswith(only)}
    return sorted(k for k in keys if k not in got or k not in want or not fp.same(got[k], want[k]))


def assert_same(folder: Path, want: dict, what: str, only: str | tuple[str, ...] | None = None, roots=()) -> None:
    got = outputs(folder, roots)
    diff = differences(got, want, only)
    assert not diff, (f"{what}: the outputs differ from the uninterrupted run's in {len(diff)} places: "
                      + "; ".join(f"{k} (got {str(got.get(k))[:120]!r})" for k in diff[:8]))


# ------------------------------------------------------------------ the rule
REPAIR = re.compile(r"`(crs [^`]+)`")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]{2,}$|\.\.\.|^<.*>$|^\[.*\]$")


SHORT = {"-e": "--encoder", "-d": "--dataset", "-q": "--quiet", "-v": "--verbose"}


def _options(words: list[str]) -> dict[str, list[str | None]]:
    """``--opt value`` pairs (repeatable) and bare flags of a command line, in order; short names spelled out."""
    opts: dict[str, list[str | None]] = {}
    i = 0
    while i < len(words):
        w = SHORT.get(words[i], words[i])
        if w.startswith("--") and "=" in w:
            w, v = w.split("=", 1)
            opts.setdefault(w, []).append(v)
        elif w.startswith("-"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
            opts.setdefault(w, []).append(value)
            i += value is not None
        i += 1
    return opts


def _command(stage: str, opts: dict[str, list[str | None]]) -> list[str]:
    args = [stage]
    for k, values in opts.items():
        for v in values:
            args += [k] if v is None else [k, v]
    return args


def named_repairs(message: str, folder: Path, defaults: dict | None = None) -> list[list[str]]:
    """The `crs ...` commands a message names, made runnable.

    A stage command is run with the case's own options for that stage, replaced by those the
    message gives (a message need not repeat --size or --severities; its --encoder, --dataset,
    --store win); placeholders (ENCODER, ..., <path>) are dropped. `crs store verify ...` runs as
    `crs store verify STORE --repair`."""
    cmds = []
    for text in REPAIR.findall(message):
        try:
            words = shlex.split(text)[1:]
        except ValueError:
            continue
        if not words:
            continue
        if words[:2] == ["store", "verify"]:
            cmds.append(["store", "verify", str(Path(folder) / STORE), "--repair"])
        elif words[0] in ("extract", "probe", "score", "report"):
            own = _options(((defaults or {}).get(words[0]) or stage_args(words[0], folder))[1:])
            given = {k: v for k, v in _options(words[1:]).items()
                     if not any(x is not None and PLACEHOLDER.search(x) for x in v)}
            if ("--encoder" in given or "--dataset" in given) and "--all" in own:
                own.pop("--all")
            own.update(given)
            own.setdefault("--quiet", [None])
            cmds.append(_command(words[0], own))
    # one run of each, in the order the message gives
    seen, unique = set(), []
    for c in cmds:
        if tuple(c) not in seen:
            seen.add(tuple(c))
            unique.append(c)
    return unique


def settle(first: Ran, again: list[str], folder: Path, want: dict, what: str, names=(), run=None,
           only: str | None = None, rounds: int = 3, defaults: dict | None = None, roots=()) -> str:
    """Assert the rule on ``first`` (the outcome of the command under fault), return 'a' or 'b'.

    (a) exit 0 and the outputs equal ``want``; (b) exit 2, the message holds every word of ``names`` and
    names a `crs ...` repair; running the repairs and then ``again`` (the command, re-run) exits 0 and the
    outputs equal ``want``. Exit 1 (a bug), a signal, or exit 0 with other outputs fail."""
    run = run or crs_here
    if first.rc == 0:
        assert_same(folder, want, f"{what}: exit 0", only, roots)
        return _seen(what, "a")
    assert first.rc == 2, (f"{what}: exit {first.rc}; only exit 0 with the uninterrupted run's outputs or exit 2 "
                           f"naming the fault are allowed:\n{first.message[-1500:]}")
    missing = [w for w in names if w.lower() not in first.message.lower()]
    assert not missing, f"{what}: the exit-2 message does not name {missing}:\n{first.message[-1500:]}"
    r = first
    for _ in range(rounds):
        repairs = named_repairs(r.message, folder, defaults)
        assert repairs, f"{what}: exit 2 names no `crs ...` command that repairs it:\n{r.message[-1500:]}"
        for cmd in repairs:
            fix = run(*cmd)
            # `crs store verify --repair` exits 2 while chunks it reset still wait for the next named command
            ok = (0, 2) if cmd[:2] == ["store", "verify"] else (0,)
            assert fix.rc in ok, (f"{what}: the named repair `crs {' '.join(cmd)}` exited {fix.rc}:\n"
                                  f"{fix.message[-1500:]}")
        r = run(*again)
        if r.rc == 0:
            break
        assert r.rc == 2, f"{what}: after the repair the command exited {r.rc}:\n{r.message[-1500:]}"
    else:
        pytest.fail(f"{what}: still refused after {rounds} rounds of the named repairs:\n{r.message[-1500:]}")
    assert_same(folder, want, f"{what}: after the named repair", only, roots)
    return _seen(what, "b")


def followed_literally(store: Path) -> list[str]:
    """Run every `crs ...` command `crs store verify STORE` names, word for word, in order; the commands run."""
    found = crs_here("store", "verify", str(store))
    assert found.rc == 2, f"verify did not find the damage:\n{found.message[-1500:]}"
    commands = list(dict.fromkeys(REPAIR.findall(found.message)))
    assert commands, f"verify names no `crs ...` repair:\n{found.message[-1500:]}"
    for text in commands:
        r = crs_here(*shlex.split(text)[1:])
        assert r.rc in (0, 2) if text.startswith("crs store verify") else r.rc == 0, \
            f"the repair `{text}` exited {r.rc}:\n{r.message[-1500:]}"
    return commands


def _seen(what: str, outcome: str) -> str:
    """The outcome, also appended to the file $CRS_FAULTS_LOG names (for the table in conftest.py)."""
    log = os.environ.get("CRS_FAULTS_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{outcome}\t{what}\n")
    return outcome


# ------------------------------------------------------------------ the baseline
class Baseline(NamedTuple):
    folder: Path
    outputs: dict


def _make(folder: Path) -> dict:
    for stage in ("extract", "probe", "score", "report"):
        r = crs_here(*stage_args(stage, folder))
        assert r.rc == 0, f"the baseline's {stage} failed:\n{r.message[-3000:]}"
    return outputs(folder)


def once_per_run(tmp_path_factory, name: str, build) -> Baseline:
    """``Baseline(folder, build(folder))``, built once for the whole run (tests/shared_builds.py)."""
    return Baseline(*shared_builds.once_per_run(tmp_path_factory, name, build))


def _make_baseline(folder: Path) -> dict:
    want = _make(folder)
    assert any(k.startswith("store/") for k in want) and "results/scores/scores.json" in want
    return want


@pytest.fixture(scope="session")
def baseline(tmp_path_factory) -> Baseline:
    """The uninterrupted small run every case is compared with (made once a run, never changed)."""
    return once_per_run(tmp_path_factory, "faults-baseline", _make_baseline)


def case(baseline: Baseline, tmp_path: Path, name: str = "run") -> Path:
    """A private copy of the baseline's store, results and report."""
    dest = tmp_path / name
    shutil.copytree(baseline.folder, dest, symlinks=True)
    return dest


def _rerun(baseline: Baseline, tmp_path_factory, name: str, stages: tuple[tuple[str, dict], ...]) -> Baseline:
    """A copy of the baseline with ``stages`` ((stage, changed settings), ...) run on it uninterrupted,
    made once a run."""
    def build(parent: Path) -> dict:
        folder = case(baseline, parent)
        for stage, change in stages:
            r = crs_here(*stage_args(stage, folder, **change))
            assert r.rc == 0, f"the {name} reference's {stage} failed:\n{r.message[-3000:]}"
        return outputs(folder)

    ref = once_per_run(tmp_path_factory, f"faults-{name}-ref", build)
    return Baseline(ref.folder / "run", ref.outputs)


@pytest.fixture(scope="session")
def probe_ref(baseline, tmp_path_factory) -> Baseline:
    """The baseline re-probed with another L2 (``PROBE_CHANGE``) and re-scored, uninterrupted."""
    return _rerun(baseline, tmp_path_factory, "probe", (("probe", PROBE_CHANGE), ("score", {})))


@pytest.fixture(scope="session")
def score_ref(baseline, tmp_path_factory) -> Baseline:
    """The baseline re-scored with another bootstrap size (``SCORE_CHANGE``) and reported, uninterrupted."""
    return _rerun(baseline, tmp_path_factory, "score", (("score", SCORE_CHANGE), ("report", {})))


PROBE_CHANGE = {"l2": "0.01"}  # another L2: every prediction changes, so a mix of old and new shows
SCORE_CHANGE = {"bootstrap": "7"}


# ------------------------------------------------------------------ a csv: dataset with one broken image
CSV_NAME = "mine"
CSV_ROWS = 24  # 12 train, 6 val, 6 test; two classes in each split
BROKEN = 3  # the row whose image is a truncated PNG (a train image: store row 12 + 3, in chunk 1 of 8 rows)


def write_images(folder: Path, n: int = CSV_ROWS) -> list[tuple[str, str, str]]:
    """``n`` small PNGs under ``folder/imgs`` (class-coloured noise); rows (path, label, split)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (folder / "imgs").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        label = "ab"[i % 2]
        base = np.array([200, 60, 60] if label == "a" else [60, 60, 200], dtype=np.int16)
        img = np.clip(base + rng.integers(-40, 40, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / "imgs" / f"im{i:02d}.png")
        split = "train" if i < n // 2 else "val" if i < 3 * n // 4 else "test"
        rows.append((f"imgs/im{i:02d}.png", label, split))
    broken = folder / "imgs" / f"im{BROKEN:02d}.png"
    broken.write_bytes(broken.read_bytes()[:40])
    return rows


def write_csv(path: Path, rows, header=("path", "label", "split")) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def csv_extract_args(data: Path, store: Path, csv_path: Path | None = None) -> list[str]:
    """``crs extract`` of the csv: dataset whose CSV and images are in ``data``, into ``store``."""
    csv_path = csv_path or data / f"{CSV_NAME}.csv"
    return ["extract", "--encoder", "demo-stats", "--dataset", f"csv:{csv_path}", "--image-root", str(data),
            "--modality", "dermatology", "--no-perturb", "--chunk", "8", "--store", str(store), "--quiet"]


@pytest.fixture(scope="session")
def csv_baseline(tmp_path_factory) -> Baseline:
    """A ``csv:`` dataset of 24 tiny PNGs, one of them broken (a failures table), extracted uninterrupted.

    Cases copy its store only: the CSV and images stay where they are, as the dataset's identity
    (image root, CSV) is part of what the store checks."""
    def build(folder: Path) -> dict:
        rows = write_images(folder)
        write_csv(folder / f"{CSV_NAME}.csv", rows)
        r = crs_here(*csv_extract_args(folder, folder / STORE))
        assert r.rc == 0, f"the csv baseline's extract failed:\n{r.message[-3000:]}"
        want = outputs(folder, roots=(folder,))
        assert any("/failures/" in k for k in want), f"the broken image made no failures table: {sorted(want)}"
        return want

    return once_per_run(tmp_path_factory, "faults-csv", build)


def csv_case(base: Baseline, tmp_path: Path) -> Path:
    """A folder holding a copy of the csv baseline's store only."""
    dest = tmp_path / "csvcase"
    dest.mkdir()
    shutil.copytree(base.folder / STORE, dest / STORE, symlinks=True)
    return dest


SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}
