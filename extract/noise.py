"""The counter-based generator every random perturbation draws from, on the device of the image.

A draw is a pure function of (key, counter): the key comes from the image and the condition
(``perturb.image_seed``: image id, family and severity), the counter from the position of the
value in its field (channel, row, column; or a stroke's control point). Nothing is carried from
one draw to the next, so an image gets the same values whatever batch, position, process, thread
count or device it lands in, and a batch is drawn as one tensor expression on its own device:
no generator object, no host-side draw, no copy back to the host.

The hash (``GENERATOR`` in ``crs.names.PERTURBATION_GENERATORS``):

    h(i) = lowbias32(k0 + g * i  mod 2**32)

``lowbias32`` is Chris Wellons' 32-bit integer finaliser (hash-prospector: x ^= x >> 16;
x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16), a bijection whose every input bit
flips each output bit with probability 0.5 +- 0.002 (its "bias" 0.17). Its input walks a Weyl
sequence with the key's own odd stride ``g`` and offset ``k0`` (the seed's high and low 32 bits),
so two keys never give shifted copies of one stream unless both words agree. The arithmetic is
int32 with wrap-around (two's complement, as every CPU and CUDA integer unit does it) and logical
shifts written as arithmetic shift plus mask: the integer draws, and the uniforms made from them,
are the same bits on every device. ``tests/extract/test_noise.py`` checks them against a pure
Python reference.

Uniforms: the top 23 bits m of h give u = (2m + 1) / 2**24, exact in float32, in
[2**-24, 1 - 2**-24] and symmetric about 1/2. Normals: z = ndtri(u), the inverse normal CDF (one
uniform a normal, |z| <= 5.4); ndtri, like any transcendental function, may differ in the last
bits between devices. Poisson: ``poisson``'s docstring.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

_A, _B = 0x7FEB352D, 0x846CA68B - (1 << 32)  # lowbias32's multipliers, as int32
_U_BITS = 23  # bits of a uniform: (2m + 1) / 2**24 is exact in float32


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


class Keys(NamedTuple):
    """A batch's keys on its device: ``offset`` (k0) and odd ``stride`` (g), int32 [n, 1]."""

    offset: torch.Tensor
    stride: torch.Tensor


def keys(seeds: list[int], device) -> Keys:
    """The keys of 63-bit seeds (one an image), on ``device``: one small host-to-device copy, queued
    without waiting for the device (pinned, non-blocking on CUDA)."""
    words = torch.tensor([[_int32(s), _int32((s >> 32) << 1 | 1)] for s in seeds], dtype=torch.int32)
    device = torch.device(device)
    if device.type == "cuda":
        words = words.pin_memory()
    words = words.to(device, non_blocking=True)
    return Keys(words[:, :1], words[:, 1:])


def bits(k: Keys, counters: torch.Tensor) -> torch.Tensor:
    """int32 [n, *counters.shape]: h(i) for every key and every counter i (int32, on the keys' device)."""
    n = k.offset.shape[0]
    shape = (n,) + (1,) * counters.dim()
    z = counters.unsqueeze(0) * k.stride.view(shape)
    z += k.offset.view(shape)
    z ^= (z >> 16) & 0xFFFF  # logical shifts: the sign bits the arithmetic shift copies are masked off
    z *= _A
    z ^= (z >> 15) & 0x1FFFF
    z *= _B
    z ^= (z >> 16) & 0xFFFF
    return z


def uniform(k: Keys, counters: torch.Tensor) -> torch.Tensor:
    """float32 [n, *counters.shape] in (0, 1): (2m + 1) / 2**24 with m the top 23 bits of h(i)."""
    z = bits(k, counters)
    z >>= 32 - _U_BITS - 1  # the top 23 bits, one place up: 2m, with the sign copies masked off next
    z &= (1 << (_U_BITS + 1)) - 2
    z |= 1
    return z.to(torch.float32).mul_(2.0 ** -(_U_BITS + 1))


def field(k: Keys, shape: tuple[int, ...], device) -> torch.Tensor:
    """Uniforms [n, *shape]: counter i is the row-major position in ``shape``."""
    size = 1
    for s in shape:
        size *= s
    return uniform(k, torch.arange(size, dtype=torch.int32, device=device).view(shape))


def normal(u: torch.Tensor) -> torch.Tensor:
    """Standard normals from uniforms by inversion: ndtri(u)."""
    return torch.special.ndtri(u)


POISSON_EXACT_BELOW = 10.0  # means under this are drawn by exact inversion; at and above, by the approximation
_POISSON_MAX = 32  # P(X > 32 | mean 10) = 7e-9 < 2**-24, the smallest step of u: the inversion is exact


def poisson(mean: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Poisson(mean) from uniforms ``u`` (same shape), as float32 counts, every value from its own u.

    Below ``POISSON_EXACT_BELOW`` (10): exact inversion, X = #{k <= 32 : F(k) < u} with F the Poisson CDF
    summed term by term (p(k) = p(k - 1) * mean / k); the tail past 32 at mean 10 is 7e-9, under the
    uniforms' resolution. At and above 10: the Cornish-Fisher normal approximation with continuity
    correction, X = floor(mean + s z + (z**2 - 1) / 6 + 1/2), z = ndtri(u), s = sqrt(mean - 5/36): the
    skewness term (z**2 - 1) / 6 is the first Cornish-Fisher correction (skewness 1/sqrt(mean)); s takes the
    variance the skewness term (2/36) and the rounding (1/12) add back out, so the mean and variance are
    those of the Poisson (to 1e-3 relative at mean 10); its distance in total variation from the Poisson
    is 0.003 at mean 10 and falls as 1/sqrt(mean). Both are monotone in u (inversion of a CDF), batched
    and sync-free: a fixed number of tensor operations, whatever the means.
    """
    small = mean.clamp(max=POISSON_EXACT_BELOW)
    p = small.neg().exp_()
    cdf = p.clone()
    exact = (cdf < u).to(u.dtype)
    for k in range(1, _POISSON_MAX + 1):
        p.mul_(small).div_(k)
        cdf += p
        exact += cdf < u
    z = normal(u)
    s = (mean - 5.0 / 36.0).clamp(min=0).sqrt_()
    approx = (mean + s * z + (z * z + 2.0) / 6.0).floor_().clamp_(min=0)  # (z**2 - 1)/6 + 1/2
    return torch.where(mean < POISSON_EXACT_BELOW, exact, approx)
