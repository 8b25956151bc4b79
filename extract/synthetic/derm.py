"""demo_derm: dermoscopy-like lesions (groups, labels, rendering)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from crs.extract.synthetic.draw import DTYPE, choice, float32_params, grid, pixel_noise, rgb, sigmoid, smooth, upsample

DERM_CLASSES = ("nevus", "melanoma", "keratosis", "carcinoma", "vascular")
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


def derm_group(rng: np.random.Generator) -> dict:
    cdf = np.cumsum(_DERM_PRIOR)
    label = choice(rng, cdf)
    shape, colour = _DERM_SHAPE[label], _DERM_COLOUR[label]
    if rng.random() < _DERM_BORDERLINE:
        other, w = choice(rng, cdf), rng.uniform(0.2, 0.7)
        shape = (1 - w) * shape + w * _DERM_SHAPE[other]
        colour = (1 - w) * colour + w * _DERM_COLOUR[other]
    shape = shape * np.exp(rng.normal(0.0, _DERM_SPREAD))
    colour = np.clip(colour * np.exp(rng.normal(0.0, 0.12, 3) + rng.normal(0.0, 0.12)), 0.02, 1.0)
    amp = shape[1] * rng.standard_normal(len(_HARMONICS)) / np.sqrt(_HARMONICS - 1)
    phase = rng.uniform(0, 2 * np.pi, len(_HARMONICS))
    return float32_params({
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


def same_label(group: dict, k: int, rng: np.random.Generator) -> dict:
    return {"label": group["label"], "k": k}


def render_derm(n: int, lesion: dict, row: dict, rng: np.random.Generator) -> np.ndarray:
    """Dermoscopy-like: a pigmented lesion on textured skin.

    Label signal: the lesion's colour and variegation (colour); its radius, border
    irregularity and border sharpness (shape); and a class texture (texture): a pigment
    network (nevus, atypical in melanoma), cerebriform ridges (keratosis), arborising red
    vessels (carcinoma), red lagoons with pale septa (vascular). 45% of lesions are pulled
    part-way towards another class's profile, and every parameter has a wide spread.
    Nuisances: skin tone and texture, hair, lighting, a dermoscope's dark corners and,
    between images of one lesion, a small rotation, shift and zoom.
    """
    X, Y = grid(n)
    e = rng.standard_normal(10).tolist()
    skin = rgb(*lesion["skin"]) * (1 + 0.05 * smooth(rng, n, 6) + 0.02 * smooth(rng, n, 24))
    shape = _derm_shape(n, lesion, e)

    varieg = lesion["variegation"]
    mix = np.clip(0.5 + varieg * shape.field, 0, 1) * min(1.0, 1.5 * varieg + 0.1)
    main, second = rgb(*lesion["colour"][0]), rgb(*lesion["colour"][1])
    colour = _derm_texture(main + mix * (second - main), n, lesion, shape)  # [3, H, W]
    img = skin + shape.alpha * (colour - skin)

    if lesion["hairy"]:
        for _ in range(int(rng.integers(1, 5))):
            a, b, off, bend = rng.normal(0.0, [1.0, 1.0, 0.5, 0.6]).tolist()
            dist = np.abs(a * X + b * Y + off + bend * X * Y) * (n / 2 / math.hypot(a, b))
            img = img * (1 - 0.5 * np.exp(dist * dist * -3.0))

    gain = rgb(*np.exp(0.06 * e[4] + 0.03 * np.array(e[5:8])))
    img = img * (gain * (1 + 0.08 * e[8] * X + 0.08 * e[9] * Y))
    if rng.random() < 0.4:  # the dermoscope's field: dark corners
        img = img * sigmoid((rng.uniform(1.0, 1.35) - np.sqrt(X * X + Y * Y)) * 25)
    return img + 0.015 * pixel_noise(rng, n)


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

    u, v = frame(*grid(n))
    d = np.sqrt(u * u + v * v)
    # The border and the variegation field are smooth: draw them at 1/2 and 1/4 resolution.
    uh, vh = frame(*grid(n // 2))
    w = (uh + 1j * vh) / (np.sqrt(uh * uh + vh * vh) + 1e-6)  # e^{i theta}
    wk, edge = w * w, 1.0
    for a, b in zip(lesion["harmonic_cos"].tolist(), lesion["harmonic_sin"].tolist()):
        edge = edge + a * wk.real - b * wk.imag
        wk = wk * w
    uq, vq = frame(*grid(n // 4))
    bu, bv = lesion["blobs"][:, 0, None, None], lesion["blobs"][:, 1, None, None]
    field = np.tensordot(lesion["blob_weight"], np.exp((np.square(uq - bu) + np.square(vq - bv)) * DTYPE(-5.5)), axes=1)
    edge, field = upsample(edge, n), upsample(field, n)
    alpha = sigmoid((edge - d) / (lesion["blur"] + 0.02))
    return _DermShape(u, v, d, field, alpha, radius)


def _derm_texture(colour: np.ndarray, n: int, lesion: dict, shape: _DermShape) -> np.ndarray:
    """The lesion's colour [3, H, W] with its class textures drawn in (no random draws)."""
    u, v, d, field, radius = shape.u, shape.v, shape.d, shape.field, shape.radius
    network, ridges, vessels, lagoons = lesion["texture"].tolist()
    if network > 0.03:
        f = 2 * np.pi * radius / lesion["network_period"]
        holes = (np.cos(f * u + 0.25 * field) * np.cos(f * v - 0.25 * field) + 1) / 2
        colour = colour * (1 - 0.45 * network * (1 - holes) * sigmoid((0.9 - d) * 10))
    if ridges > 0.03:
        f = lesion["ridge_freq"] * radius
        gyri = np.cos(f * u + 2.5 * np.sin(0.7 * f * v + field))
        furrow, cyst = sigmoid((gyri - 0.4) * 8), sigmoid((-0.85 - gyri) * 12)
        colour = colour * (1 - 0.3 * ridges * furrow)
        colour = colour + (0.25 * ridges * cyst) * (rgb(0.95, 0.9, 0.75) - colour)
    if vessels > 0.03:
        line = np.zeros_like(d)
        for off, amp, freq, phase in lesion["vessels"].tolist():
            dist = np.abs(v - 0.35 * off - 0.2 * amp * np.sin((3 + freq) * u + phase)) * (radius * n / 2)
            line = np.maximum(line, np.exp(dist * dist * -2.0))
        line = line * (d < 0.95)
        colour = colour + (min(0.8, vessels) * line) * (rgb(0.72, 0.12, 0.15) - colour)
    if lagoons > 0.03:
        f = 2 * np.pi * radius / lesion["lagoon_period"]
        lag = (np.cos(f * u + 0.5 * field) * np.cos(f * v) + 1) / 2
        red = np.clip(1 - 4 * lag * (1 - lag), 0, 1)  # 0 on the pale septa between lagoons
        colour = colour + (min(1.0, lagoons) * 0.6 * red) * (rgb(0.55, 0.08, 0.22) - colour)
    return colour
