"""A small ``crs run`` gives the outputs pinned in ``tests/golden/small.json``.

The refactors of the pipeline's layers must not change a number. Every run record, probe
selection, label subset, scores table, scores.json and stored embedding and prediction
array is compared twice (``tests/golden/fingerprint.py``): by its values, to what another
CPU's rounding can explain, on every machine; and bit for bit by its digest where the
platform (CPU, vector extensions, cores, numeric libraries) is one that pinned them, since
the same code rounds differently elsewhere. A difference names the outputs that moved;
re-pin only when a change means to move them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

import fingerprint  # noqa: E402

PRODUCTION_XLA_FLAGS = "CRS_TESTS_PRODUCTION_XLA_FLAGS"  # set by tests/conftest.py
PRODUCTION_OMP_NUM_THREADS = "CRS_TESTS_PRODUCTION_OMP_NUM_THREADS"  # likewise

REPIN = ("if the change is meant to move them, re-pin with `python tests/golden/fingerprint.py --write` "
         "and say so in the commit")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """The small run, in a process of its own under the XLA flags and OpenMP threads the suite was started
    with: the other tests compile without LLVM's optimisations and run one thread per process
    (tests/conftest.py), which rounds differently from what users run, and the digests pin what users run."""
    folder = tmp_path_factory.mktemp("golden")
    env = dict(os.environ)
    for var, saved in (("XLA_FLAGS", PRODUCTION_XLA_FLAGS), ("OMP_NUM_THREADS", PRODUCTION_OMP_NUM_THREADS)):
        env.pop(var, None)
        if os.environ.get(saved):
            env[var] = os.environ[saved]
    done = subprocess.run([sys.executable, str(Path(fingerprint.__file__)), "--run", str(folder)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"crs run small.toml failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return folder


@pytest.fixture(scope="module")
def golden():
    return json.loads(fingerprint.GOLDEN.read_text())


@pytest.mark.slow  # started first (tests/conftest.py)
def test_a_small_run_gives_the_pinned_values_on_any_machine(small_run, golden):
    moved = fingerprint.compare(golden["values"], fingerprint.values(small_run))
    assert not moved, (f"outputs changed against tests/golden/small.json by more than rounding: {len(moved)} "
                       f"differences, the first: {moved[:12]}; {REPIN}")


@pytest.mark.slow
def test_a_small_run_gives_the_pinned_outputs_bit_for_bit_on_a_pinned_platform(small_run, golden):
    here = fingerprint.platform()
    if here not in golden["exact"]:
        pytest.skip(f"platform {here} pinned no digests (pinned: {', '.join(sorted(golden['exact']))}); "
                    "the values were compared to within rounding instead")
    pinned = golden["exact"][here]
    got = fingerprint.fingerprint(small_run)
    missing = sorted(set(pinned) - set(got))
    extra = sorted(set(got) - set(pinned))
    moved = sorted(k for k in set(pinned) & set(got) if not fingerprint.same(pinned[k], got[k]))
    assert not (missing or extra or moved), (
        f"outputs changed against tests/golden/small.json: {len(moved)} differ {moved[:20]}, "
        f"{len(missing)} missing {missing[:10]}, {len(extra)} new {extra[:10]}; {REPIN}"
    )


def test_the_tolerant_comparison_catches_a_real_change(golden):
    """The values check is not blind: a probability moved, a subset changed, a row lost all fail it."""
    want = golden["values"]
    assert fingerprint.compare(want, json.loads(json.dumps(want))) == []
    arrays = [k for k, v in want.items() if isinstance(v, dict) and "sketch" in v and "/predictions/" in k]
    tables = [k for k in want if k.startswith("results/run_records/")]
    subsets = [k for k in want if k.startswith("results/subsets/")]
    assert arrays and tables and subsets

    def changed(key, edit):
        got = json.loads(json.dumps(want))
        edit(got[key])
        return fingerprint.compare(want, got)

    # a mean moved by 1 % of the array's scale (log-probabilities reach far below -1; probabilities do not)
    assert changed(arrays[0], lambda v: v["sketch"]["stats"].__setitem__(
        0, v["sketch"]["stats"][0] + 0.01 * max(v["sketch"]["stats"][1], 1.0)))

    col = want[tables[0]]["columns"].index("brier")
    assert changed(tables[0], lambda t: t["rows"][3].__setitem__(col, t["rows"][3][col] * 1.01))
    col = want[tables[0]]["columns"].index("l2")
    assert changed(tables[0], lambda t: t["rows"][0].__setitem__(col, t["rows"][0][col] * 10))
    assert changed(tables[0], lambda t: t["rows"].pop())
    col = want[subsets[0]]["columns"].index("position")
    assert changed(subsets[0], lambda t: t["rows"][0].__setitem__(col, t["rows"][0][col] + 1))
    crs = want["results/scores/encoders.parquet"]["columns"].index("crs")
    assert changed("results/scores/encoders.parquet", lambda t: t["rows"][0].__setitem__(crs, t["rows"][0][crs] + 3))
