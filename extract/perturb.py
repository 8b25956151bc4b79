"""Acquisition perturbations per imaging modality, applied to a decoded batch on the device.

In the spirit of MedMNIST-C: each modality gets the corruptions its acquisition can
produce, five severities each. All severity parameters live in one table
(``SEVERITY``; ``crs perturbations --table`` prints it, README shows it) and are written
into the store with each perturbed array.

Determinism: everything random (noise, stroke shapes, motion direction) is drawn on the
CPU from a generator seeded by (image id, condition), i.e. by image, family and
severity, then moved to the device. An image gets the same perturbation whatever batch,
position, process or device it lands in (the CUDA generators give other streams).

Images are float tensors [n, 3, H, W] in [0, 1], perturbed at their own resolution,
before the encoder's resize (the acquisition happens before the model sees the image).
Sizes in the table are fractions of the shorter side, so a severity means the same at
64 px and at 1024 px. Grey images (all channels equal, e.g. X-rays) get grey noise.
"""

from __future__ import annotations

import hashlib
import math
import warnings

import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from torchvision.io import decode_jpeg, encode_jpeg

from crs.conditions import perturbed

SEVERITIES = (1, 2, 3, 4, 5)

# family -> (parameter, values for severities 1..5, what the parameter means)
SEVERITY: dict[str, tuple[str, tuple[float, ...], str]] = {
    "gaussian_noise": ("sigma", (0.04, 0.08, 0.12, 0.18, 0.26), "std of additive noise on [0, 1]"),
    "speckle_noise": ("sigma", (0.08, 0.14, 0.22, 0.32, 0.45), "std of multiplicative noise: x + x * N(0, sigma)"),
    "impulse_noise": ("amount", (0.01, 0.025, 0.05, 0.09, 0.15), "fraction of pixels set to 0 or 1 (salt and pepper)"),
    "shot_noise": ("photons", (150.0, 70.0, 35.0, 18.0, 9.0), "Poisson photons at full intensity: Poisson(x * p) / p"),
    "gaussian_blur": ("sigma_fraction", (0.01, 0.015, 0.02, 0.03, 0.045), "blur sigma / shorter side"),
    "defocus_blur": ("radius_fraction", (0.012, 0.018, 0.026, 0.036, 0.048), "disc radius / shorter side"),
    "motion_blur": ("length_fraction", (0.03, 0.05, 0.07, 0.1, 0.14), "streak length / shorter side, random angle"),
    "zoom_blur": ("max_zoom", (1.04, 1.07, 1.1, 1.14, 1.2), "mean of zooms from 1 to this factor"),
    "brightness_up": ("delta", (0.06, 0.12, 0.18, 0.25, 0.33), "added to every pixel, then clipped"),
    "brightness_down": ("delta", (0.06, 0.12, 0.18, 0.25, 0.33), "subtracted from every pixel, then clipped"),
    "contrast_up": ("factor", (1.2, 1.4, 1.65, 1.95, 2.3), "distance from the image mean multiplied, clipped"),
    "contrast_down": ("factor", (0.75, 0.6, 0.45, 0.3, 0.2), "blend towards the image mean"),
    "gamma_up": ("gamma", (1.2, 1.4, 1.7, 2.0, 2.5), "x ** gamma (darker mid-tones)"),
    "gamma_down": ("gamma", (0.83, 0.71, 0.59, 0.5, 0.4), "x ** gamma (brighter mid-tones)"),
    "jpeg": ("quality", (80, 60, 40, 25, 10), "JPEG re-encoding quality"),
    "pixelate": ("scale", (0.55, 0.45, 0.35, 0.27, 0.2), "area-downsampled to this fraction, nearest upsampled"),
    "dark_corners": ("clear_radius", (0.95, 0.85, 0.75, 0.65, 0.55), "dermoscope vignette: clear disc radius / half diagonal"),
    "ink_marks": ("strokes", (1, 2, 3, 4, 6), "pen strokes drawn over the image (width 1.5% of the side)"),
}

