"""Built-in synthetic benchmark datasets: procedurally drawn stand-ins for real medical sets.

``crs demo`` runs the whole pipeline on these, with no download and no patient data.
Every dataset is made on the fly from ``(name, seed)`` (numpy only, float32, vectorised
over the pixel grid).

* ``demo_derm``: dermoscopy, 5 classes, imbalanced like ISIC; groups are lesions.
* ``demo_fundus``: colour fundus photographs, diabetic-retinopathy grade 0..4 (ordinal),
  imbalanced like APTOS; groups are patients.
* ``demo_cxr``: chest X-rays, 4 co-occurring findings (multi-label, ~5% of the entries
  uncertain, stored as -1); groups are patients; its shift target is ``demo_cxr_site2``.
* ``demo_cxr_site2``: the same findings acquired at another site (other intensity curve,
  more noise, another field of view, somewhat sicker patients); every row is test.

Determinism. A group's (lesion's, patient's) look and the labels of its images come from
a generator keyed by ``(sha256(name), seed, 0, group)``, and an image's own nuisances
(pose, lighting, noise) from one keyed by ``(..., 1, row)``. Groups are laid out one
after another until the dataset is full, so image ``i`` depends on ``(name, seed, i)``
only: the same whatever rows are asked for, in any order, in any process, at any
``size`` that still holds row ``i``. The split (key ``(..., 2)``) is the one thing that
depends on ``size``.

Difficulty. The label signal is spread over colour, shape and texture, with wide
within-class spread and overlap between classes, so a logistic probe on 16x16 pixels or
on colour histograms lands well between chance and perfect (tests/extract/test_synthetic.py).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar, NamedTuple

import numpy as np

from crs.extract import splits
from crs.extract.table import Table, registry
from crs.labels import check_task
from crs.strata import finding_set_strata
_MIN_IMAGES = 40  # floor on a dataset's image count, whatever `size` asks for
_GROUP, _RENDER, _SPLIT = 0, 1, 2  # generator streams
_CHUNK = 256  # images rendered between conversions to uint8
_F = np.float32  # every image is drawn in float32: float64 exp/cos are several times slower
_ONE_THREAD_MNK = 64**3  # OpenBLAS runs a matrix product of more multiply-adds on several threads


SOURCE = "builtin synthetic benchmark"


@dataclass(frozen=True)
class SyntheticDataset:
    """One synthetic dataset at a size and seed: its metadata, and its images on demand.

    Satisfies ``crs.extract.datasets.Dataset``; what only files have (provenance, image
    paths, a shift target named by the user) is None."""

    name: str
    task: str  # 'multiclass' | 'multilabel'
    classes: tuple[str, ...]
    ordinal: bool
    shift_target: str | None  # the dataset whose test split is this one's shift condition
    image_size: int  # square images: image_size x image_size x 3
    description: str
    size: float = 1.0
    seed: int = 0
    source: ClassVar[str] = SOURCE
    shift_spec: ClassVar[None] = None
    provenance: ClassVar[None] = None
    paths: ClassVar[None] = None

    @property
    def modality(self) -> str:
        """'dermatology' | 'ophthalmology' | 'radiology': selects the perturbation suite."""
        return _SPECS[self.name].modality

    def table(self) -> Table:
        return _plan(self.name, self.size, self.seed).table

    def images(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """uint8 [len(rows), H, W, 3]: the images of those rows of `table()`."""
        plan = _plan(self.name, self.size, self.seed)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n_rows = len(plan.table.ids)
        if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
            raise IndexError(
                f"{self.name} has rows 0..{n_rows - 1}; asked for rows {rows.min()}..{rows.max()}"
            )
        render = _SPECS[self.name].render
        n = self.image_size
        out = np.empty((len(rows), n, n, 3), dtype=np.uint8)
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK].tolist()
            imgs = np.stack([
                render(n, plan.groups[plan.group_index[i]], plan.rows[i], _rng(self.name, self.seed, _RENDER, i))
                for i in chunk
            ])  # [B, C, H, W], C = 3 or 1 (grey, broadcast to RGB below), ~[0, 1]
            imgs = np.clip(imgs * 255 + 0.5, 0, 255).astype(np.uint8)
            out[start : start + len(chunk)] = imgs.transpose(0, 2, 3, 1)
        return out

    def load_image(self, row: int) -> np.ndarray:
        """uint8 [H, W, 3]: the image of one row of `table()`, the same as `images([row])[0]`."""
        return self.images([row])[0]


# --------------------------------------------------------------------------------------
# Generators, the plan (table + hidden per-group and per-row parameters), splits.


@functools.lru_cache(maxsize=None)
def _stable_int(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def _rng(name: str, seed: int, stream: int, index: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_stable_int(name), seed, stream, index])))


def _choice(rng: np.random.Generator, cdf: np.ndarray) -> int:
    """An index drawn with probabilities given by their cumulative sums `cdf`."""
    return min(int(np.searchsorted(cdf, rng.random(), side="right")), len(cdf) - 1)


@dataclass(frozen=True)
class _Spec:
    name: str
    task: str
    classes: tuple[str, ...]
    ordinal: bool
    modality: str  # one of crs.names.MODALITIES: selects the perturbation suite
    shift_target: str | None
    n_images: int  # at size 1.0
    group_sizes: tuple[float, ...]  # P(a group holds 1, 2, ... images)
    group_prefix: str  # 'L' lesion, 'P' patient
    test_only: bool
    draw_group: Callable[[np.random.Generator], dict]  # -> group parameters
    draw_row: Callable[[dict, int, np.random.Generator], dict]  # (group, k-th image of it) -> row, incl. 'label'
    render: Callable[[int, dict, dict, np.random.Generator], np.ndarray]  # -> float32 [C, H, W]
    description: str


@dataclass(frozen=True)
class _Plan:
    table: Table
    groups: tuple[dict, ...]
    group_index: np.ndarray  # [N] int64
    rows: tuple[dict, ...]


@functools.lru_cache(maxsize=16)
def _plan(name: str, size: float, seed: int) -> _Plan:
    spec = _spec(name)
    if not size > 0:
        raise ValueError(f"{name}: size must be > 0; got {size!r}")
    n_rows = max(_MIN_IMAGES, int(round(spec.n_images * size)))
    cdf = np.cumsum(spec.group_sizes)
    groups, group_index, rows = [], [], []
    while len(rows) < n_rows:
        g = len(groups)
        rng = _rng(name, seed, _GROUP, g)
        m = 1 + _choice(rng, cdf)
        group = spec.draw_group(rng)
        groups.append(group)
        for k in range(min(m, n_rows - len(rows))):
            rows.append(spec.draw_row(group, k, rng))
            group_index.append(g)
    group_index = np.array(group_index, dtype=np.int64)
    labels = np.array([r["label"] for r in rows], dtype=check_task(spec.task).label_dtype)
    if spec.test_only:
        split = np.full(n_rows, 2, dtype=np.int8)
    else:
        strata = finding_set_strata(labels, group_index, len(groups))
        sizes = np.bincount(group_index, minlength=len(groups))
        split = splits.deal_split(strata, sizes, _rng(name, seed, _SPLIT))[group_index]
    group_ids = np.array([f"{name}-{spec.group_prefix}{g:05d}" for g in range(len(groups))])
    table = Table(
        ids=np.array([f"{name}-{i:06d}" for i in range(n_rows)]),
        labels=labels,
        split=split,
        group=group_ids[group_index],
    )
    for column in (table.ids, table.labels, table.split, table.group):
        column.flags.writeable = False  # the table is cached and shared by every caller
    return _Plan(table, tuple(groups), group_index, tuple(rows))


# --------------------------------------------------------------------------------------
# Drawing helpers. Images are float32 [C, H, W] while drawn; coordinates run over
# [-1, 1] at pixel centres, x right, y down.


@functools.lru_cache(maxsize=8)
def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    t = ((np.arange(n) + 0.5) / n * 2 - 1).astype(_F)
    return np.broadcast_to(t[None, :], (n, n)), np.broadcast_to(t[:, None], (n, n))  # X, Y


@functools.lru_cache(maxsize=32)
def _upsample_matrix(n: int, res: int) -> np.ndarray:
    """float32 [n, res]: linear interpolation from the pixel centres of `_grid(res)` to `_grid(n)`'s."""
    pos = np.clip((np.arange(n) + 0.5) / n * res - 0.5, 0, res - 1)
    lo = np.minimum(np.floor(pos).astype(int), res - 2)
    m = np.zeros((n, res), dtype=_F)
    m[np.arange(n), lo] = 1 - (pos - lo)
    m[np.arange(n), lo + 1] = pos - lo
    return m


