"""demo_cxr and demo_cxr_site2: chest-X-ray-like films with four co-occurring findings, at two sites
(groups, labels from a latent model, rendering, the sites' acquisition)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from crs.extract.synthetic.draw import DTYPE, choice, float32_params, grid, pixel_noise, sigmoid, smooth

CXR_CLASSES = ("cardiomegaly", "effusion", "consolidation", "edema")
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


def cxr_group(rng: np.random.Generator) -> dict:
    factors = rng.standard_normal(2)
    return float32_params({
        "factors": factors,
        "build": np.exp(rng.normal(0.0, 0.07)),  # body and lung size
        "heart": np.exp(rng.normal(0.0, 0.09)),  # heart width before any cardiomegaly
        "lung_height": np.exp(rng.normal(0.0, 0.06)),
        "habitus": rng.uniform(0.0, 0.08),
        "ap_prone": float(np.clip(0.2 + 0.25 * factors.max(), 0.05, 0.8)),  # the sick get portable AP films
    })


def cxr_row_for(site: str) -> Callable[[dict, int, np.random.Generator], dict]:
    sd = np.sqrt((_CXR_LOADINGS**2).sum(axis=1) + _CXR_NOISE**2)
    intercept = sd * np.array([NormalDist().inv_cdf(p) for p in _CXR_PREVALENCE[site]])

    def draw(group: dict, k: int, rng: np.random.Generator) -> dict:
        z = intercept + _CXR_LOADINGS @ group["factors"] + rng.normal(0.0, _CXR_NOISE, 4)
        label = (z > 0).astype(np.int8)
        label[rng.random(4) < _CXR_UNCERTAIN * np.exp(-2 * z * z)] = -1
        return {
            "label": label,
            "z": z.tolist(),
            "effusion_side": choice(rng, np.array([0.35, 0.6, 1.0])),  # right, left, both
            "consolidation_at": rng.uniform(-1, 1, 2).tolist(),
            "ap": bool(rng.random() < group["ap_prone"]),
            # How plainly each finding shows on this film, whatever its clinical severity.
            "visibility": np.exp(rng.normal(0.0, _CXR_VISIBILITY, 4)).tolist(),
        }

    return draw


def cxr_render_for(site: str) -> Callable[[int, dict, dict, np.random.Generator], np.ndarray]:
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
    heart = sigmoid((1 - np.square((x - 0.05) * (1 / half_width)) - np.square((y - chest.base + 0.3) * 4.2)) * 8)
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
    return img + site.noise * pixel_noise(rng, n, 1)


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
    X, Y = grid(n)
    # Anatomical coordinates: the site's field of view, then the patient's position.
    tilt, build = 0.04 * e[0], patient["build"] * math.exp(0.02 * e[1])
    x0, y0 = X / zoom + (offset[0] + 0.035 * e[2]), Y / zoom + (offset[1] + 0.035 * e[3])
    x = (math.cos(tilt) * x0 - math.sin(tilt) * y0) / build
    y = (math.sin(tilt) * x0 + math.cos(tilt) * y0) / build
    ax = np.abs(x)

    shoulders = 0.5 * np.sqrt(np.clip(-0.55 - y, 0, None))
    img = 0.06 + 0.5 * sigmoid((0.92 - ax - shoulders) * 25)

    # Lungs, both at once in |x|: from the mediastinum (|x| = 0.07) out to a lateral wall
    # that rounds off towards the apex; the floor is the diaphragm's dome, whose lateral
    # end is the costophrenic angle (the right hemidiaphragm, image left, sits higher).
    apex = -0.74
    base = apex + 1.25 * patient["lung_height"] * math.exp(0.04 * e[4])  # inspiration
    t = np.clip((y - apex) * (1 / (base - apex)), 0, 1)
    wall = 0.07 + 0.68 * np.sqrt(1 - np.square(1 - t))
    dome = np.clip(1 - np.square((ax - 0.42) * 3), 0, None)
    floor = base - 0.15 * dome - 0.03 * (x < 0).astype(DTYPE)
    lung = sigmoid(np.minimum(np.minimum(ax - 0.07, wall - ax), np.minimum(y - apex, floor - y)) * 45)
    img = img - (0.4 - patient["habitus"]) * lung  # soft tissue over the lungs greys them

    # Ribs (posterior arcs), vessels fanning from the hila, clavicles, trachea.
    rib_phase = (y + 0.3 * ax - 0.5 * x * x) * DTYPE(2 * np.pi / 0.16)
    hilum = np.exp(np.square(ax - 0.15) * -8 - np.square(y + 0.05) * 6)
    markings = (0.05 * hilum + 0.015) * smooth(rng, n, 16) + 0.06 * hilum
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
        fluid = sigmoid((y - top) * 40) * lung * side
        img = img + (0.8 * min(1.0, 0.4 + effusion)) * fluid * (0.56 - img)

    if consolidation > 0:  # patchy opacity in one lung zone
        at_x, at_y = row["consolidation_at"]
        px, py = (1.0 if at_x > 0 else -1.0) * (0.3 + 0.12 * abs(at_x)), -0.15 + 0.3 * at_y
        blob = np.exp((np.square(x - px) + np.square(y - py)) * (-1 / (0.02 + 0.03 * min(consolidation, 1.5))))
        patch = sigmoid((smooth(rng, n, 10) + 0.6) * 3)
        img = img + (0.3 * min(consolidation, 1.2)) * blob * patch * lung

    if edema > 0:  # perihilar (butterfly) haze and a general loss of lung clarity
        haze = np.exp(np.square(ax - 0.16) * -20 - np.square(y + 0.02) * 11)
        img = img + min(edema, 1.5) * (0.09 * haze + 0.01) * lung
    return img
