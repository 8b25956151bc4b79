"""The plan's FLOP figure for every record whose architecture can be built without its weights
(crs.extract.plan.macs_for): formulas and published figures where they exist, else the meta-device
count of crs.extract.cost.estimate, cached for the registry's own records so that `crs extract --plan`
needs no torch."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from crs.extract import cost, encoders
from crs.extract import plan as planmod


@pytest.mark.parametrize("name", sorted(planmod.COUNTED_FLOPS))
def test_each_cached_count_is_the_meta_device_count_of_its_record(name):
    assert cost.estimate(encoders.get(name))["flops_per_image"] == planmod.COUNTED_FLOPS[name]


def test_every_registry_record_has_a_figure_formula_first():
    for name, spec in encoders.ENCODERS.items():
        macs = planmod.macs_for(spec)
        assert macs is not None and macs > 0, name
        if planmod.macs_per_image(spec) is not None:  # the formula or published figure wins where there is one
            assert macs == planmod.macs_per_image(spec), name
        else:
            assert macs == planmod.COUNTED_FLOPS[name] / 2, name


def test_a_record_outside_the_cache_is_counted_now_and_a_hub_id_has_no_figure():
    # a record of an encoder file: the demo ResNet at another input size, so the cache must not answer
    mine = dataclasses.replace(encoders.get("demo-resnet"), name="my-resnet", input_size=24)
    assert planmod.macs_for(mine) == cost.estimate(mine)["flops_per_image"] / 2
    assert planmod.macs_for(mine) < planmod.COUNTED_FLOPS["demo-resnet"] / 2
    changed = dataclasses.replace(encoders.get("demo-resnet"), input_size=24)  # same name, not the registry's
    assert planmod.macs_for(changed) == planmod.macs_for(mine)
    hub = dataclasses.replace(encoders.get("demo-resnet"), name="hub-id", model_id="timm:resnet18", width=0)
    assert planmod.macs_for(hub) is None  # no architecture before its weights are loaded


def test_the_demo_plan_has_every_gpu_time_and_loads_no_weights_and_no_torch(tmp_path):
    code = ("import sys; from crs.cli import main; sys.argv = ['crs', 'extract', '--demo', '-d', 'demo_fundus', "
            f"'--size', '0.2', '--store', {str(tmp_path / 's.zarr')!r}, '--plan', '--json']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e\n"
            "assert 'torch' not in sys.modules, 'the plan imported torch'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    p = json.loads(r.stdout)
    assert {x["encoder"] for x in p["pairs"]} == set(encoders.demo_names())
    assert p["no_gpu_time_for"] == [] and p["totals"]["gpu_seconds"] > 0 and "H200" in p["gpu_time_source"]
    for x in p["pairs"]:
        assert x["gflops_per_image"] == pytest.approx(planmod.macs_for(encoders.get(x["encoder"])) * 2 / 1e9)
        assert x["gpu_seconds"] > 0 and x["rate_basis"]
    assert not (tmp_path / "s.zarr").exists()


def test_every_registry_record_has_a_gpu_rate_from_the_measured_table():
    """The two measured H200 rates as measured; every other record scaled from the nearer by FLOPs."""
    for name, rate in planmod.MEASURED.items():
        assert planmod.forward_rate(name, planmod.macs_for(encoders.get(name))) == (rate, "measured")
    vit_l = planmod.macs_for(encoders.get("vit-large"))
    for spec in encoders.ENCODERS.values():
        macs = planmod.macs_for(spec)
        rate, basis = planmod.forward_rate(spec.name, macs)
        assert rate > 0 and basis, spec.name
        if basis == "scaled from vit-large by FLOPs":
            assert rate == pytest.approx(planmod.MEASURED["vit-large"] * vit_l / macs)
    basis = planmod.forward_rate("vit-base", planmod.macs_for(encoders.get("vit-base")))[1]
    assert basis.endswith("vit-large by FLOPs")
    assert planmod.forward_rate("hub-id", None) == (None, None)
    assert "3,103" in planmod.RATE_SOURCE and "451" in planmod.RATE_SOURCE
