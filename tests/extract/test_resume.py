"""Extraction into a store: complete arrays, idempotent re-runs, and resume after kill -9."""

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import zarr

from crs.extract.run import extract
from crs.store import Store

SIZE = "0.2"


def arrays(path):
    """Every embedding array of a store: {(dataset, encoder, condition): values}."""
    s = Store(str(path), mode="r")
    return {(d, e, c): s.read_embedding(d, e, c) for d, e, c, _ in s.embeddings()}


def done_flags(path):
    """(chunks written, chunks in all) over a store's arrays, read without the CRS layer."""
    with warnings.catch_warnings():  # a group being created right now has no metadata yet
        warnings.simplefilter("ignore")
        return _done_flags(path)


def _done_flags(path):
    try:
        root = zarr.open_group(str(path), mode="r")
        group = root["datasets/demo_derm/embeddings/demo-resnet"]
    except Exception:
        return 0, None
    written = total = 0
    for _, g in group.groups():
        if "done" not in g:  # being created right now
            continue
        flags = np.asarray(g["done"][:])
        written += int(flags.sum())
        total += len(flags)
    return written, total


def cli(store, *extra):
    return [sys.executable, "-m", "crs.cli", "extract", "-e", "demo-resnet", "-d", "demo_derm", "--size", SIZE,
            "--store", str(store), "--chunk", "16", "--quiet", *extra]


def test_extract_writes_complete_arrays_and_reruns_write_nothing(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    first = extract(store, "demo-stats", "demo_derm", size=0.2, chunk=32)
    assert first.complete and first.chunks_skipped == 0
    table = store.dataset("demo_derm")
    x = store.read_embedding("demo_derm", "demo-stats", "clean")
    assert x.shape == (len(table.ids), 54) and x.dtype == np.float16
    noisy = store.read_embedding("demo_derm", "demo-stats", "gaussian_noise@5")
    assert noisy.shape == (table.n_test, 54)
    assert not np.allclose(noisy, x[: table.n_test])  # the perturbation changed the embeddings
    attrs = store.embedding_attrs("demo_derm", "demo-stats", "jpeg@3")
    assert attrs["perturbation"] == {"family": "jpeg", "severity": 3, "quality": 40}
    assert attrs["encoder_spec"]["name"] == "demo-stats" and "torch" in attrs["libraries"]
    assert attrs["preprocessing"]["input_size"] == 64
    second = extract(store, "demo-stats", "demo_derm", size=0.2, chunk=32)
    assert second.chunks_written == 0 and second.chunks_skipped == first.chunks_written
    np.testing.assert_array_equal(store.read_embedding("demo_derm", "demo-stats", "clean"), x)


def test_shift_only_dataset_gets_clean_embeddings_only(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    extract(store, "demo-stats", "demo_cxr_site2", size=0.2, chunk=64)
    assert [c for _, _, c, _ in store.embeddings("demo_cxr_site2")] == ["clean"]


ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The arrays of an extraction that ran to the end, in a separate process."""
    path = tmp_path_factory.mktemp("reference") / "ref.zarr"
    subprocess.run(cli(path), check=True, env=ENV, timeout=600)
    return arrays(path)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_resume_after_interruption_equals_an_uninterrupted_run(tmp_path, sig, uninterrupted):
    env = ENV
    killed = tmp_path / "killed.zarr"

    proc = subprocess.Popen(cli(killed), env=env)
    deadline = time.time() + 300
    written, total = 0, None
    while time.time() < deadline and proc.poll() is None:
        written, total = done_flags(killed)
        if total and 0 < written:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.kill(proc.pid, sig)
    code = proc.wait(timeout=120)
    if sig == signal.SIGINT:
        assert code == 130  # "interrupted: everything written so far is kept"
    written, total = done_flags(killed)
    assert 0 < written < total, (written, total)
    # a reader refuses the interrupted store and says how to resume
    s = Store(str(killed), mode="r")
    incomplete = [c for d, e, c, ok in s.embeddings("demo_derm") if not ok]
    assert incomplete

    resumed = subprocess.run(cli(killed, "--json"), check=True, env=env, capture_output=True, text=True, timeout=600)
    import json

    run = json.loads(resumed.stdout)["runs"][0]
    assert run["chunks_skipped"] >= written and run["complete"]
    a, b = uninterrupted, arrays(killed)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=str(key))
