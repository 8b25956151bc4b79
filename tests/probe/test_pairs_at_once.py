"""Small pairs probed side by side (``crs.stages.probe.run``): the same bits as one at a time,
summaries in order, and an error that stops what has not started."""

import threading
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from crs.extract.run import extract
from crs.foundations.config import Probe
from crs.stages import probe as stage
from crs.store import Store


def test_in_order_keeps_the_order_when_a_later_item_finishes_first():
    """Item 0 waits until every later item has finished, so it finishes last on every run."""
    started, finished, rest_done = [], [], threading.Event()

    def fn(x):
        started.append(x)
        if x == 0:
            assert rest_done.wait(60), "items 1 to 3 did not run beside item 0"
        finished.append(x)
        if len(finished) == 3 and x != 0:
            rest_done.set()
        return x * 10

    assert list(stage._in_order(fn, [0, 1, 2, 3], 2)) == [0, 10, 20, 30]
    assert sorted(started) == [0, 1, 2, 3] and finished[-1] == 0


def test_in_order_stops_what_has_not_started_and_lets_the_running_item_finish(monkeypatch):
    """Item 1 fails while item 0 runs: 0's result comes first, then the error; 0 ran to its end, and
    none of the items queued after them started (the freed worker skips them). Item 0 finishes only
    once ``_in_order`` has taken note of the failure (its stop event is set), on every run."""
    finished, started, stopped = [], [], threading.Event()

    class Stop(threading.Event):  # _in_order's stop event, seen by the test when it is set
        def set(self):
            super().set()
            stopped.set()

    monkeypatch.setattr(stage, "threading", SimpleNamespace(Event=Stop))

    def fn(x):
        started.append(x)
        if x == 1:
            raise ValueError("pair 1 is broken")
        if x == 0:
            assert stopped.wait(60), "item 1's failure did not stop _in_order"
        finished.append(x)
        return x

    got = []
    with pytest.raises(ValueError, match="pair 1 is broken"):
        for r in stage._in_order(fn, list(range(8)), 2):
            got.append(r)
    assert got == [0] and 0 in finished
    assert sorted(started) == [0, 1]


def test_in_order_one_worker_is_plain_map():
    assert list(stage._in_order(lambda x: -x, [1, 2], 1)) == [-1, -2]


@pytest.fixture(scope="module")
def two_pair_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "s.zarr"
    store = Store(str(path))
    for d in ("demo_derm", "demo_fundus"):  # one severity: perturbed sets to evaluate, at little cost
        extract(store, "demo-stats", d, size=0.3, chunk=64, severities=(2,))
    return str(path)


def _records(results):
    files = sorted((results / "run_records").glob("*.parquet"))
    return pl.concat([pl.read_parquet(f).drop("seconds", strict=False) for f in files])


def test_pairs_side_by_side_give_the_bits_of_one_at_a_time(two_pair_store, tmp_path, monkeypatch):
    from crs.probe.run import small_pair

    settings = Probe(seeds=2, fractions=(0.25, 1.0), l2=(1e-2, 1.0))
    pairs = [("demo-stats", "demo_derm"), ("demo-stats", "demo_fundus")]
    store = Store(two_pair_store, mode="r")
    assert all(small_pair(store, e, d) for e, d in pairs)  # so the side-by-side path is the one taken
    used = []
    real = stage._in_order
    monkeypatch.setattr(stage, "_in_order", lambda fn, items, n: used.append(n) or real(fn, items, n))
    out = {}
    for workers in (1, 2):
        monkeypatch.setattr(stage, "PAIR_WORKERS", workers)
        results = tmp_path / f"w{workers}"
        done = []
        summaries = stage.run(two_pair_store, results, pairs, settings, on_done=done.append)
        assert [(s.encoder, s.dataset) for s in summaries] == pairs == [(s.encoder, s.dataset) for s in done]
        held = Store(two_pair_store, mode="r")
        out[workers] = (_records(results), [held.read_predictions(d, e, "clean")[0] for e, d in pairs])
    assert used == [1, 2]
    assert out[1][0].equals(out[2][0])
    for a, b in zip(out[1][1], out[2][1]):
        np.testing.assert_array_equal(a, b)


def test_pairs_run_with_one_blas_thread_set_before_any_starts(two_pair_store, tmp_path, monkeypatch):
    """threadpool_limits is process-wide: the inner limits of two pairs side by side put back each
    other's BLAS threads mid-product (a pair's bits then varied from run to run) unless the stage
    holds one thread for its whole length."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import crs.probe.run as run

    seen, both_inside = [], threading.Barrier(2, timeout=60)

    def fake_probe(store, enc, d, **kw):
        with threadpool_limits(1):  # as crs.probe.core's host products do
            both_inside.wait()  # the two pairs' limits overlap on every run, then the first one exits
        seen.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
        return type("S", (), {"encoder": enc, "dataset": d})()

    monkeypatch.setattr(run, "probe", fake_probe)
    monkeypatch.setattr(stage, "PAIR_WORKERS", 2)
    pairs = [("demo-stats", "demo_derm"), ("demo-stats", "demo_fundus")]
    with threadpool_limits(2):  # as on a machine of two cores or more
        stage.run(two_pair_store, tmp_path, pairs, Probe(seeds=1, fractions=(1.0,), l2=(1.0,)))
        after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert len(seen) == 2 and all(n == [1] * len(n) for n in seen), seen
    assert after and all(n == 2 for n in after)  # and put back once the stage is over


def test_a_pair_named_twice_is_probed_once(two_pair_store, tmp_path, monkeypatch):
    """Side by side, the second copy of a pair would meet the first one's lock and fail the stage."""
    import crs.probe.run as run

    calls = []
    monkeypatch.setattr(run, "probe", lambda store, enc, d, **kw: calls.append((enc, d)) or
                        type("S", (), {"encoder": enc, "dataset": d})())
    pairs = [("demo-stats", "demo_derm"), ("demo-stats", "demo_fundus"), ("demo-stats", "demo_derm")]
    got = stage.run(two_pair_store, tmp_path, pairs, Probe(seeds=1, fractions=(1.0,), l2=(1.0,)))
    assert sorted(calls) == sorted(set(pairs)) and [(s.encoder, s.dataset) for s in got] == pairs[:2]


def test_set_metrics_in_bounded_batches_equals_one_batch(monkeypatch):
    import crs.probe.run as run
    from crs.probe import metrics

    rng = np.random.default_rng(0)
    n, K = 50, 3
    T = np.eye(K, dtype=np.float32)[rng.integers(0, K, n)]
    known, counted = np.ones_like(T), rng.random(n) > 0.1
    evals = [run.EvalSet(f"c{i}", None, T, known, counted) for i in range(5)]
    probs = [rng.dirichlet(np.ones(K), size=(2, 3, n)).astype(np.float32) for _ in evals]
    whole = run.set_metrics(evals, probs, "multiclass")
    monkeypatch.setattr("crs.probe.evaluate.STACK_BYTES", probs[0].nbytes * 2)  # batches of two sets
    for a, b, p in zip(run.set_metrics(evals, probs, "multiclass"), whole, probs):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, metrics.all_metrics(p, T, known, "multiclass", counted), rtol=0, atol=0)
