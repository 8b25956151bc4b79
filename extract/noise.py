"""The counter-based generator every random perturbation draws from, on the device of the image.

A draw is a pure function of (key, counter): the key comes from the image and the condition
(``perturb.image_seed``: image id, family and severity), the counter from the position of the
value in its field (channel, row, column; or a stroke's control point). Nothing is carried from
one draw to the next, so an image gets the same values whatever batch, position, process, thread
count or device it lands in, and a batch is drawn as one tensor expression on its own device:
no generator object, no host-side draw, no copy back to the host.

The hash (``GENERATOR`` in ``crs.foundations.names.PERTURBATION_GENERATORS``):

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
    t = torch.empty_like(z)  # one scratch tensor for the shifts (a CPU allocation this size costs a pass)
    for shift, multiplier in ((16, _A), (15, _B), (16, None)):
        torch.bitwise_right_shift(z, shift, out=t)
        t &= (1 << (32 - shift)) - 1  # logical shift: the sign bits the arithmetic shift copies are masked off
        z ^= t
        if multiplier is not None:
            z *= multiplier
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


POISSON_EXACT_COUNTS = 6  # counts 0..5 are drawn by exact inversion of the CDF; 6 and more by the approximation


def poisson(mean: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Poisson(mean) from uniforms ``u`` (same shape), as float32 counts, every value from its own u.

    Where u <= F(5), F the Poisson CDF summed term by term (mean**k e**-mean / k!): exact inversion,
    X = #{k <= 5 : F(k) < u}. Beyond (the upper tail of small means; nearly all of a mean over 15): the
    Cornish-Fisher normal approximation with continuity correction, X = max(6, floor(mean + s z +
    (z**2 - 1) / 6 + 1/2)), z = ndtri(u), s = sqrt(mean - 5/36). (z**2 - 1) / 6 is the first Cornish-Fisher
    term (skewness 1/sqrt(mean)); s takes out the variance it (2/36) and the rounding (1/12) add back. Its
    distance in total variation from the Poisson is at most 0.0022 over means 0.5 to 15 (0 below 1, 0.002 at
    8 to 10) and falls as 1/sqrt(mean) above; mean and variance within 0.2 %. Monotone in u (X is a quantile
    function), batched and sync-free: 6 exact terms whatever the means, where a full inversion at 150
    photons would need hundreds.
    """
    q = mean.neg().exp()  # mean**k e**-mean, k = 0, 1, ... (0 for a large mean: that CDF term is nil too)
    cdf = q.clone()
    flag = torch.lt(cdf, u)
    exact = flag.to(u.dtype)
    factorial = 1.0
    for k in range(1, POISSON_EXACT_COUNTS):
        factorial *= k
        q.mul_(mean)
        cdf.add_(q, alpha=1.0 / factorial)
        torch.lt(cdf, u, out=flag)
        exact += flag
    z = normal(u)
    s = (mean - 5.0 / 36.0).clamp_(min=0).sqrt_()
    approx = z.square().add_(2.0).div_(6.0).add_(s.mul_(z)).add_(mean).floor_()  # mean + s z + (z**2 - 1)/6 + 1/2
    return torch.where(exact < POISSON_EXACT_COUNTS, exact, approx.clamp_(min=POISSON_EXACT_COUNTS))
