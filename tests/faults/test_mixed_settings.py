"""A `crs probe --all` with new settings stopped between two pairs: `crs score` refuses the mix.

Each pair's probe output is committed whole (``crs.foundations.records.check_pair``), so a probe stopped part-way
leaves some pairs with the new settings and the others with the old. Scoring that mix would compare
encoders under two probe protocols. The state is made here without a kill, so that the test does not
depend on where a kill lands: one encoder re-probed with the other L2, as the stopped run leaves it."""

from __future__ import annotations

from faultlib import DATASET, PROBE_CHANGE, case, crs_here, settle, stage_args


def test_score_refuses_pairs_probed_with_different_settings_and_names_the_repair(baseline, probe_ref, tmp_path):
    folder = case(baseline, tmp_path)
    first_pair = stage_args("probe", folder, all=False, **PROBE_CHANGE) + ["--encoder", "demo-stats",
                                                                          "--dataset", DATASET]
    assert crs_here(*first_pair).rc == 0
    score = stage_args("score", folder)
    first = crs_here(*score)
    assert first.rc == 2, first.message[-1500:]
    assert "l2 [0.01]" in first.message and "l2 [1.0]" in first.message
    settle(first, score, folder, probe_ref.outputs, "score after a probe stopped between two pairs",
           names=("demo-stats", "demo-resnet", "different settings"), only="results/")
