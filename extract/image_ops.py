"""The tensor operations the perturbation families are built from: grey images, reflect padding,
per-image convolution (direct, or through the FFT for wide kernels), blur kernels, ink strokes and
zoom resampling. Each function imports torch itself, so that reading the perturbation registry
stays free of it."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def grey(x: torch.Tensor) -> torch.Tensor:
    """[n] bool: images whose three channels are equal."""
    return (x.amax(1) - x.amin(1)).flatten(1).amax(1) < 1e-6


def _pad(x: torch.Tensor, pad_h: int, pad_w: int) -> torch.Tensor:
    """Reflect padding (replicate where the image is too small to reflect)."""
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    return F.pad(x, (pad_w, pad_w, pad_h, pad_h), mode="reflect" if max(pad_h, pad_w) < min(h, w) else "replicate")


def _conv_per_image(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Convolve (cross-correlate, as ``conv2d``) each image [n, c, H, W] with its kernel [n, k, k] (odd k, or
    one kernel [1, k, k] for all), padding reflected. Kernels up to ``DIRECT_MAX`` wide run as a grouped
    ``conv2d``; larger ones through the FFT (the same sums, equal up to float rounding: ~1e-6)."""
    import torch
    import torch.nn.functional as F

    n, c, h, w = x.shape
    k = kernels.shape[-1]
    pad = k // 2
    xp = _pad(x, pad, pad)
    kernels = kernels.to(x.dtype).expand(n, k, k)
    if k <= DIRECT_MAX:
        weight = kernels.unsqueeze(1).expand(n, c, k, k).reshape(n * c, 1, k, k)
        out = F.conv2d(xp.reshape(1, n * c, h + 2 * pad, w + 2 * pad), weight, groups=n * c)
        return out.reshape(n, c, h, w)
    hp, wp = h + 2 * pad, w + 2 * pad
    size = (_fft_size(hp), _fft_size(wp))  # zeros beyond the padded image: no circular wrap into the output
    flipped = kernels.flip(-2, -1).unsqueeze(1)  # correlation = convolution with the flipped kernel
    spec = torch.fft.rfft2(xp, s=size) * torch.fft.rfft2(flipped, s=size)
    full = torch.fft.irfft2(spec, s=size)
    return full[..., k - 1 : k - 1 + h, k - 1 : k - 1 + w].contiguous()


DIRECT_MAX = 9  # widest kernel convolved directly; wider ones go through the FFT


def _fft_size(n: int) -> int:
    """The smallest m >= n whose prime factors are 2, 3 and 5 (fast FFT lengths)."""
    m = n
    while True:
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


# Kernels that depend only on the size and the device are built once per process (cached by value).
@functools.lru_cache(maxsize=64)
def disc(radius: float, device) -> torch.Tensor:
    import torch

    r = max(radius, 0.5)
    half = math.ceil(r)
    ax = torch.arange(-half, half + 1, dtype=torch.float32, device=device)
    dist = (ax[:, None] ** 2 + ax[None, :] ** 2).sqrt()
    k = (r + 0.5 - dist).clamp(0, 1)  # anti-aliased disc edge
    return k / k.sum()


@functools.lru_cache(maxsize=64)
def gaussian_kernel(k: int, sigma: float, device) -> torch.Tensor:
    """torchvision's 2-D Gaussian kernel (the outer product of this 1-D one), [1, k, k]."""
    import torch

    lim = (k - 1) / (2.0 * math.sqrt(2.0))
    k1d = torch.softmax(torch.linspace(-lim, lim, k, dtype=torch.float32, device=device).div(sigma).pow(2).neg(),
                        dim=0)
    return torch.outer(k1d, k1d)[None]


def lines(length: float, angles: torch.Tensor) -> torch.Tensor:
    """[n, k, k] streak kernels of ``length`` pixels, one per angle of ``angles`` [n] (radians), on its device."""
    import torch

    half = max(1, math.ceil(length / 2))
    ax = torch.arange(-half, half + 1, dtype=torch.float32, device=angles.device)
    yy, xx = torch.meshgrid(ax, ax, indexing="ij")
    dx, dy = angles.cos().view(-1, 1, 1), angles.sin().view(-1, 1, 1)
    along = xx * dx + yy * dy
    across = (-xx * dy + yy * dx).abs()
    k = (1 - across).clamp(0, 1) * (along.abs() <= length / 2).float()
    return k / k.sum((1, 2), keepdim=True)


