"""Decoding image files as the datasets ship them into uint8 RGB squares.

One rule for every file-based dataset: decode, convert to 8-bit RGB, resize so that the
shorter side is ``size`` pixels (bicubic, antialiased when shrinking), then crop the
centre ``size`` x ``size``. With ``upscale=False`` (what extraction uses) an image whose
shorter side is below ``size`` is not enlarged: it keeps its shorter side ``s`` and gives its
centre ``s`` x ``s``; perturbations then run at that working size, and the encoder's own
resize brings it to its input size. Conversions: grayscale and bilevel to RGB by repeating the
channel; palette, CMYK and YCbCr through PIL's own conversion; 16-bit (``I;16*``, and
``I`` as PIL opens 16-bit PNGs) divided by 257 so that 65535 maps to 255; floating-point
(``F``) stretched from its minimum to its maximum; an alpha channel (RGBA, LA, palette with
transparency) composited onto black. EXIF orientation is not applied.

A file that cannot be decoded (missing, zero bytes, truncated, not an image, not a regular
file such as a FIFO, or more than ``MAX_PIXELS`` pixels) raises ``ImageError(path, reason)``;
nothing is guessed or padded. Memory stays bounded whatever the aspect ratio: where the
resized image would exceed ``MAX_RESIZED`` pixels (a 2000 x 1 image would become 1,024,000
x 512), only the source region that the centre crop keeps is resampled (PIL's
``resize(box=...)``, the same filter at the same scale, equal to resize-then-crop up to
the rounding of the filter's fixed-point taps); ordinary images take the plain path.
"""

from __future__ import annotations

import os
import stat

import numpy as np
from PIL import Image

from crs.foundations.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MAX_RESIZED = 1 << 24  # pixels of the shorter-side-resized image above which only the crop is resampled
MAX_PIXELS = 1 << 28  # ~268 million (16384 x 16384): larger files are refused before their pixels are decoded


class ImageError(UserError, ValueError):
    """An image file that cannot be read; ``path`` names it and ``reason`` says why."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot read image {self.path}: {reason}")

    def __reduce__(self):  # picklable with its two arguments (DataLoader workers send it back)
        return (type(self), (self.path, self.reason))


def to_rgb8(im: Image.Image) -> Image.Image:
    """Any PIL image as an 8-bit RGB image (the conversions in the module docstring)."""
    mode = im.mode
    if mode == "RGB":
        return im
    if mode.startswith("I;16") or mode == "I":
        a = np.asarray(im).astype(np.float64)
        a = np.clip(np.rint(a / 257.0), 0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(a[..., None], 3, axis=-1), "RGB")
    if mode == "F":
        a = np.asarray(im, dtype=np.float64)
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
        a = np.zeros_like(a) if hi <= lo else (a - lo) / (hi - lo) * 255.0
        a = np.clip(np.rint(np.nan_to_num(a)), 0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(a[..., None], 3, axis=-1), "RGB")
    if mode in ("RGBA", "LA", "PA", "La", "RGBa") or (mode == "P" and "transparency" in im.info):
        rgba = np.asarray(im.convert("RGBA"), dtype=np.float64)
        rgb = rgba[..., :3] * (rgba[..., 3:] / 255.0)  # onto black
        return Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8), "RGB")
    return im.convert("RGB")  # L, 1, P, CMYK, YCbCr, LAB, HSV


def resize_centre_crop(im: Image.Image, size: int) -> Image.Image:
    """Shorter side to ``size`` (bicubic), then the centre ``size`` x ``size``.

    Past ``MAX_RESIZED`` pixels the resized image is not built: the crop window (``left``,
    ``top`` in resized pixels) is mapped back into the source (x * w / nw) and only that box
    is resampled to ``size`` x ``size`` at the scale of the whole resize."""
    w, h = im.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    left, top = (nw - size) // 2, (nh - size) // 2
    if nw * nh > MAX_RESIZED:
        box = (left * w / nw, top * h / nh, (left + size) * w / nw, (top + size) * h / nh)
        return im.resize((size, size), Image.Resampling.BICUBIC, box=box)
    if (nw, nh) != (w, h):
        im = im.resize((nw, nh), Image.Resampling.BICUBIC)
    return im.crop((left, top, left + size, top + size))


def working_size(w: int, h: int, size: int) -> int:
    """The side an image of ``w`` x ``h`` pixels is decoded to without upscaling: min(size, shorter side)."""
    return max(1, min(size, w, h))


def check_regular(path: str | os.PathLike) -> None:
    """ImageError unless ``path`` is a regular file (a FIFO would block the reader, a folder or a
    device is no image); ``stat`` does not open the file, so it never waits."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ImageError(path, "no such file") from None
    except OSError as exc:
        raise ImageError(path, f"cannot be opened ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise ImageError(path, f"is {kind}; expected an image file (JPEG or PNG)")


def decode(path: str | os.PathLike, size: int, upscale: bool = True) -> np.ndarray:
    """uint8 [size, size, 3]: the image at ``path`` by the rule in the module docstring; with
    ``upscale=False``, uint8 [s, s, 3] where s = min(size, the image's shorter side)."""
    check_regular(path)
    try:
        with Image.open(path) as im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                raise ImageError(path, f"{w} x {h} pixels, more than the {MAX_PIXELS:,} decoded at most; "
                                       "expected an image of ordinary size (resize it, or leave it out of the CSV)")
            if not upscale:
                size = working_size(w, h, size)
            if im.format == "JPEG":
                im.draft(im.mode, (size, size))  # decode at a reduced scale, still >= size on both sides
            im.load()
            rgb = to_rgb8(im)
            out = np.asarray(resize_centre_crop(rgb, size), dtype=np.uint8)
    except FileNotFoundError:
        raise ImageError(path, "no such file") from None
    except ImageError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError...
        reason = str(exc) or type(exc).__name__
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            reason = "the file is empty (0 bytes)"
        raise ImageError(path, reason) from exc
    if out.shape != (size, size, 3):  # pragma: no cover - a guard on the rule above
        raise ImageError(path, f"decoded to shape {out.shape}, expected {(size, size, 3)}")
    return out
