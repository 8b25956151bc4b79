"""Under the Ray executor (a local Ray instance, 2 CPUs, as tests/extract/test_ray.py), every array
records the encoder's weights and cost as the local executor does: the replica's model measured, the
forward rate from the replicas' forward seconds, and a no-op re-run leaves them as they were."""

import pytest

ray = pytest.importorskip("ray")

from crs.extract import encoders  # noqa: E402
from crs.extract.models import load  # noqa: E402
from crs.extract.run import extract, model_cost  # noqa: E402
from crs.store import Store  # noqa: E402

RUN = dict(size=0.05, chunk=16, severities=(2,))
DATA, ENCODER = "demo_fundus", "demo-vit"
MEASURED = ("images_per_s",)  # differs run to run; everything else is a property of the model


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def attrs(store, cond="clean"):
    return dict(store.open_embedding(DATA, ENCODER, cond).group.attrs)


def test_ray_arrays_record_the_weights_and_cost_of_a_local_run(cluster, tmp_path):
    store = Store(str(tmp_path / "ray.zarr"))
    run = extract(store, ENCODER, DATA, executor="ray", ray_options={"actors": 1}, **RUN)
    assert run.complete and run.forward_images > 0 and run.forward_seconds > 0

    got = attrs(store)
    want = model_cost(load(encoders.get(ENCODER), "cpu"))  # what the local executor records (run.record_cost)
    assert got["weights"] == want["weights"] and got["weights"]["source"]
    cost = got["cost"]
    assert {k: v for k, v in cost.items() if k not in MEASURED} == {**want["cost"], "device": "cpu"}
    assert cost["flops_per_image"] > 0 and cost["parameters"] > 0
    assert cost["images_per_s"] == pytest.approx(run.forward_images / run.forward_seconds, rel=1e-3)
    for cond in run.arrays:  # every array, perturbed ones too
        assert attrs(store, cond)["cost"] == cost and attrs(store, cond)["weights"] == got["weights"]

    again = extract(store, ENCODER, DATA, executor="ray", ray_options={"actors": 1}, **RUN)
    assert again.forward_images == 0 and attrs(store)["cost"] == cost  # nothing embedded: nothing rewritten
