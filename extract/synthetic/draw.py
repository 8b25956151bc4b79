"""Drawing helpers shared by the renderers. Images are float32 [C, H, W] while drawn; coordinates run
over [-1, 1] at pixel centres, x right, y down."""

from __future__ import annotations

import functools

import numpy as np

DTYPE = np.float32  # every image is drawn in float32: float64 exp/cos are several times slower
_ONE_THREAD_MNK = 64**3  # OpenBLAS runs a matrix product of more multiply-adds on several threads


def choice(rng: np.random.Generator, cdf: np.ndarray) -> int:
    """An index drawn with probabilities given by their cumulative sums `cdf`."""
    return min(int(np.searchsorted(cdf, rng.random(), side="right")), len(cdf) - 1)


@functools.lru_cache(maxsize=8)
def grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    t = ((np.arange(n) + 0.5) / n * 2 - 1).astype(DTYPE)
    return np.broadcast_to(t[None, :], (n, n)), np.broadcast_to(t[:, None], (n, n))  # X, Y


@functools.lru_cache(maxsize=32)
def _upsample_matrix(n: int, res: int) -> np.ndarray:
    """float32 [n, res]: linear interpolation from the pixel centres of `grid(res)` to `grid(n)`'s."""
    pos = np.clip((np.arange(n) + 0.5) / n * res - 0.5, 0, res - 1)
    lo = np.minimum(np.floor(pos).astype(int), res - 2)
    m = np.zeros((n, res), dtype=DTYPE)
    m[np.arange(n), lo] = 1 - (pos - lo)
    m[np.arange(n), lo + 1] = pos - lo
    return m


def upsample(img: np.ndarray, n: int) -> np.ndarray:
    u = _upsample_matrix(n, img.shape[-1])
    return u @ img @ u.T


def smooth(rng: np.random.Generator, n: int, res: int) -> np.ndarray:
    """[n, n] smooth noise of std ~1: a res x res normal lattice, bilinearly upsampled."""
    return upsample(rng.standard_normal((res, res), dtype=DTYPE), n) * DTYPE(1.6)


@functools.lru_cache(maxsize=8)
def _noise_bank(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, n + 48, n + 48), dtype=DTYPE)


def pixel_noise(rng: np.random.Generator, n: int, channels: int = 3) -> np.ndarray:
    """[channels, n, n] unit white noise: a random crop of a fixed bank (fresh normals for
    every pixel would cost as much as the rest of an image)."""
    i, j, flip = rng.integers(0, 49, 3).tolist()
    crop = _noise_bank(n)[:channels, i : i + n, j : j + n]
    return crop[:, ::-1] if flip % 2 else crop


@functools.lru_cache(maxsize=64)
def _blur_matrix(n: int, sigma_px: float) -> np.ndarray:
    d = np.arange(n)[:, None] - np.arange(n)[None, :]
    b = np.exp(-0.5 * (d / sigma_px) ** 2)
    b[b < 1e-9] = 0  # no subnormal floats: matrix products slow down on them by orders of magnitude
    return (b / b.sum(axis=1, keepdims=True)).astype(DTYPE)


def blur(img: np.ndarray, sigma_px: float) -> np.ndarray:
    """Gaussian blur of [..., H, W] along both image axes."""
    b = _blur_matrix(img.shape[-1], round(sigma_px, 1))
    return b @ img @ b.T


def spots(n: int, x: np.ndarray, y: np.ndarray, weight: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """[n, n] sum of Gaussian spots, peak `weight`, std `sigma`, centred at (x, y), all in
    [-1, 1] units. Separable: one [n, m] @ [m, n] product draws all m spots."""
    t = grid(n)[0][0]
    inv = (1 / np.asarray(sigma, dtype=DTYPE))[:, None]
    # Exponents floored at -30: no subnormal floats, on which the product slows down.
    gx = np.exp(np.maximum(np.square((t - np.asarray(x, dtype=DTYPE)[:, None]) * inv) * DTYPE(-0.5), DTYPE(-30)))
    gy = np.exp(np.maximum(np.square((t - np.asarray(y, dtype=DTYPE)[:, None]) * inv) * DTYPE(-0.5), DTYPE(-30)))
    gy = (gy * np.asarray(weight, dtype=DTYPE)[:, None]).T
    # Products in chunks that OpenBLAS runs on one thread: for products this small,
    # handing work to its threads costs more than the work.
    k = max(1, _ONE_THREAD_MNK // (n * n))
    return sum((gy[:, j : j + k] @ gx[j : j + k] for j in range(0, len(gx), k)), np.zeros((n, n), DTYPE))


def arc_mass(x: np.ndarray, y: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """[S, P]: `strength` times the arc length each point of a polyline (a row of x, y)
    stands for, in the units of x and y."""
    seg = np.sqrt(np.square(np.diff(x, axis=-1)) + np.square(np.diff(y, axis=-1)))
    return strength * np.concatenate([seg, seg[..., -1:]], axis=-1)


def strokes(n: int, x: np.ndarray, y: np.ndarray, mass: np.ndarray, sigma_px: float) -> np.ndarray:
    """[n, n] lines through points (x, y) ([-1, 1] units) with `arc_mass` `mass`: peak
    ~strength, Gaussian across with std `sigma_px`.

    Each point is splatted bilinearly and the sum blurred once, which costs the same for
    any number of points; a stronger line saturates over more pixels when clipped, so it
    also looks wider.
    """
    col, row = (x.ravel() + 1) * (n / 2) - 0.5, (y.ravel() + 1) * (n / 2) - 0.5
    inside = (col >= 0) & (col <= n - 1) & (row >= 0) & (row <= n - 1)
    mass = mass.ravel() * inside * (n / 2 * np.sqrt(2 * np.pi) * sigma_px)
    col, row = col.clip(0, n - 1.001), row.clip(0, n - 1.001)
    c0, r0 = col.astype(np.int64), row.astype(np.int64)
    fc, fr = col - c0, row - r0
    index = r0 * n + c0
    index = np.concatenate([index, index + 1, index + n, index + n + 1])
    share = np.concatenate([(1 - fr) * (1 - fc), (1 - fr) * fc, fr * (1 - fc), fr * fc]) * np.tile(mass, 4)
    impulses = np.bincount(index, share, minlength=n * n).astype(DTYPE).reshape(n, n)
    return blur(impulses, sigma_px)


def sigmoid(t: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * t)


def float32_params(params: dict) -> dict:
    """Float arrays to float32 and numpy scalars to Python numbers, so that nothing
    upcasts an image to float64 (whose exp and cos are several times slower)."""
    out = {}
    for k, v in params.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            v = v.astype(DTYPE)
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def rgb(*values: float) -> np.ndarray:
    """float32 [3, 1, 1], to broadcast against [H, W] and [3, H, W]."""
    return np.array(values, dtype=DTYPE)[:, None, None]
