"""The Ray executor on a local Ray instance (2 CPUs, no GPU) that the tests start: the store it
writes equals the local executor's bit for bit, a replica killed mid-run is survived, a
re-run skips complete chunks and writes exactly the missing ones, and every array records the
encoder's weights and cost as the local executor does."""

import os
import sys

import numpy as np
import pytest
import zarr

ray = pytest.importorskip("ray")

from crs.extract import datasets, encoders  # noqa: E402
from crs.extract.cost import model_cost  # noqa: E402
from crs.extract.models import load  # noqa: E402
from crs.extract.run import extract  # noqa: E402
from crs.store import Store  # noqa: E402

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# one local Ray instance and one local-executor store for the module once
pytestmark = pytest.mark.slow

RUN = dict(size=0.05, chunk=16, severities=(2,), ray={"actors": 1})
DATA = "demo_fundus"


@pytest.fixture(scope="module")
def cluster():
    """One local Ray instance for the module (startup takes a few seconds)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the tests' dataset wrapper is pickled by value, so Ray's workers need not import this module
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The local executor's store (demo-vit: matrix products, where thread counts could show)."""
    path = tmp_path_factory.mktemp("local") / "local.zarr"
    run = extract(Store(str(path)), "demo-vit", DATA, **{**RUN, "ray": None})
    assert run.complete
    return path, run


def arrays(path):
    s = Store(str(path), mode="r")
    return {(d, e, c): s.read_embedding(d, e, c) for d, e, c, _ in s.embeddings()}


def assert_same_store(a, b):
    x, y = arrays(a), arrays(b)
    assert x.keys() == y.keys() and x
    for k in x:
        np.testing.assert_array_equal(x[k], y[k], err_msg=str(k))


class CrashOnce:
    """A dataset whose first decode kills its process (os._exit, as a pre-empted worker dies)."""

    def __init__(self, ds, marker):
        self.ds, self.marker = ds, str(marker)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("ds", "marker"):
            raise AttributeError(name)
        return getattr(self.ds, name)

    def images(self, rows):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.ds.images(rows)


def test_ray_writes_the_local_executors_store_bit_for_bit(cluster, local, tmp_path):
    path = tmp_path / "ray.zarr"
    run = extract(Store(str(path)), "demo-vit", DATA, executor="ray", **RUN)
    ref = local[1]
    assert run.complete and run.chunks_written == ref.chunks_written and run.chunks_skipped == 0
    assert run.decodes == ref.decodes == run.images and run.forward_images == ref.forward_images
    assert_same_store(local[0], path)


def test_a_replica_killed_mid_run_is_survived(cluster, local, tmp_path):
    marker = tmp_path / "crashed"
    ds = CrashOnce(datasets.get(DATA, size=RUN["size"]), marker)
    path = tmp_path / "crash.zarr"
    run = extract(Store(str(path)), "demo-vit", ds, executor="ray", **RUN)
    assert marker.exists()  # a replica did die
    assert run.complete and run.chunks_written == local[1].chunks_written
    assert_same_store(local[0], path)


def test_a_rerun_skips_complete_chunks_and_writes_the_missing_ones(cluster, local, tmp_path):
    import shutil

    path = tmp_path / "rerun.zarr"
    shutil.copytree(local[0], path)
    again = extract(Store(str(path)), "demo-vit", DATA, executor="ray", **RUN)
    assert again.chunks_written == 0 and again.chunks_skipped == local[1].chunks_written and again.decodes == 0
    # as an interrupted run leaves it: some chunks lost (zeros), their flags unset, arrays incomplete
    root = zarr.open_group(str(path), mode="a")
    lost = 0
    for cond in ("clean", "jpeg@2"):
        g = root[f"datasets/{DATA}/embeddings/demo-vit/{cond}"]
        g["x"][0:16] = 0
        g["done"][0] = False
        g.attrs["complete"] = False
        lost += 1
    g = root[f"datasets/{DATA}/embeddings/demo-vit/clean"]
    last = g["done"].shape[0] - 1
    g["x"][16 * last:] = 0
    g["done"][last] = False
    lost += 1
    run = extract(Store(str(path)), "demo-vit", DATA, executor="ray", **RUN)
    assert run.complete and run.chunks_written == lost and run.chunks_skipped == local[1].chunks_written - lost
    n = len(Store(str(path), mode="r").dataset(DATA).ids)
    assert run.decodes == 16 + (n % 16 or 16)  # the first and the last unit, each decoded once
    assert_same_store(local[0], path)


def test_crs_extract_executor_ray_through_the_cli(cluster, local, tmp_path):
    import json

    from typer.testing import CliRunner

    from crs.cli import app

    path = tmp_path / "cli.zarr"
    r = CliRunner().invoke(app, ["extract", "-e", "demo-vit", "-d", DATA, "--size", str(RUN["size"]), "--chunk", "16",
                                 "--severities", "2", "--store", str(path), "--executor", "ray", "--actors", "1",
                                 "--json"])
    assert r.exit_code == 0, r.output
    (run,) = json.loads(r.output)["runs"]
    assert run["complete"] and run["chunks_written"] == local[1].chunks_written and run["dataset"] == DATA
    assert_same_store(local[0], path)


def test_ray_arrays_record_the_weights_and_cost_of_a_local_run(cluster, tmp_path):
    """The replica's model measured, the forward rate from the replicas' forward seconds; a no-op
    re-run leaves them as they were."""
    store = Store(str(tmp_path / "ray.zarr"))
    run = extract(store, "demo-vit", DATA, **RUN)
    assert run.complete and run.forward_images > 0 and run.forward_seconds > 0

    def attrs(cond="clean"):
        return dict(store.open_embedding(DATA, "demo-vit", cond).group.attrs)

    got = attrs()
    want = model_cost(load(encoders.get("demo-vit"), "cpu"))  # what the local executor records (prepare.record_cost)
    assert got["weights"] == want["weights"] and got["weights"]["source"]
    cost = got["cost"]
    assert {k: v for k, v in cost.items() if k not in ("images_per_s", "seconds")} == {**want["cost"], "device": "cpu"}
    assert cost["flops_per_image"] > 0 and cost["parameters"] > 0
    assert cost["images_per_s"] == pytest.approx(run.forward_images / run.forward_seconds, rel=1e-3)
    assert cost["seconds"] == pytest.approx(run.forward_seconds, abs=1e-3) and cost["seconds"] > 0
    for cond in run.arrays:  # every array, perturbed ones too
        assert attrs(cond)["cost"] == cost and attrs(cond)["weights"] == got["weights"]
    again = extract(store, "demo-vit", DATA, **RUN)
    assert again.forward_images == 0 and attrs()["cost"] == cost  # nothing embedded: nothing rewritten