def strokes(h: int, w: int, u: torch.Tensor) -> torch.Tensor:
    """[n, H, W] coverage in [0, 1] of curved pen strokes (quadratic Bezier curves), K an image, from the
    uniforms ``u`` [n, 6K]: the control points p0, p1, p2 (in that order) of stroke 1..K, (x, y) each."""
    import torch

    n, side = u.shape[0], min(h, w)
    width = 0.015 * max(h, w) / side  # in the unit square
    t = torch.linspace(0, 1, 24, device=u.device)[None, None, :, None]  # [1, 1, 24, 1]
    p0, p1, p2 = u.view(n, 3, -1, 1, 2).unbind(1)  # each [n, K, 1, 2]
    p2 = p0 + (p2 - 0.5) * 0.6  # strokes a third of the image long on average
    p1 = (p0 + p2) / 2 + (p1 - 0.5) * 0.3  # some curvature
    pts = ((1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2).reshape(n, -1, 2)  # [n, K * 24, 2]
    ys, xs = torch.linspace(0, 1, h, device=u.device), torch.linspace(0, 1, w, device=u.device)
    # coverage falls with the distance to the nearest stroke point, and is 0 from ``reach`` on: so each point
    # is drawn only into the pixels of its own window, and the coverage is the max over points (the same
    # value as from the nearest point's distance, as coverage is monotone in the squared distance)
    reach = width + 0.5 / side
    py, px = pts[..., 1], pts[..., 0]  # [n, P]
    iy = _window(py, reach, h)  # [n, P, wy] pixel rows near each point
    ix = _window(px, reach, w)  # [n, P, wx]
    d2 = (ys[iy][..., :, None] - py[..., None, None]) ** 2 + (xs[ix][..., None, :] - px[..., None, None]) ** 2
    cover = ((width - d2.sqrt()) * side + 0.5).clamp(0, 1)  # [n, P, wy, wx]
    flat = (iy[..., :, None] * w + ix[..., None, :]).reshape(n, -1)
    out = torch.zeros(n, h * w, device=u.device).scatter_reduce(1, flat, cover.reshape(n, -1), reduce="amax")
    return out.view(n, h, w)


def _window(p: torch.Tensor, reach: float, n: int) -> torch.Tensor:
    """[..., m] indices of the grid ``linspace(0, 1, n)`` within ``reach`` of each of the points ``p`` (with a
    pixel of margin each side; clipped to the grid, where a repeated index is harmless)."""
    import torch

    step = max(n - 1, 1)
    m = math.ceil(2 * reach * step) + 3
    lo = ((p - reach) * step).floor().long() - 1
    return (lo[..., None] + torch.arange(m, device=p.device)).clamp(0, n - 1)


def conv_blur(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    return _conv_per_image(x, kernels).clamp(0, 1)


@functools.lru_cache(maxsize=16)
def zooms(max_zoom: float) -> tuple[float, ...]:
    """The 5 zoom factors, float32 steps from 1 to ``max_zoom`` (the factors every stored zoom_blur array
    was made with)."""
    import torch

    return tuple(torch.linspace(1, max_zoom, 6)[1:].tolist())


def zoom_rows_cols(x: torch.Tensor, size: tuple[int, int], upto: tuple[int, int]) -> torch.Tensor:
    """The first ``upto`` rows and columns of ``F.interpolate(x, size, mode="bilinear")``, computed alone.

    The resample kernel maps output pixel j to source (j + 0.5) * in / out - 0.5; given its scales it
    takes any output size, so the rows and columns below/right of the crop (up to a sixth of the work
    at 1.2x) are never computed. The scale passed is the one the kernel would derive itself
    (float32(in) / float32(out)), so every sample lands where the full resample puts it."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    if upto[0] == h or upto[1] == w:  # the kernel skips a side whose output length is the input's, whatever
        # its scale: resample that (small) image in full
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=False)

    def inverse(n: int, out: int) -> float:  # a double whose reciprocal, as float32, is float32(n)/float32(out)
        return 1.0 / float(np.float32(n) / np.float32(out))

    return torch.ops.aten.upsample_bilinear2d(x, list(upto), False, inverse(h, size[0]), inverse(w, size[1]))


@functools.lru_cache(maxsize=8)
def ink(device, dtype) -> torch.Tensor:
    """[1, 3, 1, 1] the colour of a surgical marker, filled in on the device (no copy from the host)."""
    import torch

    colour = torch.empty(1, 3, 1, 1, dtype=dtype, device=device)
    for channel, value in enumerate((0.22, 0.12, 0.42)):
        colour[:, channel].fill_(value)
    return colour
