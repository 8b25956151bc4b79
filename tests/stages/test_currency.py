"""Every setting of a stage with a settings hash changes that stage's currency and the later ones', never
an earlier one's: the hash is computed from the stage's options record, which holds every setting of its
section (``crs.foundations.config.options_record``), so no setting can be left out of it.

The extraction is real (demo-stats, one small dataset, once per module); the probe, score and report
workers are replaced by fakes that write their options record and inputs, so each ``pipeline.run`` takes
well under a second and what it finds current is decided by the real currency code alone.
"""

import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest

import crs.foundations.config as C
from crs.stages import pipeline
from crs.stages import probe as probe_stage
from crs.stages import report as report_stage
from crs.stages import score as score_stage

BASE = """\
store = "s.zarr"
results = "res"

[encoders]
names = ["demo-stats"]

[datasets]
names = ["demo_derm"]
size = 0.1

[extract]
perturb = false

[probe]
seeds = 2
fractions = [0.5, 1]
l2 = [0.1, 1]
head = "mlp"

[score]
bootstrap = 20
"""

# another valid value for every setting of the stages whose currency is a settings hash (the extract
# stage's is the store's ledger of committed chunks); a setting added to those sections fails
# test_every_setting_has_another_value until it is given one here
OTHER = {
    ("probe", "seeds"): 3, ("probe", "fractions"): (1.0,), ("probe", "l2"): (1.0,), ("probe", "select_by"): "auroc",
    ("probe", "tol"): 1e-3, ("probe", "head"): "linear", ("probe", "hidden"): 64,
    ("score", "reference"): "median", ("score", "weights"): (0.5, 0.25, 0.25), ("score", "bootstrap"): 30,
    ("score", "bootstrap_unit"): "seed", ("score", "seed"): 1, ("score", "min_difference"): 3.0,
    ("score", "crs_version"): "1",
    ("report", "enabled"): False, ("report", "out"): "elsewhere",
}
STAGES = ("extract", "probe", "score", "report")
HASHED = ("probe", "score", "report")


def fake_probe(store_path, results, pairs, settings, progress=None, on_done=None):
    from crs.probe.run import head_name, records_path

    out = []
    for e, d in pairs:
        path = records_path(results, head_name(e, settings.head), d)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([e, d, dataclasses.asdict(probe_stage.probe_options(settings))]), encoding="utf-8")
        out.append(SimpleNamespace(encoder=e, dataset=d, probes=1, not_converged=0))
        on_done(out[-1])
    return out


def fake_score(results, settings, store=None, pairs=None, progress=None):
    from crs.probe.run import records_path

    data = {"settings": dataclasses.asdict(score_stage.score_options(settings)),
            "records": [records_path(results, e, d).read_text(encoding="utf-8") for e, d in pairs],
            "rank_comparison": None, "encoders": [], "weight_sensitivity": [], "diagnostics": []}
    (results / "scores").mkdir(parents=True, exist_ok=True)
    (results / "scores" / "scores.json").write_text(json.dumps(data), encoding="utf-8")
    return SimpleNamespace(to_json=lambda: data)


def fake_report(results, out, *, store=None, quiet=True):
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_bytes((results / "scores" / "scores.json").read_bytes())
    return {"html": str(out / "report.html")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the base config, its results folder after one full run) with the fakes in place."""
    folder = tmp_path_factory.mktemp("currency")
    cfg = C.resolve(C.parse(BASE), folder)
    with pytest.MonkeyPatch.context() as mp:
        for stage, fake in ((probe_stage, fake_probe), (score_stage, fake_score), (report_stage, fake_report)):
            mp.setattr(stage, "run", fake)
        first = pipeline.run(cfg)
        assert all(first.stages[s].done for s in STAGES)
        yield cfg, folder


def what_ran(cfg, base_results, folder):
    """The stages a run of ``cfg`` computed, over a copy of the base run's results."""
    results = folder / "res"
    shutil.copytree(base_results, results)
    out = pipeline.run(C.with_overrides(cfg, results=str(results)))
    return [s for s in STAGES if out.stages[s].done or not out.stages[s].enabled]


def test_every_setting_has_another_value():
    assert {path for path, _, _ in C.settings() if path[0] in HASHED} == set(OTHER)


def test_the_base_config_run_again_computes_nothing(built, tmp_path):
    cfg, folder = built
    assert what_ran(cfg, folder / "res", tmp_path) == []


@pytest.mark.parametrize("path", sorted(OTHER), ids=".".join)
def test_a_changed_setting_makes_its_stage_and_the_later_ones_not_current(built, tmp_path, path):
    cfg, folder = built
    section, name = path
    changed = C.with_overrides(cfg, **{section: {name: OTHER[path]}})
    assert getattr(changed, section) != getattr(cfg, section)
    changed = C.resolve(C.parse(C.to_toml(changed)), tmp_path)  # the value passes the schema's checks
    changed = C.with_overrides(changed, store=cfg.store)
    assert what_ran(changed, folder / "res", tmp_path) == list(STAGES[STAGES.index(section):])


def test_a_record_without_a_field_for_a_setting_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Renamed:
        enabled: bool = True
        out_folder: str | None = None

    with pytest.raises(TypeError, match="Renamed has no field 'out' for report.out"):
        C.options_record(Renamed, C.Report())
