"""Extraction into a store: complete arrays, idempotent re-runs, resume after kill -9 at several
points, the (dataset, encoder) lock, two encoders writing at once, workers and OOM back-off."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
import zarr

import forkrun  # tests/forkrun.py
import shared_builds  # tests/shared_builds.py
from crs.extract import perturb
from crs.extract.run import extract
from crs.extract.units import KILL_AFTER_COMMITS, Embedder, Unit, embed_unit
from crs.store import LockHeld, Store, hold_lock

# slow: started first (tests/conftest.py); pytest-xdist runs a module on one worker, which builds
# one uninterrupted reference extraction for the module once
pytestmark = pytest.mark.slow

# demo_derm at 0.1: 90 images, 38 chunks of 16 over the 17 arrays (clean + 16 perturbed), so the kill points
# 5 %, 40 % and 75 % fall on different chunks and a killed run still has several left to write
SIZE = "0.1"
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def arrays(path, encoder=None):
    """Every embedding array of a store: {(dataset, encoder, condition): values}."""
    s = Store(str(path), mode="r")
    return {(d, e, c): s.read_embedding(d, e, c) for d, e, c, _ in s.embeddings() if encoder in (None, e)}


def done_flags(path, encoder="demo-resnet"):
    """(chunks written, chunks in all) over a store's arrays, read without the CRS layer."""
    with warnings.catch_warnings():  # a group being created right now has no metadata yet
        warnings.simplefilter("ignore")
        try:
            group = zarr.open_group(str(path), mode="r")[f"datasets/demo_derm/embeddings/{encoder}"]
        except Exception:
            return 0, None
        written = total = 0
        for _, g in group.groups():
            if "done" not in g:  # being created right now
                return 0, None
            flags = np.asarray(g["done"][:])
            written += int(flags.sum())
            total += len(flags)
        return written, total


def cli(store, *extra, encoder="demo-resnet", size=SIZE):
    """``python ARGS`` of a CLI extraction, for tests/forkrun.py (a process of its own, forked warm)."""
    return ["-m", "crs.cli", "extract", "-e", encoder, "-d", "demo_derm", "--size", size,
            "--store", str(store), "--chunk", "16", "--severities", "2", "--quiet", *extra]


def test_extract_writes_complete_arrays_and_reruns_write_nothing(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))  # every condition of every severity: a small dataset
    first = extract(store, "demo-stats", "demo_derm", size=0.05, chunk=32)
    assert first.complete and first.chunks_skipped == 0
    assert first.conditions == 1 + len(perturb.conditions("dermatology"))
    assert first.decodes == first.images  # every image decoded once for all 76 conditions
    table = store.dataset("demo_derm")
    x = store.read_embedding("demo_derm", "demo-stats", "clean")
    assert x.shape == (len(table.ids), 54) and x.dtype == np.float16
    noisy = store.read_embedding("demo_derm", "demo-stats", "ink_marks@5")
    assert noisy.shape == (table.n_test, 54)
    assert not np.allclose(noisy, x[: table.n_test])  # the perturbation changed the embeddings
    attrs = store.embedding_attrs("demo_derm", "demo-stats", "jpeg@3")
    assert attrs["perturbation"] == {"family": "jpeg", "severity": 3, "quality": 40}
    assert attrs["encoder_spec"]["name"] == "demo-stats" and "torch" in attrs["libraries"]
    assert attrs["preprocessing"]["input_size"] == 32 and attrs["modality"] == "dermatology"
    second = extract(store, "demo-stats", "demo_derm", size=0.05, chunk=32)
    assert second.chunks_written == 0 and second.chunks_skipped == first.chunks_written and second.decodes == 0
    np.testing.assert_array_equal(store.read_embedding("demo_derm", "demo-stats", "clean"), x)


