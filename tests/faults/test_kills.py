"""Extract, probe, score and report killed (SIGKILL, SIGTERM) at several points each.

A kill point is "after the command has written K files" (files under the case folder whose
mtime is past the start): no sleeps, so the point is the same on a fast and a slow machine. If
the command finishes before its K-th write, the case still holds (the rule applies to whatever
state it left). After the kill:

* SIGTERM must end the command as Ctrl-C does: exit 143 with a message (or exit 0 if it had
  already finished);
* the stage that reads the killed stage's output must see the whole old output or the whole new
  one (score after a killed probe, report after a killed score), or refuse with exit 2;
* running the killed command again (resume) must give the uninterrupted run's outputs, by the rule.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from faultlib import (
    BROKEN,
    CSV_NAME,
    PROBE_CHANGE,
    REPORT,
    SCORE_CHANGE,
    SIGNALS,
    STORE,
    case,
    crs_here,
    csv_case,
    csv_extract_args,
    differences,
    finish,
    kill,
    outputs,
    settle,
    stage_args,
    start,
    wait_for,
)

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# the session fixtures of faultlib.py (baseline, probe_ref, score_ref, csv_baseline) once per worker
pytestmark = pytest.mark.slow


def written_since(folder: Path, t0_ns: int) -> int:
    """How many files under ``folder`` were written after ``t0_ns``."""
    n = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                if os.stat(os.path.join(dirpath, f)).st_mtime_ns > t0_ns:
                    n += 1
            except FileNotFoundError:
                pass
    return n


def killed(args, folder: Path, writes: int, sig: str, point=None):
    """Start ``crs ARGS``, send ``sig`` once it has written ``writes`` files (or once ``point()`` holds),
    and return how it ended."""
    import time

    t0 = time.time_ns()
    p = start(*args)
    reached = wait_for(point or (lambda: written_since(folder, t0) >= writes), p, timeout=240)
    if reached:
        kill(p, SIGNALS[sig])
    r = finish(p)
    if sig == "SIGTERM" and r.rc != 0:
        assert r.rc == 143, (f"SIGTERM must end crs {args[0]} as Ctrl-C does (exit 143), not {r.rc}:\n"
                             f"{r.message[-1500:]}")
        assert r.stderr.strip(), f"SIGTERM: crs {args[0]} exited 143 without a word"
    elif sig == "SIGKILL":
        assert r.rc in (0, -9), f"crs {args[0]} exited {r.rc} before the SIGKILL:\n{r.message[-1500:]}"
    return r


def read_whole(reader_args, folder: Path, choices: dict, what: str, only: str) -> None:
    """The reader exits 0 with outputs (under ``only``) equal to one of ``choices``' whole outputs, or exits 2."""
    r = crs_here(*reader_args)
    if r.rc == 2:
        return
    assert r.rc == 0, f"{what}: crs {reader_args[0]} exited {r.rc}:\n{r.message[-1500:]}"
    got = outputs(folder)
    diffs = {name: differences(got, want, only) for name, want in choices.items()}
    assert any(not d for d in diffs.values()), (
        f"{what}: crs {reader_args[0]} exited 0 with outputs that are neither the old run's nor the new run's: "
        + "; ".join(f"vs {name}: {d[:5]}" for name, d in diffs.items()))


# ------------------------------------------------------------------ extract, into a new store
EXTRACT_POINTS = [("SIGKILL", 6), ("SIGKILL", 60), ("SIGTERM", 25)]


@pytest.mark.parametrize("sig, writes", EXTRACT_POINTS, ids=[f"{s}-after{w}" for s, w in EXTRACT_POINTS])
def test_killed_extract_resumes_to_the_same_store(baseline, tmp_path, sig, writes):
    folder = case(baseline, tmp_path)
    shutil.rmtree(folder / STORE)  # a new extraction; results stay as the baseline's
    args = stage_args("extract", folder)
    killed(args, folder, writes, sig)
    want = {k: v for k, v in baseline.outputs.items() if "/predictions/" not in k}
    settle(crs_here(*args), args, folder, want, f"extract {sig} after {writes} writes, then resumed",
           only="store/")


