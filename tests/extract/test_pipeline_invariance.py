"""What the local pipeline writes for an image does not depend on how the run was cut: batch sizes 2 and
5, 0 and 2 DataLoader workers give the same store, bit for bit, also where a batch spans several conditions
(the null encoder: each embedding a function of its own image only, so any change in an image as perturbed
shows). JPEG, which runs in the
workers, gives the images ``perturb.apply`` gives on the main thread; the stage timer fills every stage."""

import numpy as np
import pytest
import torch

from crs.extract import datasets, encoders, perturb, units
from crs.extract.local import forward_calls, forward_together
from crs.extract.run import extract
from crs.extract.timing import STAGES, StageTimes
from crs.foundations.conditions import parse
from crs.store import Store

NULL = encoders.null_like(encoders.get("demo-vit"))
RUN = dict(size=0.05, chunk=8, severities=(2,))


def _store(path, **kw):
    store = Store(str(path))
    run = extract(store, NULL, "demo_derm", **RUN, **kw)
    assert run.complete
    return {(d, e, c): store.read_embedding(d, e, c) for d, e, c, _ in store.embeddings()}


@pytest.mark.slow
def test_batch_size_and_worker_count_change_nothing(tmp_path):
    base = _store(tmp_path / "b2w0.zarr", batch=2, workers=0)
    assert any("jpeg" in c for _, _, c in base) and len(base) > 2
    runs = (("b5w0", dict(batch=5, workers=0)), ("b2w2", dict(batch=2, workers=2)),
            ("b64w0", dict(batch=64, workers=0)))  # 64: a unit's conditions share forward passes
    for name, kw in runs:
        other = _store(tmp_path / f"{name}.zarr", **kw)
        assert other.keys() == base.keys()
        for k in base:
            np.testing.assert_array_equal(other[k], base[k], err_msg=f"{name} {k}")


def test_jpeg_in_the_workers_is_perturb_apply_on_the_main_thread():
    ds = datasets.get("demo_derm", size=0.05)
    ids = [str(i) for i in ds.table().ids[:6]]
    unit = units.Unit(j=0, source_rows=np.arange(6), ids=ids, n_test=4, conds=["clean", "jpeg@1", "jpeg@5"])
    prepared = units.PreparedUnits(units.DecodedUnits(ds, {0: unit.source_rows}, None), {0: unit},
                                   {0: ["jpeg@1", "jpeg@5"]})[0]
    assert all(s >= 0 for s in prepared.seconds)
    host = dict(units.unit_conditions(unit, prepared.images, "cpu", unit.conds, prepared.host))
    main = dict(units.unit_conditions(unit, prepared.images, "cpu", unit.conds))
    for cond in ("jpeg@1", "jpeg@5"):
        (pos, got), = host[cond]
        (want_pos, want), = main[cond]
        assert pos.tolist() == want_pos.tolist() == [0, 1, 2, 3]
        assert torch.equal(got, want)
        assert got.stride() == want.stride()  # the layout reaches the encoder, whose float sums it orders
        c = parse(cond)
        x = prepared.images[:4].permute(0, 3, 1, 2).float().div(255)
        assert torch.equal(got, perturb.apply(x, c.family, c.severity, ids[:4]))


def test_the_stage_timer_fills_every_stage_it_can_on_the_cpu(tmp_path):
    stages = StageTimes("cpu")
    run = extract(Store(str(tmp_path / "s.zarr")), NULL, "demo_derm", **RUN, stages=stages)
    got = stages.per_thousand(run.forward_images)
    assert list(got) == list(STAGES)
    assert all(got[s] > 0 for s in ("decode", "host_perturb", "host_to_device", "device_perturb", "forward",
                                    "store_write")), got
    assert run.forward_seconds == pytest.approx(stages.totals()["forward"])


def test_conditions_of_one_shape_and_layout_go_through_the_encoder_together():
    calls = []

    def embed(x):
        calls.append(len(x))
        return x.flatten(1)[:, :5] * 2

    g = torch.Generator().manual_seed(0)
    xs = [torch.rand(n, 3, 4, 4, generator=g) for n in (2, 3)]
    xs.append(torch.rand(4, 4, 4, 3, generator=g).permute(0, 3, 1, 2))  # channels last: not mixed with the others
    xs.append(torch.rand(1, 3, 6, 6, generator=g))  # another size
    out = forward_together(embed, xs)
    assert sorted(calls) == [1, 4, 5]
    for x, y in zip(xs, out):
        torch.testing.assert_close(y, embed(x), rtol=0, atol=0)


def test_a_resumed_unit_repeats_the_uninterrupted_runs_forward_calls():
    """A CPU kernel's float sums depend on the batch's shape (resnet on oneDNN: 1-ulp differences), so the
    conditions that share a forward call are fixed by the suite, whatever a resumed run has left to do."""
    suite = ["clean", *(f"c{k}@1" for k in range(9))]
    unit = units.Unit(j=0, source_rows=np.arange(12), ids=[str(k) for k in range(12)], n_test=5, conds=suite)
    plan = units.Plan(spec=None, dataset="d", conds=suite, arrays={}, units=[unit], batch=16, summary=None)
    whole = forward_calls(plan, unit)
    assert whole == [suite[:2], suite[2:6], suite[6:]]  # each closed once it reaches 16 images: 12 + 5, 4 x 5, 4 x 5
    for pending in (suite[3:4], suite[4:7], suite[9:], ["clean", "c6@1"]):
        left = units.Unit(**{**unit.__dict__, "conds": pending})
        got = forward_calls(plan, left)
        assert all(call in whole for call in got)  # the same calls as the uninterrupted run's...
        assert sorted(c for call in got for c in call if c in pending) == sorted(pending)  # ...covering what is left
