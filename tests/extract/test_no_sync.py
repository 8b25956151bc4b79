"""The local extraction loop never waits for the device: over every modality suite, through the real
pipeline (``extract`` -> ``local.run_units_locally``), each batch (an encoder's chunk of one condition) moves
data from the device to the host exactly once -- the asynchronous copy of its embeddings into a host
buffer (``HostBuffers.stage``) -- and reads no scalar and computes no data-dependent shape on the device.

On the CPU every tensor is a host tensor, so "on the device" is tracked: what ``units.to_device``
returns is marked, and so is every output of an op with a marked input (a TorchDispatchMode). A sync is
then a scalar read of a marked tensor (``_local_scalar_dense``: ``.item()``, ``.tolist()``, ``bool()``), a
data-dependent shape computed from one (``nonzero``, ``masked_select``, boolean indexing, ``unique``),
or a copy of one into an unmarked tensor, ``.cpu()``, ``.numpy()`` or ``.tolist()`` of one.

Bound, per batch: 1 device-to-host copy, 0 scalar reads, 0 data-dependent shapes. Ops inside
``perturb.apply`` are counted too (``COUNT_INSIDE_PERTURB``): its noise comes from the counter-based
generator on the device (``crs.extract.noise``), and the families whose codec runs on the host (JPEG)
are applied by the DataLoader workers, not in this loop.
"""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from crs.extract import perturb, units
from crs.extract.run import extract
from crs.store import Store

COUNT_INSIDE_PERTURB = True

aten = torch.ops.aten
SCALAR = {aten._local_scalar_dense.default}
DATA_DEPENDENT = {aten.nonzero.default, aten.masked_select.default, aten.unique_dim.default,
                  aten._unique2.default, aten.unique_consecutive.default, aten.nonzero_static.default}
COPIES = {aten.copy_.default}


def _tensors(tree):
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


class SyncCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.on_device = weakref.WeakValueDictionary()  # id -> tensor (a WeakSet would compare tensors)
        self.counts = {"device_to_host": 0, "scalar": 0, "data_dependent": 0}
        self.ops: list[str] = []
        self.paused = 0

    def mark(self, t):
        self.on_device[id(t)] = t
        return t

    def marked(self, t) -> bool:
        return isinstance(t, torch.Tensor) and self.on_device.get(id(t)) is t

    def count(self, kind: str, what: str) -> None:
        if not self.paused:
            self.counts[kind] += 1
            self.ops.append(f"{kind}: {what}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        device_in = any(self.marked(t) for t in inputs)
        bool_index = func is aten.index.Tensor and any(t.dtype == torch.bool for t in _tensors(args[1:]))
        if device_in and func in SCALAR:
            self.count("scalar", str(func))
        elif device_in and (func in DATA_DEPENDENT or bool_index):
            self.count("data_dependent", str(func))
        elif func in COPIES and self.marked(args[1]) and not self.marked(args[0]):
            self.count("device_to_host", str(func))
        out = func(*args, **kwargs)
        if device_in and not (func in COPIES and not self.marked(args[0])):
            for t in _tensors(out):
                self.mark(t)
        return out


@pytest.fixture
def counter(monkeypatch):
    mode = SyncCounter()
    to_device, apply, stage = units.to_device, perturb.apply, units.HostBuffers.stage
    batches = []
    monkeypatch.setattr(units, "to_device", lambda *a, **k: mode.mark(to_device(*a, **k)))

    def counted_apply(*args, **kwargs):
        mode.paused += not COUNT_INSIDE_PERTURB
        try:
            return apply(*args, **kwargs)
        finally:
            mode.paused -= not COUNT_INSIDE_PERTURB

    def counted_stage(self, parts, timer=units.UNTIMED):
        batches.append(len(parts))
        return stage(self, parts, timer)

    monkeypatch.setattr(perturb, "apply", counted_apply)
    monkeypatch.setattr(units.HostBuffers, "stage", counted_stage)
    for name in ("cpu", "numpy", "tolist", "item"):  # these read a host tensor without dispatching an op
        method = getattr(torch.Tensor, name)

        def read(self, *a, _method=method, _name=name, **k):
            if mode.marked(self):
                mode.count("scalar" if _name == "item" else "device_to_host", f"Tensor.{_name}")
            return _method(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, read)
    mode.batches = batches
    return mode


@pytest.mark.parametrize("dataset", ["demo_derm", "demo_fundus", "demo_cxr"])
def test_each_batch_crosses_to_the_host_once_and_reads_nothing_back(tmp_path, counter, dataset):
    with counter:
        run = extract(Store(str(tmp_path / "s.zarr")), "demo-stats", dataset, size=0.05, chunk=16, batch=8,
                      severities=(3,))
    assert run.complete and run.conditions > 1 and run.chunks_written == len(counter.batches) > 1
    assert counter.counts == {"device_to_host": len(counter.batches), "scalar": 0, "data_dependent": 0}, counter.ops


def test_the_counter_sees_the_syncs_it_forbids():
    """The counter itself: a scalar read, a mask gather and a .cpu() of a marked tensor are each counted."""
    mode = SyncCounter()
    with mode:
        x = mode.mark(torch.rand(4, 3))
        y = x * 2
        bool(y.sum() > 0)
        y[y > 0.5]
        torch.empty(4, 3).copy_(y)
        torch.empty(4, 3).copy_(torch.rand(4, 3))  # host to host: not counted
    assert mode.counts == {"device_to_host": 1, "scalar": 1, "data_dependent": 1}