def test_killed_extract_keeps_its_decode_failures(csv_baseline, tmp_path):
    """The failures of a committed chunk survive a SIGKILL: after the resume the failures table is whole."""
    folder = csv_case(csv_baseline, tmp_path)
    shutil.rmtree(folder / STORE)
    args = csv_extract_args(csv_baseline.folder, folder / STORE)
    # store rows are test (6), val (6), train (12): the broken train image BROKEN is in chunk 1 (rows 8-15);
    # the kill comes once that chunk is committed (its done flag written)
    done = folder / STORE / "datasets" / CSV_NAME / "embeddings" / "demo-stats" / "clean" / "done" / "c" / "1"
    killed(args, folder, 0, "SIGKILL", point=done.exists)
    assert 8 <= 12 + BROKEN < 16
    settle(crs_here(*args), args, folder, csv_baseline.outputs, "csv extract SIGKILL, then resumed",
           only="store/", defaults={"extract": args}, roots=(csv_baseline.folder,))


# ------------------------------------------------------------------ probe, re-fitting with another L2
PROBE_POINTS = [("SIGKILL", 1), ("SIGKILL", 20), ("SIGTERM", 8)]


@pytest.mark.parametrize("sig, writes", PROBE_POINTS, ids=[f"{s}-after{w}" for s, w in PROBE_POINTS])
def test_killed_probe_leaves_old_or_new_whole(baseline, probe_ref, tmp_path, sig, writes):
    _killed_then_read_whole(baseline, probe_ref, tmp_path, sig, writes, "probe", PROBE_CHANGE, "score",
                            f"probe with another L2, {sig} after {writes} writes",
                            read_only="results/", resumed_only="store/", final_only="results/")


def _killed_then_read_whole(baseline, ref, tmp_path, sig, writes, stage, change, reader, what, *, read_only,
                            resumed_only, final_only=None):
    """``stage`` with ``change`` killed after ``writes`` writes: the next stage (``reader``) sees the old
    outputs or the new ones whole; the killed command resumes to ``ref``'s outputs, and ``reader`` then
    gives ``ref``'s outputs too."""
    folder = case(baseline, tmp_path)
    args = stage_args(stage, folder, **change)
    killed(args, folder, writes, sig)
    read_whole(stage_args(reader, folder), folder, {"old": baseline.outputs, "new": ref.outputs},
               f"{what}, then {reader}", only=read_only)
    settle(crs_here(*args), args, folder, ref.outputs, what + ", then resumed", only=resumed_only)
    r = crs_here(*stage_args(reader, folder))
    assert r.rc == 0, r.message[-1500:]
    assert not differences(outputs(folder), ref.outputs, final_only), f"{what}: outputs after the resume and {reader}"


# ------------------------------------------------------------------ score, with another bootstrap size
SCORE_POINTS = [("SIGKILL", 1), ("SIGKILL", 8), ("SIGTERM", 4)]


@pytest.mark.parametrize("sig, writes", SCORE_POINTS, ids=[f"{s}-after{w}" for s, w in SCORE_POINTS])
def test_killed_score_leaves_old_or_new_whole(baseline, score_ref, tmp_path, sig, writes):
    _killed_then_read_whole(baseline, score_ref, tmp_path, sig, writes, "score", SCORE_CHANGE, "report",
                            f"score with another bootstrap, {sig} after {writes} writes",
                            read_only="report/", resumed_only="results/")


# ------------------------------------------------------------------ report
REPORT_POINTS = [("SIGKILL", 2), ("SIGTERM", 2)]


@pytest.mark.parametrize("sig, writes", REPORT_POINTS, ids=[f"{s}-after{w}" for s, w in REPORT_POINTS])
def test_killed_report_is_rewritten_whole(baseline, tmp_path, sig, writes):
    folder = case(baseline, tmp_path)
    shutil.rmtree(folder / REPORT)
    args = stage_args("report", folder)
    killed(args, folder, writes, sig)
    settle(crs_here(*args), args, folder, baseline.outputs, f"report {sig} after {writes} writes, then resumed")
