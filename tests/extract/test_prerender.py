"""Synthetic images rendered ahead by a helper process: the same pixels as rendering them here, for any
rows; and whatever goes wrong with the helper, or whoever asks, the images are still the right ones."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest
from datasets_fakes import make_aptos

from crs.extract.synthetic import dataset as synth
from crs.extract.synthetic import prerender

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the helper is forked on Linux only")

NAMES = ("demo_derm", "demo_fundus", "demo_cxr", "demo_cxr_site2")


@pytest.fixture
def small():
    prerender.finish()
    yield [synth.get(n, size=0.05) for n in NAMES]
    prerender.finish()


def _wait_whole(ds, timeout=60.0) -> np.ndarray:
    deadline = time.monotonic() + timeout
    while (got := prerender.take(ds, np.arange(3))) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got is not None, f"{ds.name} was never whole"
    return got


def test_rows_rendered_ahead_are_the_rows_rendered_here(small, monkeypatch):
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: True)
    assert prerender.start(small)
    rng = np.random.default_rng(0)
    for ds in small:
        _wait_whole(ds)
        n = len(ds.table().ids)
        for rows in (np.arange(n), rng.permutation(n)[:17], np.array([n - 1, 0, n - 1]), np.array([], int)):
            ahead = prerender.take(ds, rows)
            assert ahead is not None
            np.testing.assert_array_equal(ahead, ds.render_rows(rows))
            np.testing.assert_array_equal(ds.images(rows), ds.render_rows(rows))
    other = synth.get("demo_derm", size=0.05, seed=1)  # not rendered ahead: drawn here
    assert prerender.take(other, np.arange(3)) is None


def test_another_process_renders_for_itself(small, monkeypatch):
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: True)
    assert prerender.start(small)
    _wait_whole(small[0])
    mine = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: mine + 1)  # a data loader's worker, forked later
    assert prerender.take(small[0], np.arange(3)) is None


def test_a_failed_helper_leaves_the_images_to_this_process(small, monkeypatch):
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: True)
    here, draw = os.getpid(), synth.SyntheticDataset.render_rows

    def fails_in_the_helper(self, rows):
        if os.getpid() != here:
            raise MemoryError("the helper cannot")
        return draw(self, rows)

    monkeypatch.setattr(synth.SyntheticDataset, "render_rows", fails_in_the_helper)
    assert prerender.start(small)
    helper = prerender._ahead.helper
    os.waitpid(helper.pid, 0)  # it has failed and ended
    helper._reaped = True
    for ds in small:
        assert prerender.take(ds, np.arange(3)) is None
        np.testing.assert_array_equal(ds.images(np.arange(5)), draw(ds, np.arange(5)))


def test_finish_kills_a_helper_still_rendering(small, monkeypatch):
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: True)
    here = os.getpid()

    def sticks_in_the_helper(self, rows):
        time.sleep(3600 if os.getpid() != here else 0)

    monkeypatch.setattr(synth.SyntheticDataset, "render_rows", sticks_in_the_helper)
    assert prerender.start(small)
    pid = prerender._ahead.helper.pid
    prerender.finish()
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert prerender.take(small[0], np.arange(3)) is None


def test_nothing_is_started_where_it_cannot_pay(small, monkeypatch):
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: False)
    assert not prerender.start(small)
    monkeypatch.setattr(prerender.forked, "available", lambda minimum=2: True)
    monkeypatch.setattr(prerender, "MAX_BYTES", 1000)
    assert not prerender.start(small)
    assert not prerender.start([object()])  # no synthetic dataset among them


def test_the_extract_stage_renders_ahead_only_for_a_new_local_store_of_built_in_datasets(tmp_path, monkeypatch):
    from crs.foundations import config as C
    from crs.stages import extract as stage

    started = []
    monkeypatch.setattr(prerender, "start", lambda datasets: started.append([d.name for d in datasets]))
    monkeypatch.setattr(stage, "_run", lambda *args: None)  # the stage's rule only, no extraction

    def ahead(toml: str) -> list:
        started.clear()
        stage.run(C.parse(f'store = "{tmp_path / "s.zarr"}"\n' + toml))
        return started

    demo = '[datasets]\nnames = ["demo_derm", "demo_cxr"]\n'
    assert ahead(demo) == [["demo_derm", "demo_cxr", "demo_cxr_site2"]]  # the shift target with them
    assert ahead(demo + "[extract]\nworkers = 1\n") == []  # loaders' workers render for themselves
    assert ahead(demo + '[extract]\nexecutor = "ray"\n') == []
    root = make_aptos(tmp_path / "aptos", n=20)
    assert ahead(f'[datasets]\nnames = ["aptos2019"]\nroots = {{ aptos2019 = "{root}" }}\n') == []  # read, not drawn
    (tmp_path / "s.zarr").mkdir()
    (tmp_path / "s.zarr" / "zarr.json").write_text("{}")  # a store that exists: a re-run may need none
    assert ahead(demo) == []
