"""demo_fundus: colour-fundus-photograph-like eyes, diabetic-retinopathy grade 0-4 (groups, labels,
rendering)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from crs.extract.synthetic.draw import (
    arc_mass,
    blur,
    choice,
    float32_params,
    grid,
    pixel_noise,
    rgb,
    sigmoid,
    smooth,
    spots,
    strokes,
)

FUNDUS_CLASSES = ("grade_0", "grade_1", "grade_2", "grade_3", "grade_4")
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


def fundus_group(rng: np.random.Generator) -> dict:
    grade = choice(rng, np.cumsum(_FUNDUS_PRIOR))
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
    return float32_params({
        "label": grade,
        "burden": np.exp(rng.normal(0.0, _FUNDUS_BURDEN)),
        "colour": np.array([0.85, 0.38, 0.14]) * np.exp(rng.normal(0.0, [0.06, 0.1, 0.2])),
        "right_eye_first": bool(rng.random() < 0.5),
        "vessel_toward": toward,  # towards the macula
        "vessel_up": up,
        "vessel_mass": arc_mass(toward, up, width * (1.2 - 0.6 * rho)),
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


def render_fundus(n: int, patient: dict, row: dict, rng: np.random.Generator) -> np.ndarray:
    """Fundus-photograph-like: an orange-red retina on black, optic disc, macula, vessels.

    Label signal: the number and size of red dots (microaneurysms), dark red blots
    (haemorrhages), yellow specks round the macula (hard exudates) and pale fluffy
    patches (cotton-wool spots) rise with the grade; grade 4 adds a tangle of new vessels
    at the disc. Counts are Poisson around a per-patient burden, so adjacent grades
    overlap. Nuisances: which eye, field of view, pigmentation, exposure, defocus.
    """
    X, Y = grid(n)
    grade = patient["label"]
    e = rng.standard_normal(8).tolist()
    side = 1.0 if (row["k"] == 0) == patient["right_eye_first"] else -1.0  # disc at +x: a right eye
    cx, cy, radius = 0.03 * e[0], 0.03 * e[1], float(rng.uniform(0.84, 1.0))
    x, y = (X - cx) / radius, (Y - cy) / radius  # the retina is the unit disc
    r2 = x * x + y * y
    inside = sigmoid((1 - np.sqrt(r2)) * (n * radius / 1.5))

    colour = rgb(*patient["colour"] * np.exp(0.05 * np.array(e[2:5])))
    img = colour * ((1 - 0.45 * r2) * (1 + 0.05 * smooth(rng, n, 8)))

    # Optic disc (bright, with a brighter cup) and macula (dark).
    dx, dy = side * 0.5 + 0.04 * e[5], 0.05 * e[6]
    pd2 = np.square(x - dx) + np.square(y - dy)
    disc = np.exp(pd2 * pd2 * -4750) * 0.9
    img = img + disc * (rgb(1.0, 0.86, 0.55) - img) + 0.15 * np.exp(pd2 * -400)
    mx, my = dx - side * 0.55, dy + 0.06
    img = img * (1 - 0.3 * np.exp((np.square(x - mx) + np.square(y - my)) * -33))
    eye = _Eye(cx, cy, radius, dx, dy, mx, my, side)

    # Vessels, whose veins dilate with the grade (drawn per patient, posed per image).
    vx = cx + radius * (dx - side * patient["vessel_toward"])
    vy = cy + radius * (dy + patient["vessel_up"])
    vessel = np.clip(strokes(n, vx, vy, patient["vessel_mass"] * radius, 0.55 * n / 64), 0, 1)
    img = img * (1 - 0.55 * vessel * rgb(0.35, 1.0, 1.0))
    img = _fundus_proliferative(img, n, grade, patient, eye, rng)
    img = _fundus_lesions(img, n, grade, patient["burden"], math.exp(0.2 * e[7]), eye, rng)

    # Acquisition: exposure, defocus, the camera's circular field.
    img = img * math.exp(0.06 * rng.standard_normal())
    sigma = float(rng.uniform(0.3, 1.2)) * n / 64
    if sigma > 0.55:
        img = blur(img, sigma)
    return (img + 0.01 * pixel_noise(rng, n)) * inside


def _fundus_proliferative(img: np.ndarray, n: int, grade: int, patient: dict, eye: _Eye,
                          rng: np.random.Generator) -> np.ndarray:
    """New vessels at the disc (grades with a neovascular strength) and, at grade 4, a
    preretinal haemorrhage."""
    neo = float(_FUNDUS_LESIONS[grade, 4]) * patient["burden"] ** 0.5
    if neo > 0.01 and rng.random() < 0.9:  # new vessels: a few tangled loops by the disc
        steps = rng.normal(0.0, 0.9, (4, 40)).cumsum(axis=1)
        rho = 0.1 + 0.3 * np.abs(np.sin(np.linspace(0, 3 * np.pi, 40) + rng.uniform(0, 6, (4, 1))))
        tx, ty = eye.polar(rho, rng.uniform(-np.pi, np.pi, (4, 1)) + 0.35 * steps)
        tangle = np.clip(strokes(n, tx, ty, arc_mass(tx, ty, 1.0), 0.45 * n / 64), 0, 1)
        img = img * (1 - min(0.8, 0.7 * neo) * tangle * rgb(0.25, 1.0, 1.0))
    if grade == 4 and rng.random() < 0.5:  # a preretinal haemorrhage: a large dark boat
        hx, hy = eye.polar(rng.uniform(0.3, 0.9, 1), rng.uniform(-np.pi, np.pi, 1))
        blot = spots(n, np.array([hx[0] - 0.03, hx[0] + 0.03]), hy, np.array([0.8, 0.8]), np.full(2, 0.09))
        img = img * (1 - np.clip(blot, 0, 0.85) * rgb(0.5, 0.9, 0.9))
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
        dark = np.clip(spots(n, sx[red], sy[red], weight[red], size[red]), 0, 0.9)
        img = img * (1 - dark * rgb(0.35, 0.8, 0.8))
    if not red.all():
        pale = np.clip(spots(n, sx[~red], sy[~red], weight[~red], size[~red]), 0, 1)
        img = img + pale * (rgb(0.95, 0.85, 0.45) - img)
    return img