# modality -> its families (MedMNIST-C in spirit; see README "Perturbation suites")
SUITES: dict[str, tuple[str, ...]] = {
    "dermatology": (
        "gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "defocus_blur", "motion_blur", "zoom_blur",
        "brightness_up", "brightness_down", "contrast_up", "contrast_down", "jpeg", "pixelate", "dark_corners",
        "ink_marks",
    ),
    "ophthalmology": (
        "pixelate", "jpeg", "gaussian_noise", "speckle_noise", "defocus_blur", "motion_blur", "brightness_down",
        "contrast_down",
    ),
    "radiology": (
        "pixelate", "jpeg", "gaussian_noise", "speckle_noise", "impulse_noise", "shot_noise", "gaussian_blur",
        "brightness_up", "brightness_down", "contrast_up", "contrast_down", "gamma_up", "gamma_down",
    ),
}
MODALITIES = tuple(SUITES)


def suite(modality: str) -> tuple[str, ...]:
    if modality not in SUITES:
        raise KeyError(f"unknown modality {modality!r}; valid: {', '.join(SUITES)}")
    return SUITES[modality]


def conditions(modality: str, severities: tuple[int, ...] = SEVERITIES) -> list[str]:
    """Every perturbed condition name of a modality's suite, e.g. 'gaussian_noise@3'."""
    for s in severities:
        if s not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {s!r}")
    return [perturbed(family, s) for family in suite(modality) for s in severities]


def parameters(family: str, severity: int) -> dict:
    if family not in SEVERITY:
        raise KeyError(f"unknown perturbation family {family!r}; valid: {', '.join(SEVERITY)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, not {severity!r}")
    name, values, _ = SEVERITY[family]
    return {"family": family, "severity": severity, name: values[severity - 1]}


def table_markdown() -> str:
    """The severity table as Markdown (README and ``crs perturbations --table``)."""
    lines = ["| family | parameter | 1 | 2 | 3 | 4 | 5 | meaning | suites |", "|" + " --- |" * 9]
    for family, (param, values, meaning) in SEVERITY.items():
        where = ", ".join(m for m, fams in SUITES.items() if family in fams)
        lines.append(f"| {family} | {param} | " + " | ".join(f"{v:g}" for v in values) + f" | {meaning} | {where} |")
    return "\n".join(lines)


