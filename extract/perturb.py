"""Acquisition perturbations, applied to a decoded batch on the extraction device.

Every family has five severities; the parameters are data (``SUITE``) and are written
into the store with each perturbed array. Random perturbations draw from a generator
seeded per image from (image id, condition), so an image always gets the same
perturbation, whatever batch or machine it lands in.

Images are float tensors [n, 3, H, W] in [0, 1], perturbed at their own resolution,
before the encoder's resize (the acquisition happens before the model sees the image).
"""

from __future__ import annotations

import hashlib
import math
import warnings

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.io import decode_jpeg, encode_jpeg

from crs.conditions import perturbed

# family -> (parameter name, values for severities 1..5)
SUITE: dict[str, tuple[str, tuple[float, ...]]] = {
    "gaussian_noise": ("sigma", (0.04, 0.08, 0.12, 0.18, 0.26)),  # std of additive noise on [0, 1]
    "gaussian_blur": ("sigma_fraction", (0.01, 0.015, 0.02, 0.03, 0.045)),  # sigma / shorter side
    "contrast": ("factor", (0.75, 0.6, 0.45, 0.3, 0.2)),  # blend towards the image mean
    "brightness": ("delta", (0.1, 0.2, 0.3, 0.4, 0.5)),  # added to every pixel, then clipped
    "jpeg": ("quality", (80, 60, 40, 25, 10)),  # JPEG re-encoding quality
}
SEVERITIES = (1, 2, 3, 4, 5)


def conditions() -> list[str]:
    """Every perturbed condition name of the suite, e.g. 'gaussian_noise@3'."""
    return [perturbed(family, s) for family in SUITE for s in SEVERITIES]


def parameters(family: str, severity: int) -> dict:
    if family not in SUITE:
        raise KeyError(f"unknown perturbation family {family!r}; valid: {', '.join(SUITE)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, not {severity!r}")
    name, values = SUITE[family]
    return {"family": family, "severity": severity, name: values[severity - 1]}


def image_seed(image_id: str, condition: str) -> int:
    """A stable 63-bit seed for one image under one condition."""
    digest = hashlib.blake2b(f"{image_id}|{condition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def apply(x: torch.Tensor, family: str, severity: int, image_ids: list[str]) -> torch.Tensor:
    """Perturb a batch [n, 3, H, W] in [0, 1]; returns a new tensor in [0, 1]."""
    p = parameters(family, severity)
    cond = perturbed(family, severity)
    if family == "gaussian_noise":
        # drawn on the CPU: CUDA generators give other streams for the same seed, and an
        # image must get the same noise on every device (and a resumed run may change device)
        noise = torch.stack([
            torch.randn(x.shape[1:], generator=torch.Generator().manual_seed(image_seed(image_id, cond)))
            for image_id in image_ids
        ])
        return (x + p["sigma"] * noise.to(device=x.device, dtype=x.dtype)).clamp(0, 1)
    if family == "gaussian_blur":
        sigma = p["sigma_fraction"] * min(x.shape[-2:])
        k = 2 * math.ceil(3 * sigma) + 1
        return TF.gaussian_blur(x, kernel_size=[k, k], sigma=[sigma, sigma]).clamp(0, 1)
    if family == "contrast":
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return ((x - mean) * p["factor"] + mean).clamp(0, 1)
    if family == "brightness":
        return (x + p["delta"]).clamp(0, 1)
    if family == "jpeg":
        as_uint8 = (x * 255).round().clamp(0, 255).to(torch.uint8)
        with warnings.catch_warnings():
            # torchvision 0.29 marks its JPEG codec deprecated in favour of torchcodec, which
            # has no on-device encoder yet; the codec works, so keep the notice out of every run
            warnings.simplefilter("ignore", DeprecationWarning)
            # encode on the CPU (decode_jpeg takes CPU bytes only), decode on the device
            encoded = encode_jpeg(list(as_uint8.cpu()), quality=int(p["quality"]))
            decoded = decode_jpeg(encoded, device=x.device)
        return torch.stack(list(decoded)).to(x.dtype).div(255)
    raise KeyError(family)
