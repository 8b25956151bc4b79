"""Zoom blur's fast form (only the rows and columns up to the centre crop are resampled) against the
plain definition (the full bilinear resample of every zoom, then its centre crop): equal
bit for bit on the CPU, as the kernel computes each kept pixel from the same samples and weights."""

import pytest
import torch
import torch.nn.functional as F

from crs.extract import image_ops, perturb


def zoom_blur_reference(x: torch.Tensor, max_zoom: float) -> torch.Tensor:
    """The slow, obvious definition: mean of x and its 5 zooms, each resampled in full."""
    h, w = x.shape[-2:]
    acc = x.clone()
    zooms = torch.linspace(1, max_zoom, 6)[1:].tolist()
    for z in zooms:
        zh, zw = max(h, round(h * z)), max(w, round(w * z))
        big = F.interpolate(x, size=(zh, zw), mode="bilinear", align_corners=False, antialias=False)
        top, left = (zh - h) // 2, (zw - w) // 2
        acc += big[..., top : top + h, left : left + w]
    return (acc / (len(zooms) + 1)).clamp(0, 1)


# square, portrait, odd sides, tiny sides where a zoom adds one pixel or none to a side (the kernel skips a
# side whose output length is the input's), and a working-size image
SHAPES = [(2, 3, 32, 32), (1, 3, 45, 31), (2, 3, 7, 5), (1, 3, 3, 3), (1, 3, 11, 4), (1, 3, 512, 384)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_zoom_blur_equals_its_definition(shape, severity):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(severity))
    ids = [f"i{k}" for k in range(shape[0])]
    max_zoom = perturb.parameters("zoom_blur", severity)["max_zoom"]
    fast = perturb.apply(x, "zoom_blur", severity, ids)
    assert torch.equal(fast, zoom_blur_reference(x, max_zoom))  # bit for bit: the same samples, the same sums
    assert torch.equal(x, torch.rand(shape, generator=torch.Generator().manual_seed(severity)))  # input untouched


def test_the_partial_resample_is_the_full_one_cut():
    # every output size from the input's (the copy case) up to the full zoom, both sides
    x = torch.rand(1, 3, 13, 9, generator=torch.Generator().manual_seed(0))
    full = F.interpolate(x, size=(17, 12), mode="bilinear", align_corners=False, antialias=False)
    for rows in range(13, 18):
        for cols in range(9, 13):
            part = image_ops.zoom_rows_cols(x, (17, 12), (rows, cols))
            assert torch.equal(part[..., :13, :9], full[..., :13, :9])
            if rows > 13 and cols > 9:  # a side as long as the input's is resampled in full
                assert part.shape[-2:] == (rows, cols)
