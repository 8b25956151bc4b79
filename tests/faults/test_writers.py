"""Two writers at once: two extracts into one new store, two probes of the same pair, two of different pairs.

Each process must end with exit 0, or exit 2 naming the other writer (its pid) when they would
write the same thing; after both, running the command once more (if one was refused) must leave
the uninterrupted run's outputs.
"""

from __future__ import annotations

import shutil

import pytest
from faultlib import STORE, assert_same, case, crs_here, finish, stage_args, start

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# the session fixtures of faultlib.py (baseline, probe_ref, score_ref, csv_baseline) once per worker
pytestmark = pytest.mark.slow


def both(args_a, args_b):
    pa, pb = start(*args_a), start(*args_b)
    return finish(pa), finish(pb)


def refused_for_the_other(r, what):
    assert r.rc in (0, 2), f"{what}: exit {r.rc}:\n{r.message[-1500:]}"
    if r.rc == 2:
        assert "pid" in r.message.lower(), (f"{what}: refused without naming the other writer's pid:\n"
                                            f"{r.message[-1500:]}")


def test_two_extracts_into_one_new_store(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    shutil.rmtree(folder / STORE)
    args = stage_args("extract", folder)
    a, b = both(args, args)
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
    a, b = both(args, args)
    for r, name in ((a, "first probe"), (b, "second probe")):
        refused_for_the_other(r, name)
    assert 0 in (a.rc, b.rc), "both probes of one pair were refused"
    assert_same(folder, baseline.outputs, "two probes of the same pair at once")


def test_two_probes_of_different_pairs_both_run(baseline, tmp_path):
    folder = case(baseline, tmp_path)
    a, b = both(stage_args("probe", folder, all=False, encoder="demo-stats", dataset="demo_derm"),
                stage_args("probe", folder, all=False, encoder="demo-resnet", dataset="demo_derm"))
    for r, name in ((a, "demo-stats probe"), (b, "demo-resnet probe")):
        assert r.rc == 0, f"{name} beside a probe of another pair: exit {r.rc}:\n{r.message[-1500:]}"
    assert_same(folder, baseline.outputs, "two probes of different pairs at once")