def test_each_modality_gets_its_suite(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    run = extract(store, "demo-stats", "demo_cxr", size=0.1, chunk=64, severities=(1,))
    conds = {c for _, _, c, _ in store.embeddings("demo_cxr")}
    assert conds == {"clean"} | set(perturb.conditions("radiology", (1,))) and run.complete


def test_shift_only_dataset_gets_clean_embeddings_only(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    extract(store, "demo-stats", "demo_cxr_site2", size=0.2, chunk=64)
    assert [c for _, _, c, _ in store.embeddings("demo_cxr_site2")] == ["clean"]


def test_decoding_workers_and_batch_size_do_not_change_the_numbers(tmp_path):
    a = Store(str(tmp_path / "a.zarr"))
    b = Store(str(tmp_path / "b.zarr"))
    extract(a, "demo-stats", "demo_fundus", size=0.1, chunk=16, severities=(3,))
    run = extract(b, "demo-stats", "demo_fundus", size=0.1, chunk=16, severities=(3,), workers=2, batch=7)
    assert run.complete
    x, y = arrays(tmp_path / "a.zarr"), arrays(tmp_path / "b.zarr")
    assert x.keys() == y.keys()
    for k in x:
        np.testing.assert_array_equal(x[k], y[k], err_msg=str(k))


def test_out_of_memory_halves_the_batch_and_keeps_going():
    calls = []

    def model(x):
        calls.append(len(x))
        if len(x) > 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x.sum((2, 3))

    embed = Embedder(model, 16)
    x = torch.rand(23, 3, 4, 4)
    out = embed(x)
    torch.testing.assert_close(out, x.sum((2, 3)))
    assert embed.batch == 4 and embed.backoffs == 2 and calls[:3] == [16, 8, 4]
    with pytest.raises(RuntimeError, match="shape"):  # other errors are not swallowed
        Embedder(lambda x: (_ for _ in ()).throw(RuntimeError("bad shape")), 4)(x)


# ------------------------------------------------------------------ kill -9 and resume
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The arrays of an extraction that ran to the end (in a test process: the same function and model as the
    CLI's, one interpreter start fewer; test_object_store compares the two ways the same), made once a run."""
    assert shared_builds.RESNET_DERM == dict(size=float(SIZE), chunk=16, severities=(2,))  # as cli() runs it
    return arrays(shared_builds.resnet_derm_store(tmp_path_factory))


# `crs extract ARGS` whose writer thread, after the COMMITS-th commit of this process, writes MARKER and holds
# until the process has a SIGINT or SIGTERM: the signal arrives mid-run, at that point, on every run.
SIGNAL_AT = """
import signal, sys, threading
from pathlib import Path
from crs import cli
from crs.extract import local

commits, marker, signalled, count = int(sys.argv[1]), Path(sys.argv[2]), threading.Event(), [0]
commit, on_sigterm = local.after_commit, cli.on_sigterm

def after_commit():
    commit()
    count[0] += 1
    if count[0] == commits:
        marker.write_text("held")
        signalled.wait()

def on_sigint(signum, frame):
    signalled.set()
    raise KeyboardInterrupt

def on_term(signum, frame):
    signalled.set()
    on_sigterm(signum, frame)

local.after_commit, cli.on_sigterm = after_commit, on_term
signal.signal(signal.SIGINT, on_sigint)
sys.argv = ["crs", *sys.argv[3:]]
cli.main()
"""


def _signal_after(path, commits: int, sig) -> int:
    """Send ``sig`` to an extraction once it has made ``commits`` commits and is held there; its exit status."""
    marker = path.parent / f"held-{commits}-{sig.name}"
    proc = forkrun.start(["-c", SIGNAL_AT, str(commits), str(marker), *cli(path)[2:]], env=ENV)
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # one stat a poll; the run holds at its point until the signal, however long this takes
    assert marker.exists(), f"the extraction ended (exit {proc.poll()}) without reaching commit {commits}"
    os.kill(proc.pid, sig)
    return proc.wait(timeout=120)


def _kill_9_after(path, commits: int) -> int:
    """Run an extraction that SIGKILLs itself right after its ``commits``-th commit (the test-only hook
    ``crs.extract.units.after_commit``): the kill lands at that point on every run, however loaded the
    machine; the exit status."""
    proc = forkrun.start(cli(path), env={**ENV, KILL_AFTER_COMMITS: str(commits)})
    return proc.wait(timeout=300)


def test_resume_after_kill_9_at_several_points_equals_an_uninterrupted_run(tmp_path, uninterrupted):
    killed = tmp_path / "killed.zarr"
    total = sum(-(-len(x) // 16) for x in uninterrupted.values())  # chunks of 16 rows over every array
    written = 0
    for fraction in (0.05, 0.4, 0.75):
        target = max(written + 1, round(fraction * total))
        assert _kill_9_after(killed, target - written) == -signal.SIGKILL
        before, (written, total) = written, done_flags(killed)
        assert before < target <= written < total, (fraction, target, written, total)
        s = Store(str(killed), mode="r")  # a reader refuses the interrupted store
        assert [c for d, e, c, ok in s.embeddings("demo_derm") if not ok]
    resumed = forkrun.run(cli(killed, "--json"), env=ENV, timeout=600, check=True)
    run = json.loads(resumed.stdout)["runs"][0]
    # no complete chunk is computed again: exactly the missing ones are written
    assert run["complete"] and run["chunks_skipped"] == written and run["chunks_written"] == total - written
    assert "pid" in run["lock_taken_over"]  # the last killed holder left its lock file: taken over
    a, b = uninterrupted, arrays(killed)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=str(key))


def test_resume_after_ctrl_c_and_sigterm_leaves_no_partial_files(tmp_path, uninterrupted):
    killed = tmp_path / "int.zarr"
    total = sum(-(-len(x) // 16) for x in uninterrupted.values())  # chunks of 16 rows over every array
    assert _signal_after(killed, round(0.3 * total), signal.SIGINT) == 130  # "interrupted: everything written is kept"
    written, _ = done_flags(killed)
    assert round(0.3 * total) <= written < total
    # 143: the CLI turns SIGTERM into an interrupt (a CLI without that handler would die of it: -SIGTERM)
    assert _signal_after(killed, max(1, round(0.6 * total) - written), signal.SIGTERM) == 143
    written, total = done_flags(killed)
    assert 0 < written < total
    forkrun.run(cli(killed), env=ENV, timeout=600, check=True)
    b = arrays(killed)
    assert b.keys() == uninterrupted.keys()
    for key in uninterrupted:
        np.testing.assert_array_equal(uninterrupted[key], b[key], err_msg=str(key))
    assert not [p for p in killed.rglob("*") if p.name.endswith((".partial", ".tmp"))]


def test_a_unit_is_committed_condition_by_condition():
    """A kill loses at most one (chunk, condition): ``embed_unit`` hands each condition over as soon as
    it is embedded, before the next one's forward pass (a unit of 256 images x 66 conditions was an hour)."""
    calls = []

    def model(x):
        calls.append(len(x))
        return x.mean((2, 3))

    conds = ["clean"] + perturb.conditions("dermatology", (1,))[:3]
    unit = Unit(j=0, source_rows=np.arange(6), ids=[f"i{k}" for k in range(6)], n_test=4, conds=conds)
    images = torch.randint(0, 255, (6, 8, 8, 3), dtype=torch.uint8)
    it = embed_unit(unit, images, Embedder(model, 64), torch.device("cpu"))
    cond, values = next(it)
    assert (cond, values.shape, calls) == ("clean", (6, 3), [6])  # one forward pass so far
    rest = list(it)
    assert [c for c, _ in rest] == conds[1:] and calls == [6, 4, 4, 4]


def test_a_rerun_repairs_exactly_a_damaged_chunk(tmp_path):
    """A chunk file deleted after its commit: the store lists it as pending (store/resume.py's
    integrity checks), so the next extract re-does that chunk alone and the store is whole again."""
    path = tmp_path / "s.zarr"
    first = extract(Store(str(path)), "demo-stats", "demo_fundus", size=0.1, chunk=16, severities=(1,))
    before = arrays(path)
    chunk = path / "datasets/demo_fundus/embeddings/demo-stats/clean/x/c/1/0"
    assert chunk.is_file()
    chunk.unlink()
    s = Store(str(path))
    if not len(s.open_embedding("demo_fundus", "demo-stats", "clean").pending()):
        pytest.skip("this store's pending() does not see a deleted chunk yet (the store's integrity records)")
    run = extract(s, "demo-stats", "demo_fundus", size=0.1, chunk=16, severities=(1,))
    assert run.complete and run.chunks_written == 1 and run.chunks_skipped == first.chunks_written - 1
    assert run.decodes == 16  # the one unit, decoded once
    after = arrays(path)
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=str(key))


# ------------------------------------------------------------------ locks
def test_a_second_run_on_the_same_pair_refuses_naming_the_holder(tmp_path):
    """The first run is held after its first commit (SIGNAL_AT), so it holds the lock, on every run, when the
    second asks for it."""
    path = tmp_path / "s.zarr"
    marker = tmp_path / "held"
    proc = forkrun.start(["-c", SIGNAL_AT, "1", str(marker), *cli(path)[2:]], env=ENV)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # one stat a poll; the run holds after its commit until it is killed
        assert marker.exists(), f"the first run ended (exit {proc.poll()}) without its first commit"
        with pytest.raises(LockHeld, match=f"pid {proc.pid} on host {socket.gethostname()}"):
            extract(Store(str(path)), "demo-resnet", "demo_derm", size=float(SIZE), chunk=16, severities=(2,))
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with hold_lock(store, "demo_fundus|demo-stats", wait=False, what="x"):
        pass  # creates the lock file
    lock = next((tmp_path / "s.zarr" / ".crs-locks").glob("demo_fundus*demo-stats.lock"))
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"}))
    run = extract(store, "demo-stats", "demo_fundus", size=0.1, chunk=64, severities=(1,))
    assert run.complete and run.lock_taken_over == f"pid {dead.pid} on {socket.gethostname()}"
    assert lock.read_text() == ""  # released on a clean exit


def test_two_encoders_write_into_one_store_at_the_same_time(tmp_path):
    shared = tmp_path / "shared.zarr"
    procs = [forkrun.start(cli(shared, encoder=e, size="0.1"), env=ENV) for e in ("demo-vit", "demo-stats")]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    for e in ("demo-vit", "demo-stats"):  # each alone, in this process (the same extraction as the CLI's)
        alone = tmp_path / f"{e}.zarr"
        assert extract(Store(str(alone)), e, "demo_derm", size=0.1, chunk=16, severities=(2,)).complete
        a, b = arrays(alone), arrays(shared, e)
        assert a.keys() == b.keys() and a
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=str(key))


def test_partial_files_are_removed_only_where_the_extraction_holds_the_locks(tmp_path):
    from crs.extract.run import remove_partial_files

    path = tmp_path / "s.zarr"
    store = Store(str(path))
    extract(store, "demo-stats", "demo_fundus", size=0.05, chunk=64, perturbations=False)
    base = path / "datasets" / "demo_fundus"
    mine = [base / "embeddings/demo-stats/clean/x/c/0/0.5f3a.partial", base / "label/zarr.5f3a.partial",
            base / "failures/image_id/c/0.5f3a.partial", base / "zarr.5f3a.partial"]
    others = [base / "embeddings/demo-vit/clean/x/c/0/0.5f3a.partial",  # another encoder's run may be writing
              base / "predictions/demo-stats/clean/c/0.5f3a.partial", base / "embeddings/zarr.5f3a.partial"]
    for p in mine + others:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half")
    assert sorted(remove_partial_files(store, "demo_fundus", "demo-stats")) == sorted(map(str, mine))
    assert all(p.exists() for p in others) and not any(p.exists() for p in mine)
