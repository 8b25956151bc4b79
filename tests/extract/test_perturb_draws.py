"""Where and how the perturbations draw: an image's perturbation depends only on (image id, family, severity,
pixels), whatever its batch, position and thread count; ``apply`` makes no synchronising call and runs on the
input's device; the noise families keep their stated statistics."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from crs.extract import perturb

FAMILIES = list(perturb.FAMILIES)
SUITE_FAMILIES = sorted({(m, f) for m, fams in perturb.SUITES.items() for f in fams})
# zoom blur's bilinear resample (torch's upsample kernel) rounds a few pixels 1 ulp apart between thread counts
THREAD_ULPS = {"zoom_blur": 2.4e-7}


def _images(n=8, size=40):
    g = torch.Generator().manual_seed(3)
    x = torch.nn.functional.avg_pool2d(torch.rand(n, 3, size + 4, size + 4, generator=g), 5, stride=1)
    x[1] = x[1, :1]  # a grey image among colour ones
    return x.contiguous()


@pytest.mark.parametrize("family", FAMILIES)
def test_an_image_is_perturbed_alike_in_any_batch_and_with_any_thread_count(family):
    x, ids = _images(), [f"img{i}" for i in range(8)]
    y = perturb.apply(x, family, 4, ids)
    for size in (1, 3):
        parts = [perturb.apply(x[i : i + size], family, 4, ids[i : i + size]) for i in range(0, 8, size)]
        assert torch.equal(torch.cat(parts), y), size
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    assert torch.equal(perturb.apply(x[order], family, 4, [ids[i] for i in order]), y[order])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        other = perturb.apply(x, family, 4, ids)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(other, y, atol=THREAD_ULPS.get(family, 0), rtol=0)


# aten ops that read a device value on the host or give a shape that depends on values (each waits for the device)
SYNCING = {"_local_scalar_dense", "item", "nonzero", "nonzero_static", "masked_select", "masked_scatter", "unique",
           "_unique", "_unique2", "unique_dim", "unique_consecutive", "equal", "is_nonzero", "allclose",
           "_assert_async", "bincount", "histc"}


class SyncCounter(TorchDispatchMode):
    """Counts the synchronising aten ops, and the copies between devices (a host-to-device copy that does
    not wait, ``non_blocking``, is counted apart: it does not stop the host)."""

    def __init__(self):
        super().__init__()
        self.syncs, self.async_uploads = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNCING or (name == "index" and any(t is not None and t.dtype == torch.bool for t in args[1])):
            self.syncs.append(name)
        out = func(*args, **kwargs)
        if name in ("_to_copy", "copy_", "copy"):
            src, dst = (args[0], out) if name == "_to_copy" else (args[1], args[0])
            if src.device != dst.device:
                upload = src.device.type == "cpu" and (kwargs.get("non_blocking") or (len(args) > 2 and args[2]))
                if upload:
                    self.async_uploads += 1
                else:
                    self.syncs.append(f"{name} {src.device}->{dst.device}")
        return out


def test_apply_makes_no_synchronising_call_in_any_suite():
    """Bound: zero synchronising ops per ``apply`` call, every family of every suite (severity 3), on the CPU."""
    x, ids = _images(3, 24), ["a", "b", "c"]
    for modality, family in SUITE_FAMILIES:
        with SyncCounter() as counter:
            perturb.apply(x, family, 3, ids)
        assert counter.syncs == [], (modality, family, counter.syncs)


def test_apply_runs_on_the_input_device():
    """On the meta device (shapes, no values) any host read of a value, data-dependent shape or host-made
    operand fails: every family but JPEG (a CPU codec by design) runs there. Bound: zero synchronising ops
    and at most one host-to-device copy per call, non-blocking (the batch's keys)."""
    x, ids = _images(3, 24).to("meta"), ["a", "b", "c"]
    for family in FAMILIES:
        if family == "jpeg":
            continue
        with SyncCounter() as counter:
            y = perturb.apply(x, family, 3, ids)
        assert y.device.type == "meta" and y.shape == x.shape, family
        assert counter.syncs == [] and counter.async_uploads <= 1, (family, counter.syncs, counter.async_uploads)


def test_noise_families_keep_their_statistics():
    """Mid-grey images (no clipping at 0.5 for the noise std of severities 1-3) against each family's table row."""
    n, size = 4, 64
    x = torch.full((n, 3, size, size), 0.5)
    ids = [f"s{i}" for i in range(n)]
    for sev in (1, 3):
        sigma = perturb.parameters("gaussian_noise", sev)["sigma"]
        d = perturb.apply(x, "gaussian_noise", sev, ids) - x
        assert abs(float(d.mean())) < 0.01 and abs(float(d.std()) / sigma - 1) < 0.02, sev
        sigma = perturb.parameters("speckle_noise", sev)["sigma"]
        d = perturb.apply(x, "speckle_noise", sev, ids) - x
        assert abs(float(d.std()) / (0.5 * sigma) - 1) < 0.02, sev
    for sev in (1, 5):
        amount = perturb.parameters("impulse_noise", sev)["amount"]
        y = perturb.apply(x, "impulse_noise", sev, ids)
        zeros, ones = float((y == 0).float().mean()), float((y == 1).float().mean())
        se = math.sqrt(amount / 2 / y.numel())
        assert abs(zeros - amount / 2) < 5 * se and abs(ones - amount / 2) < 5 * se, sev
    for sev in (1, 3, 5):  # min(Poisson(0.5 p) / p, 1): means 75 .. 4.5 photons, both of noise.poisson's branches
        photons = perturb.parameters("shot_noise", sev)["photons"]
        mean, var = _clipped_poisson_moments(0.5 * photons, photons)
        y = perturb.apply(x, "shot_noise", sev, ids)
        assert abs(float(y.mean()) - mean) < 5 * math.sqrt(var / y.numel()), sev
        assert abs(float(y.var()) / var - 1) < 0.04, sev


def _clipped_poisson_moments(lam: float, photons: float) -> tuple[float, float]:
    """Mean and variance of min(X / photons, 1), X ~ Poisson(lam), from the probability mass function."""
    p, m1, m2 = math.exp(-lam), 0.0, 0.0
    for k in range(int(lam + 20 * math.sqrt(lam) + 20)):
        v = min(k / photons, 1.0)
        m1, m2 = m1 + p * v, m2 + p * v * v
        p *= lam / (k + 1)
    return m1, m2 - m1 * m1


def test_random_families_draw_per_image_not_per_position():
    """Two images with the same pixels get different draws; the same id gets the same draw at any position."""
    x = torch.full((2, 3, 16, 16), 0.5)
    for family in ("gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "ink_marks"):
        y = perturb.apply(x, family, 5, ["p", "q"])
        assert not torch.equal(y[0], y[1]), family
        assert torch.equal(perturb.apply(x, family, 5, ["q", "p"]), y.flip(0)), family


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_draws_equal_the_cpu_draws():
    from crs.extract import noise

    seeds = [perturb.image_seed(f"img{i}", "gaussian_noise@3") for i in range(4)]
    counters = torch.arange(3 * 97 * 101, dtype=torch.int32)
    cpu = noise.uniform(noise.keys(seeds, "cpu"), counters)
    gpu = noise.uniform(noise.keys(seeds, "cuda"), counters.cuda()).cpu()
    assert torch.equal(gpu, cpu)  # integers and uniforms: bit for bit on every device
