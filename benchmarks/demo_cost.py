"""What `crs demo`'s extract stage costs, side by side for two settings, measured in one run.

Extract's time is nearly all forward passes (a profile of the demo: rendering, perturbing and writing
are a few per cent), so its CPU cost is (forward passes per encoder) x (CPU seconds per image of each
demo encoder). This counts the passes of the demo's datasets at each setting (clean rows, plus the
test rows under every family of the modality's suite at each severity; a shift target clean only) and
times each demo encoder's forward pass on one thread (CPU time, which a busy machine disturbs less than
wall time), for the registry's record and for the same record with other timm ``kwargs``. Usage:

    python benchmarks/demo_cost.py [--before-severities 2,4] [--after-severities 3]
        [--before-kwargs 'demo-vit={"img_size": 64}'] [--repeats 5]

The last line is one JSON object: passes, ms per image and the estimated CPU seconds of each side,
and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time


def passes(severities: tuple[int, ...], size: float) -> int:
    """Forward passes per encoder over the demo's datasets and shift target."""
    from crs.extract import perturb
    from crs.extract.synthetic import dataset as synthetic
    from crs.foundations import config as cfgmod

    demo = cfgmod.parse(cfgmod.EXAMPLE)
    names = list(demo.datasets.names)
    total = 0
    for name in names:
        ds = synthetic.get(name, size=size)
        table = ds.table()
        n_test = int((table.split == 2).sum())
        total += len(table.ids) + n_test * len(perturb.conditions(ds.modality, severities))
        if ds.shift_target:
            target = synthetic.get(ds.shift_target, size=size).table()
            total += int((target.split == 2).sum())
    return total


def ms_per_image(spec, repeats: int) -> float:
    import torch

    from crs.extract.models import load, pick_device

    torch.set_num_threads(1)
    enc = load(spec, pick_device("cpu"))
    x = torch.rand(64, 3, spec.input_size, spec.input_size)
    enc(x)  # warm-up
    t = time.process_time()
    for _ in range(repeats):
        enc(x)
    return (time.process_time() - t) / (repeats * len(x)) * 1000


def side(severities, size, kwargs: dict, repeats: int) -> dict:
    from crs.extract import encoders

    ms = {}
    for name in encoders.demo_names():
        spec = encoders.get(name)
        if name in kwargs:
            spec = dataclasses.replace(spec, kwargs=kwargs[name])
        ms[name] = round(ms_per_image(spec, repeats), 3)
    n = passes(severities, size)
    return {"severities": list(severities), "size": size, "kwargs": kwargs, "passes_per_encoder": n,
            "ms_per_image": ms, "cpu_s_one_thread": round(n * sum(ms.values()) / 1000, 1)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sev = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    kw = lambda s: {k: json.loads(v) for k, v in (item.split("=", 1) for item in s.split(";") if item)}  # noqa: E731
    p.add_argument("--before-severities", type=sev, default=(2, 4))
    p.add_argument("--before-size", type=float, default=1.0)
    p.add_argument("--before-kwargs", type=kw, default={"demo-vit": {"img_size": 64}})
    p.add_argument("--after-severities", type=sev, default=(3,))
    p.add_argument("--after-size", type=float, default=1.0)
    p.add_argument("--after-kwargs", type=kw, default={})
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    before = side(a.before_severities, a.before_size, a.before_kwargs, a.repeats)
    after = side(a.after_severities, a.after_size, a.after_kwargs, a.repeats)
    out = {"before": before, "after": after, "ratio": round(after["cpu_s_one_thread"] / before["cpu_s_one_thread"], 3)}
    for k in ("before", "after"):
        print(k, out[k])
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