def _upsample(img: np.ndarray, n: int) -> np.ndarray:
    u = _upsample_matrix(n, img.shape[-1])
    return u @ img @ u.T


def _smooth(rng: np.random.Generator, n: int, res: int) -> np.ndarray:
    """[n, n] smooth noise of std ~1: a res x res normal lattice, bilinearly upsampled."""
    return _upsample(rng.standard_normal((res, res), dtype=_F), n) * _F(1.6)


@functools.lru_cache(maxsize=8)
def _noise_bank(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, n + 48, n + 48), dtype=_F)


def _pixel_noise(rng: np.random.Generator, n: int, channels: int = 3) -> np.ndarray:
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
    return (b / b.sum(axis=1, keepdims=True)).astype(_F)


def _blur(img: np.ndarray, sigma_px: float) -> np.ndarray:
    """Gaussian blur of [..., H, W] along both image axes."""
    b = _blur_matrix(img.shape[-1], round(sigma_px, 1))
    return b @ img @ b.T


def _spots(n: int, x: np.ndarray, y: np.ndarray, weight: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """[n, n] sum of Gaussian spots, peak `weight`, std `sigma`, centred at (x, y), all in
    [-1, 1] units. Separable: one [n, m] @ [m, n] product draws all m spots."""
    t = _grid(n)[0][0]
    inv = (1 / np.asarray(sigma, dtype=_F))[:, None]
    # Exponents floored at -30: no subnormal floats, on which the product slows down.
    gx = np.exp(np.maximum(np.square((t - np.asarray(x, dtype=_F)[:, None]) * inv) * _F(-0.5), _F(-30)))
    gy = np.exp(np.maximum(np.square((t - np.asarray(y, dtype=_F)[:, None]) * inv) * _F(-0.5), _F(-30)))
    gy = (gy * np.asarray(weight, dtype=_F)[:, None]).T
    # Products in chunks that OpenBLAS runs on one thread: for products this small,
    # handing work to its threads costs more than the work.
    k = max(1, _ONE_THREAD_MNK // (n * n))
    return sum((gy[:, j : j + k] @ gx[j : j + k] for j in range(0, len(gx), k)), np.zeros((n, n), _F))


def _arc_mass(x: np.ndarray, y: np.ndarray, strength: np.ndarray) -> np.ndarray:
    """[S, P]: `strength` times the arc length each point of a polyline (a row of x, y)
    stands for, in the units of x and y."""
    seg = np.sqrt(np.square(np.diff(x, axis=-1)) + np.square(np.diff(y, axis=-1)))
    return strength * np.concatenate([seg, seg[..., -1:]], axis=-1)


def _strokes(n: int, x: np.ndarray, y: np.ndarray, mass: np.ndarray, sigma_px: float) -> np.ndarray:
    """[n, n] lines through points (x, y) ([-1, 1] units) with `_arc_mass` `mass`: peak
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
    impulses = np.bincount(index, share, minlength=n * n).astype(_F).reshape(n, n)
    return _blur(impulses, sigma_px)


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * t)


def _f32(params: dict) -> dict:
    """Float arrays to float32 and numpy scalars to Python numbers, so that nothing
    upcasts an image to float64 (whose exp and cos are several times slower)."""
    out = {}
    for k, v in params.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            v = v.astype(_F)
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def _rgb(*values: float) -> np.ndarray:
    """float32 [3, 1, 1], to broadcast against [H, W] and [3, H, W]."""
    return np.array(values, dtype=_F)[:, None, None]


# --------------------------------------------------------------------------------------
# demo_derm


_DERM_CLASSES = ("nevus", "melanoma", "keratosis", "carcinoma", "vascular")
_DERM_PRIOR = np.array([0.45, 0.20, 0.15, 0.12, 0.08])
# One row a class: radius (in half-widths), border irregularity (harmonic amplitude),
# border blur (share of the radius), variegation, then the strengths of four textures:
# pigment network, cerebriform ridges, arborising vessels, red lagoons.
_DERM_SHAPE = np.array([
    # radius irreg  blur  varieg network ridges vessels lagoons
    [0.42, 0.040, 0.10, 0.15, 0.50, 0.05, 0.00, 0.00],  # nevus
    [0.55, 0.110, 0.16, 0.55, 0.45, 0.05, 0.05, 0.00],  # melanoma
    [0.50, 0.070, 0.06, 0.25, 0.05, 0.60, 0.00, 0.00],  # keratosis
    [0.45, 0.070, 0.20, 0.30, 0.00, 0.05, 0.60, 0.05],  # carcinoma
    [0.32, 0.040, 0.07, 0.20, 0.00, 0.00, 0.05, 0.65],  # vascular
])
_DERM_SPREAD = np.array([0.25, 0.45, 0.45, 0.45, 0.6, 0.6, 0.6, 0.6])  # log-normal sd, by column
# Main colour and second colour (mixed in by the variegation field), RGB in [0, 1].
_DERM_COLOUR = np.array([
    [[0.55, 0.36, 0.24], [0.38, 0.24, 0.16]],  # nevus: medium brown, darker centre
    [[0.36, 0.22, 0.16], [0.30, 0.33, 0.42]],  # melanoma: dark brown, blue-grey veil
    [[0.58, 0.43, 0.30], [0.40, 0.28, 0.18]],  # keratosis: tan to brown, waxy
    [[0.78, 0.55, 0.53], [0.48, 0.46, 0.55]],  # carcinoma: pink, blue-grey nests
    [[0.62, 0.20, 0.28], [0.36, 0.12, 0.24]],  # vascular: red, purple
])
_DERM_BORDERLINE = 0.45  # share of lesions pulled part-way towards another class's profile
_SKIN_LIGHT, _SKIN_DARK = np.array([0.93, 0.78, 0.68]), np.array([0.62, 0.42, 0.30])
_HARMONICS = np.arange(2, 7)
_N_BLOBS = 6


def _derm_group(rng: np.random.Generator) -> dict:
    cdf = np.cumsum(_DERM_PRIOR)
    label = _choice(rng, cdf)
    shape, colour = _DERM_SHAPE[label], _DERM_COLOUR[label]
    if rng.random() < _DERM_BORDERLINE:
        other, w = _choice(rng, cdf), rng.uniform(0.2, 0.7)
        shape = (1 - w) * shape + w * _DERM_SHAPE[other]
        colour = (1 - w) * colour + w * _DERM_COLOUR[other]
    shape = shape * np.exp(rng.normal(0.0, _DERM_SPREAD))
    colour = np.clip(colour * np.exp(rng.normal(0.0, 0.12, 3) + rng.normal(0.0, 0.12)), 0.02, 1.0)
    amp = shape[1] * rng.standard_normal(len(_HARMONICS)) / np.sqrt(_HARMONICS - 1)
    phase = rng.uniform(0, 2 * np.pi, len(_HARMONICS))
    return _f32({
        "label": label,
        "skin": _SKIN_LIGHT + rng.beta(1.5, 2.5) * (_SKIN_DARK - _SKIN_LIGHT),
        "hairy": bool(rng.random() < 0.3),
        "centre": rng.normal(0.0, 0.1, 2),
        "angle": rng.uniform(0, 2 * np.pi),
        "aspect": rng.uniform(0.7, 1.0),
        "radius": float(np.clip(shape[0], 0.15, 0.85)),
        "harmonic_cos": amp * np.cos(phase),  # edge(theta) = 1 + sum_k a_k cos(k theta + phase_k)
        "harmonic_sin": amp * np.sin(phase),
        "blur": shape[2],
        "colour": colour,  # [2, 3]
        "variegation": shape[3],
        "blobs": rng.normal(0.0, 0.5, (_N_BLOBS, 2)),  # in lesion coordinates (radius units)
        "blob_weight": rng.normal(0.0, 1.0, _N_BLOBS),
        "texture": shape[4:],
        "network_period": rng.uniform(0.10, 0.16),
        "ridge_freq": rng.uniform(40.0, 60.0),
        "vessels": rng.normal(0.0, 1.0, (4, 4)),  # a vessel: offset, amplitude, frequency, phase
        "lagoon_period": rng.uniform(0.22, 0.32),
    })


def _same_label(group: dict, k: int, rng: np.random.Generator) -> dict:
    return {"label": group["label"], "k": k}


def _render_derm(n: int, lesion: dict, row: dict, rng: np.random.Generator) -> np.ndarray:
    """Dermoscopy-like: a pigmented lesion on textured skin.

    Label signal: the lesion's colour and variegation (colour); its radius, border
    irregularity and border sharpness (shape); and a class texture (texture): a pigment
    network (nevus, atypical in melanoma), cerebriform ridges (keratosis), arborising red
    vessels (carcinoma), red lagoons with pale septa (vascular). 45% of lesions are pulled
    part-way towards another class's profile, and every parameter has a wide spread.
    Nuisances: skin tone and texture, hair, lighting, a dermoscope's dark corners and,
    between images of one lesion, a small rotation, shift and zoom.
    """
    X, Y = _grid(n)
    e = rng.standard_normal(10).tolist()
    skin = _rgb(*lesion["skin"]) * (1 + 0.05 * _smooth(rng, n, 6) + 0.02 * _smooth(rng, n, 24))
    shape = _derm_shape(n, lesion, e)

    varieg = lesion["variegation"]
    mix = np.clip(0.5 + varieg * shape.field, 0, 1) * min(1.0, 1.5 * varieg + 0.1)
    main, second = _rgb(*lesion["colour"][0]), _rgb(*lesion["colour"][1])
    colour = _derm_texture(main + mix * (second - main), n, lesion, shape)  # [3, H, W]
    img = skin + shape.alpha * (colour - skin)

    if lesion["hairy"]:
        for _ in range(int(rng.integers(1, 5))):
            a, b, off, bend = rng.normal(0.0, [1.0, 1.0, 0.5, 0.6]).tolist()
            dist = np.abs(a * X + b * Y + off + bend * X * Y) * (n / 2 / math.hypot(a, b))
            img = img * (1 - 0.5 * np.exp(dist * dist * -3.0))

    gain = _rgb(*np.exp(0.06 * e[4] + 0.03 * np.array(e[5:8])))
    img = img * (gain * (1 + 0.08 * e[8] * X + 0.08 * e[9] * Y))
    if rng.random() < 0.4:  # the dermoscope's field: dark corners
        img = img * _sigmoid((rng.uniform(1.0, 1.35) - np.sqrt(X * X + Y * Y)) * 25)
    return img + 0.015 * _pixel_noise(rng, n)


class _DermShape(NamedTuple):
    u: np.ndarray  # [H, W] lesion coordinates, in radius units
    v: np.ndarray
    d: np.ndarray  # [H, W] distance from the lesion's centre, in radius units
    field: np.ndarray  # [H, W] the smooth variegation field
    alpha: np.ndarray  # [H, W] lesion opacity: 1 inside the border, 0 outside
    radius: float  # in [-1, 1] image units


def _derm_shape(n: int, lesion: dict, e: list[float]) -> _DermShape:
    """The lesion's pose in this image (rotated, shifted, aspect-squeezed, zoomed by the
    draws ``e[0:4]``), its irregular border and its variegation field."""
    c, s = math.cos(lesion["angle"] + 0.2 * e[0]), math.sin(lesion["angle"] + 0.2 * e[0])
    cx, cy = lesion["centre"][0] + 0.05 * e[1], lesion["centre"][1] + 0.05 * e[2]
    radius = lesion["radius"] * math.exp(0.05 * e[3])

    def frame(X, Y):
        return (c * (X - cx) + s * (Y - cy)) / radius, (c * (Y - cy) - s * (X - cx)) / (radius * lesion["aspect"])

    u, v = frame(*_grid(n))
    d = np.sqrt(u * u + v * v)
    # The border and the variegation field are smooth: draw them at 1/2 and 1/4 resolution.
    uh, vh = frame(*_grid(n // 2))
    w = (uh + 1j * vh) / (np.sqrt(uh * uh + vh * vh) + 1e-6)  # e^{i theta}
    wk, edge = w * w, 1.0
    for a, b in zip(lesion["harmonic_cos"].tolist(), lesion["harmonic_sin"].tolist()):
        edge = edge + a * wk.real - b * wk.imag
        wk = wk * w
    uq, vq = frame(*_grid(n // 4))
    bu, bv = lesion["blobs"][:, 0, None, None], lesion["blobs"][:, 1, None, None]
    field = np.tensordot(lesion["blob_weight"], np.exp((np.square(uq - bu) + np.square(vq - bv)) * _F(-5.5)), axes=1)
    edge, field = _upsample(edge, n), _upsample(field, n)
    alpha = _sigmoid((edge - d) / (lesion["blur"] + 0.02))
    return _DermShape(u, v, d, field, alpha, radius)


def _derm_texture(colour: np.ndarray, n: int, lesion: dict, shape: _DermShape) -> np.ndarray:
    """The lesion's colour [3, H, W] with its class textures drawn in (no random draws)."""
    u, v, d, field, radius = shape.u, shape.v, shape.d, shape.field, shape.radius
    network, ridges, vessels, lagoons = lesion["texture"].tolist()
    if network > 0.03:
        f = 2 * np.pi * radius / lesion["network_period"]
        holes = (np.cos(f * u + 0.25 * field) * np.cos(f * v - 0.25 * field) + 1) / 2
        colour = colour * (1 - 0.45 * network * (1 - holes) * _sigmoid((0.9 - d) * 10))
    if ridges > 0.03:
        f = lesion["ridge_freq"] * radius
        gyri = np.cos(f * u + 2.5 * np.sin(0.7 * f * v + field))
        furrow, cyst = _sigmoid((gyri - 0.4) * 8), _sigmoid((-0.85 - gyri) * 12)
        colour = colour * (1 - 0.3 * ridges * furrow)
        colour = colour + (0.25 * ridges * cyst) * (_rgb(0.95, 0.9, 0.75) - colour)
    if vessels > 0.03:
        line = np.zeros_like(d)
        for off, amp, freq, phase in lesion["vessels"].tolist():
            dist = np.abs(v - 0.35 * off - 0.2 * amp * np.sin((3 + freq) * u + phase)) * (radius * n / 2)
            line = np.maximum(line, np.exp(dist * dist * -2.0))
        line = line * (d < 0.95)
        colour = colour + (min(0.8, vessels) * line) * (_rgb(0.72, 0.12, 0.15) - colour)
    if lagoons > 0.03:
        f = 2 * np.pi * radius / lesion["lagoon_period"]
        lag = (np.cos(f * u + 0.5 * field) * np.cos(f * v) + 1) / 2
        red = np.clip(1 - 4 * lag * (1 - lag), 0, 1)  # 0 on the pale septa between lagoons
        colour = colour + (min(1.0, lagoons) * 0.6 * red) * (_rgb(0.55, 0.08, 0.22) - colour)
    return colour


# --------------------------------------------------------------------------------------
# demo_fundus


_FUNDUS_CLASSES = ("grade_0", "grade_1", "grade_2", "grade_3", "grade_4")
_FUNDUS_PRIOR = np.array([0.40, 0.15, 0.25, 0.10, 0.10])
# Mean lesion counts per image by grade: microaneurysms, haemorrhages, hard exudates,
# cotton-wool spots; and the strength of new vessels at the disc (proliferative).
_FUNDUS_LESIONS = np.array([
    # micro haem  exud  cotton neovasc
    [0.4, 0.1, 0.2, 0.0, 0.00],  # 0: no DR
    [6.0, 1.0, 1.0, 0.1, 0.00],  # 1: mild
    [12.0, 8.0, 10.0, 1.5, 0.05],  # 2: moderate
    [18.0, 20.0, 16.0, 4.0, 0.15],  # 3: severe
    [18.0, 20.0, 16.0, 4.0, 0.80],  # 4: proliferative
])
_LESION_SIZE = np.array([0.7, 2.2, 1.0, 2.6]) * (2 / 64)  # std of a spot, [-1, 1] units
_LESION_WEIGHT = np.array([0.7, 0.6, 0.75, 0.35])
_FUNDUS_BURDEN = 0.5  # log-sd of a patient's lesion burden: counts vary ~2x either way in a grade
# Vessels leave the disc in polar coordinates about it, angle 0 pointing at the macula:
# superior and inferior arcades (artery and vein each, bending round the macula) and four
# smaller nasal vessels. Widths are relative.
_VESSEL_ANGLE = np.array([1.25, -1.25, 1.55, -1.55, 2.3, -2.3, 2.9, -2.9])
_VESSEL_BEND = np.array([0.75, -0.75, 0.55, -0.55, 0.1, -0.1, -0.1, 0.1])
_VESSEL_WIDTH = np.array([1.0, 1.0, 1.4, 1.4, 0.8, 0.8, 0.8, 0.8])
_VESSEL_POINTS = np.linspace(0.0, 1.0, 32)


def _fundus_group(rng: np.random.Generator) -> dict:
    grade = _choice(rng, np.cumsum(_FUNDUS_PRIOR))
    # The vessel tree: curves phi = phi_0 - bend * (rho - rho_0) about the disc, wavy by
    # a tortuosity, plus one branch off each arcade vessel at rho_b with its own bend.
    angle = _VESSEL_ANGLE + rng.normal(0.0, 0.08, 8)
    bend = _VESSEL_BEND + rng.normal(0.0, 0.1, 8)
    branch_at = rng.uniform(0.3, 0.6, 4)
    start = np.concatenate([np.full(8, 0.06), branch_at])[:, None]
    angle = np.concatenate([angle, angle[:4] - bend[:4] * branch_at])[:, None]
    bend = np.concatenate([bend, bend[:4] + np.sign(angle[:4, 0]) * rng.uniform(-1.2, -0.6, 4)])[:, None]
    width = np.concatenate([_VESSEL_WIDTH, 0.7 * _VESSEL_WIDTH[:4]])[:, None]
    width = width * np.where(np.arange(12)[:, None] % 4 >= 2, 1 + 0.1 * grade, 1.0)  # veins dilate
    rho = start + (1.25 - start) * _VESSEL_POINTS  # [12 vessels, 32 points]
    phi = angle - bend * (rho - start) + rng.uniform(0.0, 0.06) * np.sin(rho * 25 + angle * 7)
    toward, up = rho * np.cos(phi), rho * np.sin(phi)  # unit-retina coordinates about the disc
    return _f32({
        "label": grade,
        "burden": np.exp(rng.normal(0.0, _FUNDUS_BURDEN)),
        "colour": np.array([0.85, 0.38, 0.14]) * np.exp(rng.normal(0.0, [0.06, 0.1, 0.2])),
        "right_eye_first": bool(rng.random() < 0.5),
        "vessel_toward": toward,  # towards the macula
        "vessel_up": up,
        "vessel_mass": _arc_mass(toward, up, width * (1.2 - 0.6 * rho)),
    })


class _Eye(NamedTuple):
    """Where one fundus image puts the retina (the unit disc), its optic disc and macula."""

    cx: float  # the retina's centre and radius, in [-1, 1] image units
    cy: float
    radius: float
    dx: float  # the optic disc's centre, in retina units
    dy: float
    mx: float  # the macula's centre, in retina units
    my: float
    side: float  # +1: the disc lies at +x (a right eye); -1: a left eye

    def polar(self, rho: np.ndarray, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Points at (rho, phi) about the disc (phi = 0 towards the macula) in image coordinates."""
        return (self.cx + self.radius * (self.dx - self.side * rho * np.cos(phi)),
                self.cy + self.radius * (self.dy + rho * np.sin(phi)))


def _render_fundus(n: int, patient: dict, row: dict, rng: np.random.Generator) -> np.ndarray:
    """Fundus-photograph-like: an orange-red retina on black, optic disc, macula, vessels.

    Label signal: the number and size of red dots (microaneurysms), dark red blots
    (haemorrhages), yellow specks round the macula (hard exudates) and pale fluffy
    patches (cotton-wool spots) rise with the grade; grade 4 adds a tangle of new vessels
    at the disc. Counts are Poisson around a per-patient burden, so adjacent grades
    overlap. Nuisances: which eye, field of view, pigmentation, exposure, defocus.
    """
    X, Y = _grid(n)
    grade = patient["label"]
    e = rng.standard_normal(8).tolist()
    side = 1.0 if (row["k"] == 0) == patient["right_eye_first"] else -1.0  # disc at +x: a right eye
    cx, cy, radius = 0.03 * e[0], 0.03 * e[1], float(rng.uniform(0.84, 1.0))
    x, y = (X - cx) / radius, (Y - cy) / radius  # the retina is the unit disc
    r2 = x * x + y * y
    inside = _sigmoid((1 - np.sqrt(r2)) * (n * radius / 1.5))

    colour = _rgb(*patient["colour"] * np.exp(0.05 * np.array(e[2:5])))
    img = colour * ((1 - 0.45 * r2) * (1 + 0.05 * _smooth(rng, n, 8)))

    # Optic disc (bright, with a brighter cup) and macula (dark).
    dx, dy = side * 0.5 + 0.04 * e[5], 0.05 * e[6]
    pd2 = np.square(x - dx) + np.square(y - dy)
    disc = np.exp(pd2 * pd2 * -4750) * 0.9
    img = img + disc * (_rgb(1.0, 0.86, 0.55) - img) + 0.15 * np.exp(pd2 * -400)
    mx, my = dx - side * 0.55, dy + 0.06
    img = img * (1 - 0.3 * np.exp((np.square(x - mx) + np.square(y - my)) * -33))
    eye = _Eye(cx, cy, radius, dx, dy, mx, my, side)

    # Vessels, whose veins dilate with the grade (drawn per patient, posed per image).
    vx = cx + radius * (dx - side * patient["vessel_toward"])
    vy = cy + radius * (dy + patient["vessel_up"])
    vessel = np.clip(_strokes(n, vx, vy, patient["vessel_mass"] * radius, 0.55 * n / 64), 0, 1)
    img = img * (1 - 0.55 * vessel * _rgb(0.35, 1.0, 1.0))
    img = _fundus_proliferative(img, n, grade, patient, eye, rng)
    img = _fundus_lesions(img, n, grade, patient["burden"], math.exp(0.2 * e[7]), eye, rng)

    # Acquisition: exposure, defocus, the camera's circular field.
    img = img * math.exp(0.06 * rng.standard_normal())
    sigma = float(rng.uniform(0.3, 1.2)) * n / 64
    if sigma > 0.55:
        img = _blur(img, sigma)
    return (img + 0.01 * _pixel_noise(rng, n)) * inside


def _fundus_proliferative(img: np.ndarray, n: int, grade: int, patient: dict, eye: _Eye,
                          rng: np.random.Generator) -> np.ndarray:
    """New vessels at the disc (grades with a neovascular strength) and, at grade 4, a
    preretinal haemorrhage."""
    neo = float(_FUNDUS_LESIONS[grade, 4]) * patient["burden"] ** 0.5
    if neo > 0.01 and rng.random() < 0.9:  # new vessels: a few tangled loops by the disc
        steps = rng.normal(0.0, 0.9, (4, 40)).cumsum(axis=1)
        rho = 0.1 + 0.3 * np.abs(np.sin(np.linspace(0, 3 * np.pi, 40) + rng.uniform(0, 6, (4, 1))))
        tx, ty = eye.polar(rho, rng.uniform(-np.pi, np.pi, (4, 1)) + 0.35 * steps)
        tangle = np.clip(_strokes(n, tx, ty, _arc_mass(tx, ty, 1.0), 0.45 * n / 64), 0, 1)
        img = img * (1 - min(0.8, 0.7 * neo) * tangle * _rgb(0.25, 1.0, 1.0))
    if grade == 4 and rng.random() < 0.5:  # a preretinal haemorrhage: a large dark boat
        hx, hy = eye.polar(rng.uniform(0.3, 0.9, 1), rng.uniform(-np.pi, np.pi, 1))
        blot = _spots(n, np.array([hx[0] - 0.03, hx[0] + 0.03]), hy, np.array([0.8, 0.8]), np.full(2, 0.09))
        img = img * (1 - np.clip(blot, 0, 0.85) * _rgb(0.5, 0.9, 0.9))
    return img


def _fundus_lesions(img: np.ndarray, n: int, grade: int, burden: float, jitter: float, eye: _Eye,
                    rng: np.random.Generator) -> np.ndarray:
    """Microaneurysms, haemorrhages, hard exudates, cotton-wool spots: Poisson counts around
    the patient's ``burden`` times this image's ``jitter``, uniform over the retina except
    exudates, which cluster round the macula."""
    counts = rng.poisson(_FUNDUS_LESIONS[grade, :4] * burden * jitter).tolist()
    m = sum(counts)
    if not m:
        return img
    r, a = 0.85 * np.sqrt(rng.random(m)), rng.uniform(0, 2 * np.pi, m)
    sx, sy = r * np.cos(a), r * np.sin(a)
    exudates = slice(counts[0] + counts[1], counts[0] + counts[1] + counts[2])
    sx[exudates] = eye.mx + 0.3 * rng.standard_normal(counts[2])
    sy[exudates] = eye.my + 0.3 * rng.standard_normal(counts[2])
    kind = np.repeat(np.arange(4), counts)
    size = _LESION_SIZE[kind] * rng.uniform(0.8, 1.25, m) * eye.radius
    weight = _LESION_WEIGHT[kind] * rng.uniform(0.7, 1.3, m)
    sx, sy = eye.cx + eye.radius * sx, eye.cy + eye.radius * sy
    red = kind < 2
    if red.any():
        dark = np.clip(_spots(n, sx[red], sy[red], weight[red], size[red]), 0, 0.9)
        img = img * (1 - dark * _rgb(0.35, 0.8, 0.8))
    if not red.all():
        pale = np.clip(_spots(n, sx[~red], sy[~red], weight[~red], size[~red]), 0, 1)
        img = img + pale * (_rgb(0.95, 0.85, 0.45) - img)
    return img


# --------------------------------------------------------------------------------------
# demo_cxr and demo_cxr_site2


_CXR_CLASSES = ("cardiomegaly", "effusion", "consolidation", "edema")
# Latent model: finding k is present when z_k = a_k + L_k . (heart failure, infection)
# + e_k > 0; a patient's two factors are shared by all their images, e_k ~ N(0, 0.6) is
# drawn per image, and a_k is set so that P(z_k > 0) is the site's prevalence. Entries
# near the threshold are the ones marked uncertain, so the share of 1s is a little lower.
_CXR_LOADINGS = np.array([[0.8, 0.0], [0.6, 0.35], [0.0, 0.85], [0.8, 0.15]])
_CXR_NOISE = 0.6
_CXR_PREVALENCE = {"demo_cxr": (0.22, 0.30, 0.12, 0.16), "demo_cxr_site2": (0.28, 0.35, 0.16, 0.22)}
_CXR_VISIBILITY = 0.45  # log-sd of how plainly a finding shows on a film
_CXR_UNCERTAIN = 0.14  # P(an entry is uncertain) at z = 0, falling off as exp(-z^2 / 0.5)
# Acquisition by site: gamma of the intensity curve, contrast, detector noise, zoom, offset.
class _CxrSite(NamedTuple):
    gamma: float
    contrast: float
    noise: float
    zoom: float
    offset: tuple[float, float]


_CXR_SITE = {
    "demo_cxr": _CxrSite(gamma=1.0, contrast=1.0, noise=0.02, zoom=1.0, offset=(0.0, 0.0)),
    "demo_cxr_site2": _CxrSite(gamma=0.85, contrast=0.85, noise=0.045, zoom=1.25, offset=(0.08, 0.12)),
}


def _cxr_group(rng: np.random.Generator) -> dict:
    factors = rng.standard_normal(2)
    return _f32({
        "factors": factors,
        "build": np.exp(rng.normal(0.0, 0.07)),  # body and lung size
        "heart": np.exp(rng.normal(0.0, 0.09)),  # heart width before any cardiomegaly
        "lung_height": np.exp(rng.normal(0.0, 0.06)),
        "habitus": rng.uniform(0.0, 0.08),
        "ap_prone": float(np.clip(0.2 + 0.25 * factors.max(), 0.05, 0.8)),  # the sick get portable AP films
    })


def _cxr_row_for(site: str) -> Callable[[dict, int, np.random.Generator], dict]:
    sd = np.sqrt((_CXR_LOADINGS**2).sum(axis=1) + _CXR_NOISE**2)
    intercept = sd * np.array([NormalDist().inv_cdf(p) for p in _CXR_PREVALENCE[site]])

    def draw(group: dict, k: int, rng: np.random.Generator) -> dict:
        z = intercept + _CXR_LOADINGS @ group["factors"] + rng.normal(0.0, _CXR_NOISE, 4)
        label = (z > 0).astype(np.int8)
        label[rng.random(4) < _CXR_UNCERTAIN * np.exp(-2 * z * z)] = -1
        return {
            "label": label,
            "z": z.tolist(),
            "effusion_side": _choice(rng, np.array([0.35, 0.6, 1.0])),  # right, left, both
            "consolidation_at": rng.uniform(-1, 1, 2).tolist(),
            "ap": bool(rng.random() < group["ap_prone"]),
            # How plainly each finding shows on this film, whatever its clinical severity.
            "visibility": np.exp(rng.normal(0.0, _CXR_VISIBILITY, 4)).tolist(),
        }

    return draw


def _cxr_render_for(site: str) -> Callable[[int, dict, dict, np.random.Generator], np.ndarray]:
    return functools.partial(_render_cxr, site=_CXR_SITE[site])


def _render_cxr(n: int, patient: dict, row: dict, rng: np.random.Generator, *, site: _CxrSite) -> np.ndarray:
    """Chest-X-ray-like, grayscale (dense is bright): body, lungs, ribs, heart, clavicles.

    Label signal, each finding scaled by how far its latent lies above the threshold (so
    borderline cases are faint): cardiomegaly widens the heart (shape); effusion fills a
    lung base up to a meniscus and hides the costophrenic angle; consolidation is a
    patchy opacity in one lung (texture); edema is a haze round the hila. Nuisances:
    build, heart size, inspiration, tilt and position, AP films (which magnify the heart
    and are commoner in the sick), devices, exposure, and the site's acquisition.
    """
    cardio, effusion, consolidation, edema = (
        max(z + 0.35, 0.0) ** 0.8 * v for z, v in zip(row["z"], row["visibility"])
    )
    e = rng.standard_normal(6).tolist()
    img, chest = _cxr_chest(n, patient, e, rng, site.zoom, site.offset)
    x, y = chest.x, chest.y

    # Heart: on the diaphragm, bulging to the patient's left (image right).
    ap = 1.12 if row["ap"] else 1.0
    half_width = 0.29 * patient["heart"] * ap * (1 + 0.25 * min(cardio, 1.6))
    heart = _sigmoid((1 - np.square((x - 0.05) * (1 / half_width)) - np.square((y - chest.base + 0.3) * 4.2)) * 8)
    img = img + heart * (0.58 - img) * 0.9
    img = _cxr_findings(img, n, chest, row, effusion, consolidation, edema, rng)

    if rng.random() < (0.5 if row["ap"] else 0.1):  # ECG leads and a line
        for a, c in rng.uniform([-0.7, -0.6], [0.7, 0.5], (3, 2)).tolist():
            img = img + 0.35 * np.exp((np.square(x - a) + np.square(y - c)) * -667)
        bend, end = float(rng.normal(0.0, 0.3)), float(rng.uniform(-0.2, 0.3))
        line = (x - 0.1 - bend * np.square(y + 0.8)) * (n / 2 * chest.build)
        img = img + 0.2 * np.exp(line * line * -1) * (y < end)

    # Acquisition: exposure, then the site's intensity curve, then detector noise.
    img = np.clip(img * math.exp(0.1 * e[5]) + float(rng.normal(0.0, 0.03)), 0, 1)
    gamma = site.gamma
    img = 0.5 + site.contrast * ((img**gamma if gamma != 1.0 else img) - 0.5)
    return img + site.noise * _pixel_noise(rng, n, 1)


class _Chest(NamedTuple):
    """One film's anatomy: coordinates and the lung fields the findings are drawn in."""

    x: np.ndarray  # [H, W] anatomical coordinates after field of view, tilt, position and build
    y: np.ndarray
    ax: np.ndarray  # |x|: both lungs at once
    lung: np.ndarray  # [H, W] in [0, 1]: inside a lung
    floor: np.ndarray  # [H, W] the diaphragm's height under each point
    apex: float  # the lungs' top and base (before the dome), in y
    base: float
    build: float


def _cxr_chest(n: int, patient: dict, e: list[float], rng: np.random.Generator, zoom: float,
               offset: tuple[float, float]) -> tuple[np.ndarray, _Chest]:
    """The healthy film [H, W] (body, lungs, ribs, lung markings, clavicles, trachea) and its
    anatomy; ``e[0:5]`` pose the patient (tilt, build, position, inspiration)."""
    X, Y = _grid(n)
    # Anatomical coordinates: the site's field of view, then the patient's position.
    tilt, build = 0.04 * e[0], patient["build"] * math.exp(0.02 * e[1])
    x0, y0 = X / zoom + (offset[0] + 0.035 * e[2]), Y / zoom + (offset[1] + 0.035 * e[3])
    x = (math.cos(tilt) * x0 - math.sin(tilt) * y0) / build
    y = (math.sin(tilt) * x0 + math.cos(tilt) * y0) / build
    ax = np.abs(x)

    shoulders = 0.5 * np.sqrt(np.clip(-0.55 - y, 0, None))
    img = 0.06 + 0.5 * _sigmoid((0.92 - ax - shoulders) * 25)

    # Lungs, both at once in |x|: from the mediastinum (|x| = 0.07) out to a lateral wall
    # that rounds off towards the apex; the floor is the diaphragm's dome, whose lateral
    # end is the costophrenic angle (the right hemidiaphragm, image left, sits higher).
    apex = -0.74
    base = apex + 1.25 * patient["lung_height"] * math.exp(0.04 * e[4])  # inspiration
    t = np.clip((y - apex) * (1 / (base - apex)), 0, 1)
    wall = 0.07 + 0.68 * np.sqrt(1 - np.square(1 - t))
    dome = np.clip(1 - np.square((ax - 0.42) * 3), 0, None)
    floor = base - 0.15 * dome - 0.03 * (x < 0).astype(_F)
    lung = _sigmoid(np.minimum(np.minimum(ax - 0.07, wall - ax), np.minimum(y - apex, floor - y)) * 45)
    img = img - (0.4 - patient["habitus"]) * lung  # soft tissue over the lungs greys them

    # Ribs (posterior arcs), vessels fanning from the hila, clavicles, trachea.
    rib_phase = (y + 0.3 * ax - 0.5 * x * x) * _F(2 * np.pi / 0.16)
    hilum = np.exp(np.square(ax - 0.15) * -8 - np.square(y + 0.05) * 6)
    markings = (0.05 * hilum + 0.015) * _smooth(rng, n, 16) + 0.06 * hilum
    img = img + (0.03 * (1 + np.cos(rib_phase)) + markings) * lung
    clavicle = np.exp(np.square((y + 0.66 - 0.3 * ax * np.sqrt(ax)) * 28) * -1) * ((ax < 0.6) & (ax > 0.05))
    img = img + 0.15 * clavicle - 0.08 * np.exp(x * x * -900) * (y < -0.35)
    return img, _Chest(x, y, ax, lung, floor, apex, base, build)


def _cxr_findings(img: np.ndarray, n: int, chest: _Chest, row: dict, effusion: float, consolidation: float,
                  edema: float, rng: np.random.Generator) -> np.ndarray:
    """Effusion, consolidation and edema drawn into the lungs, each as strong as its score."""
    x, y, ax, lung = chest.x, chest.y, chest.ax, chest.lung
    if effusion > 0:  # fluid fills the lung base up to a meniscus rising laterally
        depth = (0.03 + 0.15 * min(effusion, 1.5)) * (chest.base - chest.apex)
        side = (x < 0, x > 0, ax > 0)[row["effusion_side"]]
        top = chest.floor - depth * (0.5 + 0.8 * np.clip((ax - 0.15) * 2, 0, 1))
        fluid = _sigmoid((y - top) * 40) * lung * side
        img = img + (0.8 * min(1.0, 0.4 + effusion)) * fluid * (0.56 - img)

    if consolidation > 0:  # patchy opacity in one lung zone
        at_x, at_y = row["consolidation_at"]
        px, py = (1.0 if at_x > 0 else -1.0) * (0.3 + 0.12 * abs(at_x)), -0.15 + 0.3 * at_y
        blob = np.exp((np.square(x - px) + np.square(y - py)) * (-1 / (0.02 + 0.03 * min(consolidation, 1.5))))
        patch = _sigmoid((_smooth(rng, n, 10) + 0.6) * 3)
        img = img + (0.3 * min(consolidation, 1.2)) * blob * patch * lung

    if edema > 0:  # perihilar (butterfly) haze and a general loss of lung clarity
        haze = np.exp(np.square(ax - 0.16) * -20 - np.square(y + 0.02) * 11)
        img = img + min(edema, 1.5) * (0.09 * haze + 0.01) * lung
    return img


# --------------------------------------------------------------------------------------
# The registry.


def _cxr_spec(name: str, n_images: int, test_only: bool, shift_target: str | None, description: str) -> _Spec:
    return _Spec(
        name=name,
        task="multilabel",
        classes=_CXR_CLASSES,
        ordinal=False,
        modality="radiology",
        shift_target=shift_target,
        n_images=n_images,
        group_sizes=(0.55, 0.3, 0.15),
        group_prefix="P",
        test_only=test_only,
        draw_group=_cxr_group,
        draw_row=_cxr_row_for(name),
        render=_cxr_render_for(name),
        description=description,
    )


# One record a dataset; adding one is a record here plus its expectations in
# tests/extract/test_synthetic.py.
_SPECS: dict[str, _Spec] = registry(
    (
        _Spec(
            name="demo_derm",
            task="multiclass",
            classes=_DERM_CLASSES,
            ordinal=False,
            modality="dermatology",
            shift_target=None,
            n_images=900,
            group_sizes=(0.5, 0.3, 0.2),
            group_prefix="L",
            test_only=False,
            draw_group=_derm_group,
            draw_row=_same_label,
            render=_render_derm,
            description=(
                "Dermoscopy-like lesions, 5 classes imbalanced like ISIC (45/20/15/12/8%); "
                "signal in lesion colour, variegation, size, border and texture; groups "
                "are lesions imaged 1-3 times."
            ),
        ),
        _Spec(
            name="demo_fundus",
            task="multiclass",
            classes=_FUNDUS_CLASSES,
            ordinal=True,
            modality="ophthalmology",
            shift_target=None,
            n_images=900,
            group_sizes=(0.4, 0.6),
            group_prefix="P",
            test_only=False,
            draw_group=_fundus_group,
            draw_row=_same_label,
            render=_render_fundus,
            description=(
                "Fundus-photograph-like, diabetic-retinopathy grade 0-4 imbalanced like "
                "APTOS (40/15/25/10/10%); signal in the count and size of red dots, blots, "
                "exudates and new vessels; groups are patients (one image an eye)."
            ),
        ),
        _cxr_spec(
            "demo_cxr",
            1100,
            test_only=False,
            shift_target="demo_cxr_site2",
            description=(
                "Chest-X-ray-like, 4 co-occurring findings (cardiomegaly, effusion, "
                "consolidation, edema; 12-25% positive; ~5% of entries uncertain, -1); "
                "signal in heart width, basal and patchy opacities and perihilar haze; "
                "groups are patients."
            ),
        ),
        _cxr_spec(
            "demo_cxr_site2",
            400,
            test_only=True,
            shift_target=None,
            description=(
                "demo_cxr's findings at a second site: another intensity curve, more "
                "noise, a zoomed and offset field of view, sicker patients; test only."
            ),
        ),
    ),
    "synthetic dataset",
)

DATASETS: tuple[str, ...] = tuple(_SPECS)
MODALITY: dict[str, str] = {name: spec.modality for name, spec in _SPECS.items()}


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise KeyError(f"unknown synthetic dataset {name!r}; valid names: {', '.join(DATASETS)}") from None


def get(name: str, size: float = 1.0, seed: int = 0) -> SyntheticDataset:
    """The synthetic dataset `name`, with `size` times its default number of images."""
    spec = _spec(name)
    if not size > 0:
        raise ValueError(f"size must be > 0 (a multiple of the default image count); got {size!r}")
    return SyntheticDataset(
        name=spec.name,
        task=spec.task,
        classes=spec.classes,
        ordinal=spec.ordinal,
        shift_target=spec.shift_target,
        image_size=64,
        description=spec.description,
        size=float(size),
        seed=int(seed),
    )
