"""A small ``crs run`` gives the same outputs bit for bit as when ``tests/golden/small.json`` was pinned.

The refactors of the pipeline's layers must not change a number: every run record, probe
selection, label subset, scores table, scores.json and stored embedding and prediction
array is compared by its fingerprint (``tests/golden/fingerprint.py``; the scores tables
by value to 1e-12, since scoring's own float sums vary by about 1e-17 between runs). A difference
names the outputs that moved; re-pin only when a change means to move them.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

import fingerprint  # noqa: E402


@pytest.mark.slow  # started first (tests/conftest.py)
def test_a_small_run_gives_the_pinned_outputs_bit_for_bit(tmp_path):
    golden = json.loads(fingerprint.GOLDEN.read_text())
    fingerprint.run_small(tmp_path)
    got = fingerprint.fingerprint(tmp_path)
    missing = sorted(set(golden) - set(got))
    extra = sorted(set(got) - set(golden))
    moved = sorted(k for k in set(golden) & set(got) if not fingerprint.same(golden[k], got[k]))
    assert not (missing or extra or moved), (
        f"outputs changed against tests/golden/small.json: {len(moved)} differ {moved[:20]}, "
        f"{len(missing)} missing {missing[:10]}, {len(extra)} new {extra[:10]}; if the change is meant to "
        "move them, re-pin with `python tests/golden/fingerprint.py --write` and say so in the commit"
    )