def image_seed(image_id: str, condition: str) -> int:
    """A stable 63-bit seed for one image under one condition."""
    digest = hashlib.blake2b(f"{image_id}|{condition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _generators(image_ids: list[str], cond: str) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(image_seed(i, cond)) for i in image_ids]


def _grey(x: torch.Tensor) -> torch.Tensor:
    """[n] bool: images whose three channels are equal."""
    return (x.amax(1) - x.amin(1)).flatten(1).amax(1) < 1e-6


def _noise(x: torch.Tensor, gens: list[torch.Generator], draw) -> torch.Tensor:
    """Per-image noise of x's shape drawn on the CPU by ``draw(shape, generator)``; grey images get grey noise."""
    grey = _grey(x).tolist()
    c, h, w = x.shape[1:]
    out = [draw((1, h, w) if g_ else (c, h, w), gen).expand(c, h, w) for gen, g_ in zip(gens, grey)]
    return torch.stack(out).to(device=x.device, dtype=x.dtype)


def _conv_per_image(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Convolve each image [n, c, H, W] with its own kernel [n, k, k] (reflect padding)."""
    n, c, h, w = x.shape
    k = kernels.shape[-1]
    pad = k // 2
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect" if pad < min(h, w) else "replicate")
    weight = kernels.to(x.dtype).repeat_interleave(c, 0).unsqueeze(1)  # [n*c, 1, k, k]
    out = F.conv2d(xp.reshape(1, n * c, h + 2 * pad, w + 2 * pad), weight, groups=n * c)
    return out.reshape(n, c, h, w)


def _disc(radius: float) -> torch.Tensor:
    r = max(radius, 0.5)
    half = math.ceil(r)
    ax = torch.arange(-half, half + 1, dtype=torch.float32)
    dist = (ax[:, None] ** 2 + ax[None, :] ** 2).sqrt()
    k = (r + 0.5 - dist).clamp(0, 1)  # anti-aliased disc edge
    return k / k.sum()


def _line(length: float, angle: float) -> torch.Tensor:
    half = max(1, math.ceil(length / 2))
    ax = torch.arange(-half, half + 1, dtype=torch.float32)
    yy, xx = torch.meshgrid(ax, ax, indexing="ij")
    dx, dy = math.cos(angle), math.sin(angle)
    along = xx * dx + yy * dy
    across = (-xx * dy + yy * dx).abs()
    k = (1 - across).clamp(0, 1) * (along.abs() <= length / 2).float()
    return k / k.sum()


def _strokes(h: int, w: int, n_strokes: int, gen: torch.Generator) -> torch.Tensor:
    """[H, W] coverage in [0, 1] of ``n_strokes`` curved pen strokes (quadratic Bezier curves)."""
    side = min(h, w)
    width = 0.015 * max(h, w) / side  # in the unit square
    t = torch.linspace(0, 1, 24)[None, :, None]  # [1, 24, 1]
    p0, p1, p2 = torch.rand(3, int(n_strokes), 1, 2, generator=gen)  # each [K, 1, 2]
    p2 = p0 + (p2 - 0.5) * 0.6  # strokes a third of the image long on average
    p1 = (p0 + p2) / 2 + (p1 - 0.5) * 0.3  # some curvature
    pts = ((1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2).reshape(-1, 2)  # [K * 24, 2]
    ys, xs = torch.linspace(0, 1, h), torch.linspace(0, 1, w)
    # coverage falls with the distance to the nearest stroke point: one min over all strokes
    d2 = (ys[:, None, None] - pts[:, 1]) ** 2 + (xs[None, :, None] - pts[:, 0]) ** 2  # [H, W, K * 24]
    d = d2.amin(-1).sqrt()
    return ((width - d) * side + 0.5).clamp(0, 1)


def apply(x: torch.Tensor, family: str, severity: int, image_ids: list[str]) -> torch.Tensor:
    """Perturb a batch [n, 3, H, W] in [0, 1]; returns a new tensor in [0, 1]."""
    p = parameters(family, severity)
    value = p[SEVERITY[family][0]]
    cond = perturbed(family, severity)
    n, c, h, w = x.shape
    side = min(h, w)
    if family == "gaussian_noise":
        noise = _noise(x, _generators(image_ids, cond), lambda s, g: torch.randn(s, generator=g))
        return (x + value * noise).clamp(0, 1)
    if family == "speckle_noise":
        noise = _noise(x, _generators(image_ids, cond), lambda s, g: torch.randn(s, generator=g))
        return (x + x * value * noise).clamp(0, 1)
    if family == "impulse_noise":
        u = _noise(x, _generators(image_ids, cond), lambda s, g: torch.rand(s, generator=g))
        y = torch.where(u < value / 2, torch.zeros_like(x), x)
        return torch.where(u > 1 - value / 2, torch.ones_like(x), y)
    if family == "shot_noise":
        gens = _generators(image_ids, cond)
        grey = _grey(x).tolist()
        xc = x.detach().to("cpu", torch.float32)
        out = []
        for img, gen, g_ in zip(xc, gens, grey):
            src = img[:1] if g_ else img
            out.append((torch.poisson(src * value, generator=gen) / value).expand(c, h, w))
        return torch.stack(out).to(device=x.device, dtype=x.dtype).clamp(0, 1)
    if family == "gaussian_blur":
        sigma = value * side
        k = 2 * math.ceil(3 * sigma) + 1
        return TF.gaussian_blur(x, kernel_size=[k, k], sigma=[sigma, sigma]).clamp(0, 1)
    if family == "defocus_blur":
        kernel = _disc(value * side)
        return _conv_per_image(x, kernel.expand(n, *kernel.shape).to(x.device)).clamp(0, 1)
    if family == "motion_blur":
        angles = [float(torch.rand(1, generator=g)) * math.pi for g in _generators(image_ids, cond)]
        length = max(value * side, 1.0)
        kernels = [_line(length, a) for a in angles]
        size = max(k.shape[-1] for k in kernels)
        kernels = torch.stack([F.pad(k, [(size - k.shape[-1]) // 2] * 4) for k in kernels])
        return _conv_per_image(x, kernels.to(x.device)).clamp(0, 1)
    if family == "zoom_blur":
        acc = x.clone()
        zooms = torch.linspace(1, value, 6)[1:].tolist()
        for z in zooms:
            zh, zw = max(h, round(h * z)), max(w, round(w * z))
            big = F.interpolate(x, size=(zh, zw), mode="bilinear", align_corners=False, antialias=False)
            top, left = (zh - h) // 2, (zw - w) // 2
            acc += big[..., top : top + h, left : left + w]
        return (acc / (len(zooms) + 1)).clamp(0, 1)
    if family == "brightness_up":
        return (x + value).clamp(0, 1)
    if family == "brightness_down":
        return (x - value).clamp(0, 1)
    if family in ("contrast_up", "contrast_down"):
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return ((x - mean) * value + mean).clamp(0, 1)
    if family in ("gamma_up", "gamma_down"):
        return x.clamp(0, 1).pow(value)
    if family == "jpeg":
        as_uint8 = (x * 255).round().clamp(0, 255).to(torch.uint8)
        with warnings.catch_warnings():
            # torchvision 0.29 marks its JPEG codec deprecated in favour of torchcodec, which
            # has no on-device encoder yet; the codec works, so keep the notice out of every run
            warnings.simplefilter("ignore", DeprecationWarning)
            # encode on the CPU (decode_jpeg takes CPU bytes only), decode on the device
            encoded = encode_jpeg(list(as_uint8.cpu()), quality=int(value))
            decoded = decode_jpeg(encoded, device=x.device)
        return torch.stack(list(decoded)).to(x.dtype).div(255)
    if family == "pixelate":
        small = (max(1, round(h * value)), max(1, round(w * value)))
        return F.interpolate(F.interpolate(x, size=small, mode="area"), size=(h, w), mode="nearest")
    if family == "dark_corners":
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, h, device=x.device), torch.linspace(-1, 1, w, device=x.device),
                                indexing="ij")
        r = (xx**2 + yy**2).sqrt() / math.sqrt(2)  # 1 at the corners
        fade = 0.12
        keep = (1 - (r - value) / fade).clamp(0, 1)
        keep = keep * keep * (3 - 2 * keep)  # smooth edge of the dermoscope's field
        return x * keep.to(x.dtype)
    if family == "ink_marks":
        gens = _generators(image_ids, cond)
        cover = torch.stack([_strokes(h, w, value, g) for g in gens]).unsqueeze(1).to(x.device, x.dtype)
        ink = torch.tensor([0.22, 0.12, 0.42], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)  # surgical marker
        return x * (1 - 0.9 * cover) + ink * 0.9 * cover
    raise KeyError(family)


def grid(image: torch.Tensor, image_id: str, modality: str, cell: int = 128):
    """A PIL image: the clean image and every family of the suite at every severity (rows = families)."""
    from PIL import Image, ImageDraw

    families = suite(modality)
    x = image.unsqueeze(0)  # [1, 3, H, W] in [0, 1]
    label_w, head_h = 130, 20
    canvas = Image.new("RGB", (label_w + cell * 6, head_h + cell * len(families)), "white")
    draw = ImageDraw.Draw(canvas)
    for j, title in enumerate(["clean"] + [f"severity {s}" for s in SEVERITIES]):
        draw.text((label_w + j * cell + 4, 4), title, fill="black")

    def paste(t: torch.Tensor, row: int, col: int) -> None:
        t = F.interpolate(t, size=(cell, cell), mode="nearest" if t.shape[-1] < cell else "bilinear",
                          antialias=t.shape[-1] > cell)
        arr = (t[0].clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
        canvas.paste(Image.fromarray(arr), (label_w + col * cell, head_h + row * cell))

    for i, family in enumerate(families):
        draw.text((4, head_h + i * cell + cell // 2 - 6), family, fill="black")
        paste(x, i, 0)
        for s in SEVERITIES:
            paste(apply(x, family, s, [image_id]), i, s)
    return canvas
