"""The stages as library functions: no command line, no rich, and the probe head as a config key."""

import re

import pytest

from crs import stages
from crs.foundations import config as C
from crs.foundations.errors import BadInput, UserError

TINY = """\
[encoders]
names = ["demo-stats", "demo-resnet"]

[datasets]
names = ["demo_derm"]
size = 0.05

[extract]
severities = [1]

[probe]
seeds = 1
fractions = [0.5, 1.0]
l2 = [1.0]
head = "mlp"
hidden = 8

[score]
bootstrap = 5

[report]
enabled = false
"""


@pytest.mark.slow  # started first (tests/conftest.py)
def test_run_fits_the_head_the_config_names(tmp_path):
    cfg = C.with_overrides(C.parse(TINY), store=str(tmp_path / "s.zarr"), results=str(tmp_path / "res"))
    result = stages.run(cfg)  # the default progress shows nothing
    assert sorted(result.stages["probe"].done) == ["demo-resnet+mlp × demo_derm", "demo-stats+mlp × demo_derm"]
    assert (tmp_path / "res" / "run_records" / "demo-stats+mlp__demo_derm.parquet").exists()
    assert sorted(e["encoder"] for e in result.scores_json["encoders"]) == ["demo-resnet+mlp", "demo-stats+mlp"]
    again = stages.run(cfg)  # the pairs' records are found under their head's name: nothing to redo
    assert len(again.stages["probe"].skipped) == 2 and again.stages["score"].skipped == ["scores"]


def test_name_checks_are_user_errors():
    with pytest.raises(BadInput, match="unknown encoder 'nope'"):
        stages.check_encoders(["nope"], {})
    with pytest.raises(BadInput, match="unknown dataset 'nope'"):
        stages.check_dataset_names(["nope"])
    with pytest.raises(C.ConfigError) as e:
        stages.check_names(C.parse('[encoders]\nnames = ["nope"]\n'), text='[encoders]\nnames = ["nope"]\n')
    assert isinstance(e.value, UserError) and e.value.line == 2


def test_the_extract_stage_counts_its_steps_in_chunks(tmp_path):
    """`crs run` logs with a progress whose default unit is a bare step; the extract stage names its own
    (one step is one array chunk written)."""
    from crs.foundations.progress import LineProgress

    cfg = C.with_overrides(C.parse(TINY.replace('"demo-stats", "demo-resnet"', '"demo-stats"')),
                           store=str(tmp_path / "s.zarr"))
    lines: list[str] = []
    with LineProgress(0.01, lines.append) as progress:
        stages.extract.run(cfg, progress)
    assert any(re.search(r"demo-stats × demo_derm: \d+/\d+ chunks .*chunks/s average", line) for line in lines), lines
