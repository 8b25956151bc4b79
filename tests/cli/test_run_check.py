"""`crs run --check` (and `crs run` before any stage) checks score.reference against the encoders the run scores."""

import pytest
from typer.testing import CliRunner

from crs.cli import app

CONFIG = """\
store = "s.zarr"
results = "res"

[encoders]
names = ["demo-stats", "demo-resnet"]

[probe]
head = "{head}"

[score]
reference = "{reference}"
"""


def run(tmp_path, reference, head="linear", *flags):
    cfg = tmp_path / "bench.toml"
    cfg.write_text(CONFIG.format(reference=reference, head=head))
    return CliRunner().invoke(app, ["run", str(cfg), *flags])


@pytest.mark.parametrize("reference, head", [("auto", "linear"), ("median", "linear"), ("demo-stats", "linear"),
                                             ("demo-resnet+mlp", "mlp")])
def test_a_reference_the_run_scores_passes(tmp_path, reference, head):
    r = run(tmp_path, reference, head, "--check")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("reference, head", [("demo-vit", "linear"), ("medain", "linear"), ("demo-stats", "mlp")])
def test_a_reference_the_run_does_not_score_is_refused_with_its_line(tmp_path, reference, head):
    r = run(tmp_path, reference, head, "--check")
    assert r.exit_code == 2
    assert "bench.toml line 11: score.reference" in r.output and repr(reference) in r.output


def test_run_refuses_a_bad_reference_before_any_stage(tmp_path):
    r = run(tmp_path, "demo-vit")
    assert r.exit_code == 2 and "score.reference" in r.output
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "res").exists()
