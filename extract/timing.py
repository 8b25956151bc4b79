"""Where an extraction's time goes, stage by stage: the optional timing hook of the local pipeline.

``crs.extract.run.extract_many(..., stages=StageTimes(device))`` fills one; ``None`` (the default)
times nothing beyond the forward passes the summary always records. The stages (``STAGES``):

* ``decode`` and ``host_perturb`` run in the DataLoader workers (decoding; JPEG, whose codec stays on
  the CPU): seconds summed over the workers, as each measured them with perf counters;
* ``host_to_device``, ``device_perturb``, ``forward``, ``device_to_host`` run on the device: CUDA
  events recorded around each on the current stream, never waited for in the loop and read once at the
  end (``totals``), so timing adds no synchronisation; perf counters on the CPU, where every op is
  synchronous;
* ``store_write``: the writer thread's seconds in ``write_chunk`` (compress, write, done flag);
* ``main_wait``: the main thread blocked, on the next decoded unit or on a free host buffer (the
  writer behind).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import torch

STAGES = ("decode", "host_perturb", "host_to_device", "device_perturb", "forward", "device_to_host", "store_write",
          "main_wait")


class DeviceClock:
    """Seconds spent on a device in named spans, without waiting for it: CUDA event pairs kept until
    ``seconds`` (call it once the work is done), perf counters elsewhere."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.spans: dict[str, list] = defaultdict(list)  # name -> [(start, end) events] on CUDA
        self.host: dict[str, float] = defaultdict(float)  # name -> seconds, off CUDA

    @contextlib.contextmanager
    def span(self, name: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.spans[name].append((start, end))
        else:
            t = time.perf_counter()
            yield
            self.host[name] += time.perf_counter() - t

    def seconds(self, name: str) -> float:
        """Total seconds of ``name``'s spans (0 for none); reads the events once, waiting for the last."""
        pairs = self.spans.pop(name, [])
        for _, end in pairs[-1:]:
            end.synchronize()
        self.host[name] += sum(s.elapsed_time(e) for s, e in pairs) / 1000
        return self.host.get(name, 0.0)


class StageTimes:
    """The pipeline's stages (module docstring): device spans on a ``DeviceClock``, host seconds added."""

    def __init__(self, device):
        self.clock = DeviceClock(device)
        self.host: dict[str, float] = defaultdict(float)

    def device(self, stage: str):
        return self.clock.span(stage)

    @contextlib.contextmanager
    def waiting(self):
        t = time.perf_counter()
        yield
        self.host["main_wait"] += time.perf_counter() - t

    def add(self, stage: str, seconds: float) -> None:
        self.host[stage] += seconds

    def totals(self) -> dict[str, float]:
        """Seconds per stage; call after the run (the device work is finished)."""
        return {s: self.clock.seconds(s) + self.host.get(s, 0.0) for s in STAGES}

    def per_thousand(self, forward_images: int) -> dict[str, float]:
        """Seconds per stage per 1,000 forward images."""
        k = max(forward_images, 1) / 1000
        return {s: round(v / k, 4) for s, v in self.totals().items()}


class Untimed:
    """The hook when timing is off: every span is the same empty context, nothing is recorded."""

    _none = contextlib.nullcontext()

    def device(self, stage: str):
        return self._none

    def waiting(self):
        return self._none

    def add(self, stage: str, seconds: float) -> None:
        pass


UNTIMED = Untimed()
