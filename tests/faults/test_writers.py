"""Two writers at once: two extracts into one new store, two probes of the same pair, two of different pairs.

The overlap is forced on every run: the first writer is stopped (SIGSTOP) while it holds a lock of its
work, the second runs beside it, then the first goes on (SIGCONT). Each process must end with exit 0, or
exit 2 naming the other writer (its pid) when they would write the same thing; after both, running the
command once more (if one was refused) must leave the uninterrupted run's outputs.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from faultlib import RESULTS, STORE, assert_same, case, crs_here, finish, stage_args, start, wait_for

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# the session fixtures of faultlib.py (baseline, probe_ref, score_ref, csv_baseline) once per worker
pytestmark = pytest.mark.slow


def holds(p, folder: Path, prefix: str) -> bool:
    """p holds a lock whose file name starts with ``prefix`` (a held lock file names its holder's pid), and no
    dataset lock (another writer waits for those, and would wait for a stopped holder for ever)."""
    def named(f: Path) -> bool:
        try:
            return f'"pid": {p.pid}' in f.read_text()
        except OSError:
            return False
    files = [f for d in (folder / STORE, folder / RESULTS) for f in d.glob(".crs-locks/*.lock")]
    return (any(f.name.startswith(prefix) and named(f) for f in files)
            and not any(f.name.startswith("dataset") and named(f) for f in files))


def both(args_a, args_b, folder: Path, prefix: str):
    """The second writer runs while the first is stopped holding a lock (``holds``); if the second waits for
    that lock instead of ending (30 s), the first goes on and both finish."""
    pa = start(*args_a)
    assert wait_for(lambda: holds(pa, folder, prefix), pa, poll=0.002), (
        f"the first writer ended (exit {pa.poll()}) without being seen holding a {prefix}* lock")
    pa.send_signal(signal.SIGSTOP)
    try:
        pb = start(*args_b)
        wait_for(lambda: False, pb, timeout=30)
    finally:
        pa.send_signal(signal.SIGCONT)
    b = finish(pb)
    return finish(pa), b


def refused_for_the_other(r, what):
    assert r.rc in (0, 2), f"{what}: exit {r.rc}:\n{r.message[-1500:]}"
    if r.rc == 2:
        assert "pid" in r.message.lower(), (f"{what}: refused without naming the other writer's pid:\n"
                                            f"{r.message[-1500:]}")


def test_two_extracts_into_one_new_store(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    shutil.rmtree(folder / STORE)
    args = stage_args("extract", folder)
    a, b = both(args, args, folder, "demo_derm")
    for r, name in ((a, "first extract"), (b, "second extract")):
        refused_for_the_other(r, name)
    if 2 in (a.rc, b.rc):
        r = crs_here(*args)
        assert r.rc == 0, r.message[-1500:]
    want = {k: v for k, v in baseline.outputs.items() if "/predictions/" not in k}
    assert_same(folder, want, "two extracts at once", only="store/")


def test_two_probes_of_the_same_pair(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    args = stage_args("probe", folder, all=False, encoder="demo-stats", dataset="demo_derm")
    a, b = both(args, args, folder, "probe")
    assert a.rc == 0, f"the first probe: exit {a.rc}:\n{a.message[-1500:]}"
    assert b.rc == 2, f"the second probe ran while the first held the pair: exit {b.rc}:\n{b.message[-1500:]}"
    refused_for_the_other(b, "second probe")
    assert_same(folder, baseline.outputs, "two probes of the same pair at once")


def test_two_probes_of_different_pairs_both_run(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    a, b = both(stage_args("probe", folder, all=False, encoder="demo-stats", dataset="demo_derm"),
                stage_args("probe", folder, all=False, encoder="demo-resnet", dataset="demo_derm"), folder, "probe")
    for r, name in ((a, "demo-stats probe"), (b, "demo-resnet probe")):
        assert r.rc == 0, f"{name} beside a probe of another pair: exit {r.rc}:\n{r.message[-1500:]}"
    assert_same(folder, baseline.outputs, "two probes of different pairs at once")
