"""The store on object storage: a real S3-compatible server (moto's server mode) on 127.0.0.1.

extract, probe and score run against s3://BUCKET/store.zarr exactly as against a folder, an
extraction killed with SIGKILL resumes there, and the object-store lock refuses a live holder
and takes over a dead one. Credentials and the endpoint come from the AWS_* environment
variables, as they would for a real bucket."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

import forkrun  # noqa: E402  (tests/forkrun.py)
import shared_builds  # noqa: E402  (tests/shared_builds.py)
from crs.cli import app  # noqa: E402
from crs.extract.units import KILL_AFTER_COMMITS  # noqa: E402
from crs.store import LockHeld, Store, StoreError, object_lock  # noqa: E402
from crs.store.location import url_storage_options  # noqa: E402

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# one moto server for the module once
pytestmark = pytest.mark.slow

BUCKET = "crs-test"
runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 and the AWS_* variables that point every client at it."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(BUCKET)
        yield env
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def url(name: str) -> str:
    return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}.zarr"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def arrays(path, encoder=None):
    s = Store(str(path), mode="r")
    return {(d, e, c): s.read_embedding(d, e, c) for d, e, c, _ in s.embeddings() if encoder in (None, e)}


MEASURED = ("seconds", "forward_seconds", "images_per_s")  # timings of this machine, not results


def _settled(attrs: dict) -> dict:
    out = {k: v for k, v in attrs.items() if k not in ("created", "completed", "written", "libraries", "tool")}
    if isinstance(out.get("cost"), dict):
        out["cost"] = {k: v for k, v in out["cost"].items() if k not in MEASURED}
    return out


def test_extract_probe_score_on_s3_equal_the_folder_run(s3, tmp_path):
    folder, bucket = tmp_path / "s.zarr", url("pipeline")
    out = {}
    for store, results in ((folder, tmp_path / "r-folder"), (bucket, tmp_path / "r-s3")):
        r = invoke("extract", "-e", "demo-stats", "-e", "demo-vit", "-d", "demo_fundus", "--size", "0.1",
                   "--store", store, "--chunk", "64", "--severities", "3", "--json")
        assert r.exit_code == 0, r.output
        run = json.loads(r.output)["runs"]
        r = invoke("probe", "--all", "--store", store, "--results", results, "--seeds", "2",
                   "--fractions", "0.5,1", "--l2", "1e-2,1", "--json")
        assert r.exit_code == 0, r.output
        r = invoke("score", "--results", results, "--bootstrap", "20", "--bootstrap-unit", "image",
                   "--store", store, "--json")
        assert r.exit_code == 0, r.output
        out[str(store)] = (run, json.loads(r.output))
    (run_f, score_f), (run_s, score_s) = out[str(folder)], out[bucket]
    for a, b in zip(run_f, run_s):
        assert {k: v for k, v in a.items() if k not in MEASURED} == {k: v for k, v in b.items() if k not in MEASURED}
    x, y = arrays(folder), arrays(bucket)
    assert x.keys() == y.keys() and len(x) > 2  # the shift target and every condition
    for k in x:
        np.testing.assert_array_equal(x[k], y[k], err_msg=str(k))
    sf, sb = Store(str(folder), mode="r"), Store(bucket, mode="r")
    for d, e, c in x:
        assert _settled(sf.embedding_attrs(d, e, c)) == _settled(sb.embedding_attrs(d, e, c))
    p, _ = sf.read_predictions("demo_fundus", "demo-stats", "clean")
    q, _ = sb.read_predictions("demo_fundus", "demo-stats", "clean")
    np.testing.assert_array_equal(p, q)

    import polars as pl
    from polars.testing import assert_frame_equal

    from crs.foundations import records

    a, b = (records.read(tmp_path / r).sort("encoder", "dataset", "seed", "fraction", "condition")
            for r in ("r-folder", "r-s3"))
    assert a.height > 0
    assert_frame_equal(a, b)
    def results(rows):
        return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]

    assert results(score_f["encoders"]) == results(score_s["encoders"])  # same metrics, CRS, image intervals
    assert pl.DataFrame(score_f["encoders"]).height == 2
    # nothing is left locked, and a re-run writes nothing
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.find(bucket[len("s3://"):] + "/.crs-locks") == []
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_fundus", "--size", "0.1", "--store", bucket,
               "--chunk", "64", "--severities", "3", "--json")
    assert all(run["chunks_written"] == 0 for run in json.loads(r.output)["runs"])


def test_a_prefix_that_holds_other_objects_is_refused_and_a_missing_store_named(s3):
    import s3fs

    prefix = url("notes")
    s3fs.S3FileSystem(skip_instance_cache=True).pipe_file(prefix[len("s3://"):] + "/keep.txt", b"mine")
    with pytest.raises(StoreError, match="holds objects but no Zarr store"):
        Store(prefix)
    with pytest.raises(StoreError, match="no CRS store at"):
        Store(url("missing"), mode="r")


def test_object_lock_refuses_a_live_holder_and_takes_over_a_dead_one(s3):
    store = Store(url("lock"))
    with object_lock(store, "d|e", wait=False, what="d × e"):
        with pytest.raises(LockHeld, match=f"pid {os.getpid()} on host {socket.gethostname()}"):
            with object_lock(store, "d|e", wait=False, what="d × e"):
                pass
    fs, root = store.files.filesystem()
    assert fs.find(f"{root}/.crs-locks") == []  # released: a clean exit leaves no lock object
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock_path = f"{root}/.crs-locks/x.json"
    fs.pipe_file(lock_path, json.dumps({"pid": dead.pid, "host": socket.gethostname(), "heartbeat": time.time(),
                                        "token": "old"}).encode())
    with object_lock(store, "x", wait=False, what="x") as stale:
        assert stale == f"pid {dead.pid} on {socket.gethostname()}"
    # another host's holder: alive while its heartbeat is fresh, dead once it is older than stale_s
    fs.pipe_file(lock_path, json.dumps({"pid": 1, "host": "elsewhere", "heartbeat": time.time() - 60,
                                        "token": "other"}).encode())
    with pytest.raises(LockHeld, match="pid 1 on host elsewhere"):
        with object_lock(store, "x", wait=False, what="x", stale_s=600):
            pass
    with object_lock(store, "x", wait=False, what="x", stale_s=30) as stale:
        assert stale == "pid 1 on elsewhere"


def test_reading_a_stored_object_is_one_request(s3, monkeypatch):
    """Every read of a store object on S3 is one GET, with no HEAD before it (s3fs otherwise asks each
    object's size first, doubling the round trips of every metadata and chunk read)."""
    import s3fs.core

    store = Store(url("reads"))
    store.root.create_array("a", shape=(4,), dtype=np.int32, chunks=(2,))[:] = np.arange(4)
    calls = []
    original = s3fs.core.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        calls.append(getattr(method, "__name__", str(method)))
        return await original(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", counted)
    reader = Store(store.path, mode="r")
    calls.clear()  # opening checks that the store exists (a HEAD request); the reads follow
    assert reader.files.read_bytes("a/zarr.json")
    np.testing.assert_array_equal(reader.root["a"][:], np.arange(4))  # metadata, then both chunks
    assert "head_object" not in calls and calls.count("get_object") >= 4, calls


# ------------------------------------------------------------------ kill -9 and resume on S3
def _cli(store, *extra):
    """``python ARGS`` of a CLI extraction, for tests/forkrun.py (a process of its own, forked warm)."""
    return ["-m", "crs.cli", "extract", "-e", "demo-resnet", "-d", "demo_derm", "--size", "0.1",
            "--store", str(store), "--chunk", "16", "--severities", "2", "--quiet", *extra]


def _done(store_url):
    """(chunks written, chunks in all) of the store's demo-resnet arrays, read without the CRS layer."""
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            group = zarr.open_group(store_url, mode="r", storage_options=url_storage_options(store_url))
            group = group["datasets/demo_derm/embeddings/demo-resnet"]
            written = total = 0
            for _, g in group.groups():
                flags = np.asarray(g["done"][:])
                written += int(flags.sum())
                total += len(flags)
            return written, total
        except Exception:  # not there yet, or being created right now
            return 0, None


def test_an_extract_killed_on_s3_resumes_to_the_uninterrupted_arrays(s3, tmp_path, tmp_path_factory):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    reference = shared_builds.resnet_derm_store(tmp_path_factory)  # the folder run, made once a run
    assert shared_builds.RESNET_DERM == dict(size=0.1, chunk=16, severities=(2,))  # as _cli runs it
    # killed right after its first commit by the extract's test-only hook (crs.extract.units.after_commit):
    # at that point on every run, however fast the machine or slow the S3 server
    bucket = url("killed")
    proc = forkrun.start(_cli(bucket), env={**env, KILL_AFTER_COMMITS: "1"})
    assert proc.wait(timeout=300) == -signal.SIGKILL
    written, total = _done(bucket)
    assert total and 0 < written < total, (written, total)
    resumed = forkrun.run(_cli(bucket, "--json"), env=env, timeout=600, check=True)
    run = json.loads(resumed.stdout)["runs"][0]
    assert run["complete"] and run["chunks_skipped"] == written and run["chunks_written"] == total - written
    assert run["lock_taken_over"] == f"pid {proc.pid} on {socket.gethostname()}"  # the dead holder's lock object
    a, b = arrays(reference), arrays(bucket)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=str(key))
