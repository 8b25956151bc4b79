"""Image decoding for the file-based datasets: every mode to 8-bit RGB, the resize rule, and
ImageError for files that cannot be read."""

import pickle

import numpy as np
import pytest
from PIL import Image

from crs.extract.images import ImageError, decode


def test_resize_is_shorter_side_then_centre_crop(tmp_path):
    a = np.zeros((10, 30, 3), np.uint8)
    a[:, :10] = (255, 0, 0)
    a[:, 10:20] = (0, 255, 0)
    a[:, 20:] = (0, 0, 255)
    Image.fromarray(a).save(tmp_path / "stripes.png")
    out = decode(tmp_path / "stripes.png", 10)  # shorter side already 10: only the crop acts
    assert out.shape == (10, 10, 3) and out.dtype == np.uint8
    assert (out == (0, 255, 0)).all()
    up = decode(tmp_path / "stripes.png", 20)  # 10 x 30 -> 20 x 60, centre 20 columns of 60: green
    assert up.shape == (20, 20, 3)
    assert np.abs(up[:, 3:-3].astype(int) - (0, 255, 0)).max() <= 2


@pytest.mark.parametrize("mode", ["L", "1", "P", "CMYK", "RGBA", "LA", "I;16", "I", "F"])
def test_every_mode_becomes_8bit_rgb(tmp_path, mode):
    rng = np.random.default_rng(0)
    base = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8), "RGB")
    if mode in ("I;16", "I"):
        im = Image.fromarray((np.arange(12 * 16).reshape(12, 16) * 300).astype(np.uint16))
        im = im if mode == "I;16" else im.convert("I")
    elif mode == "F":
        im = Image.fromarray(np.linspace(-1, 1, 12 * 16, dtype=np.float32).reshape(12, 16), "F")
    else:
        im = base.convert(mode)
    path = tmp_path / ("x.tiff" if mode in ("CMYK", "F", "I") else "x.png")
    im.save(path)
    out = decode(path, 8)
    assert out.shape == (8, 8, 3) and out.dtype == np.uint8


def test_sixteen_bit_maps_full_range_to_255(tmp_path):
    im = Image.fromarray(np.full((8, 8), 65535, np.uint16))
    im.save(tmp_path / "w.png")
    assert (decode(tmp_path / "w.png", 8) == 255).all()
    Image.fromarray(np.full((8, 8), 257 * 100, np.uint16)).save(tmp_path / "g.png")
    assert (decode(tmp_path / "g.png", 8) == 100).all()


def test_alpha_is_composited_onto_black(tmp_path):
    a = np.zeros((8, 8, 4), np.uint8)
    a[..., :3] = 200
    a[..., 3] = 0
    a[:, 4:, 3] = 255
    Image.fromarray(a, "RGBA").save(tmp_path / "a.png")
    out = decode(tmp_path / "a.png", 8)
    assert (out[:, :3] == 0).all() and (out[:, 5:] == 200).all()


def test_grayscale_jpeg_is_repeated_over_channels(tmp_path):
    Image.fromarray(np.full((40, 40), 90, np.uint8), "L").save(tmp_path / "g.jpg")
    out = decode(tmp_path / "g.jpg", 16)
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    assert abs(int(out.mean()) - 90) <= 2


def _truncated_jpeg(path):
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path, quality=95)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["empty", "truncated", "text", "missing"])
def test_unreadable_files_raise_image_error_naming_the_path(tmp_path, kind):
    path = tmp_path / "bad.jpg"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        _truncated_jpeg(path)
    elif kind == "text":
        path.write_text("id,label\n1,2\n")
    with pytest.raises(ImageError) as e:
        decode(path, 16)
    assert e.value.path == str(path) and str(path) in str(e.value)
    if kind == "empty":
        assert "empty" in e.value.reason
    back = pickle.loads(pickle.dumps(e.value))
    assert (back.path, back.reason) == (e.value.path, e.value.reason)


def test_non_regular_files_are_refused_without_waiting(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.png")  # opening it would block until a writer comes
    (tmp_path / "folder.png").mkdir()
    for name, kind in (("pipe.png", "a FIFO"), ("folder.png", "a folder")):
        with pytest.raises(ImageError, match=f"is {kind}; expected an image file"):
            decode(tmp_path / name, 16)


def test_a_one_pixel_tall_image_decodes_within_a_fixed_memory_bound(tmp_path):
    """A 2000 x 1 PNG (under 100 bytes) resized shorter side first would be 1,024,000 x 512 pixels
    (1.5 GB); measured in a fresh process, the decode's peak memory stays small."""
    import subprocess
    import sys

    path = tmp_path / "thin.png"
    Image.fromarray(np.full((1, 2000, 3), 200, np.uint8)).save(path, optimize=True)
    assert path.stat().st_size < 200
    code = ("import resource, numpy as np\nfrom crs.extract.images import decode\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"out = decode({str(path)!r}, 512)\n"
            "assert out.shape == (512, 512, 3) and (out == 200).all(), out.mean()\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 100  # MB of peak growth (1500 before the bound)


def test_the_bounded_path_is_the_same_rule(tmp_path, monkeypatch):
    from crs.extract import images

    rng = np.random.default_rng(1)
    for h, w in ((40, 90), (90, 40), (7, 300)):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{h}x{w}.png")
    plain = {p.name: decode(p, 24).astype(int) for p in tmp_path.glob("*.png")}
    monkeypatch.setattr(images, "MAX_RESIZED", 0)  # every image through the crop-only resample
    for p in tmp_path.glob("*.png"):
        bounded = decode(p, 24).astype(int)
        assert np.abs(bounded - plain[p.name]).mean() < 1.0 and np.abs(bounded - plain[p.name]).max() <= 32, p.name


def test_an_image_over_the_pixel_limit_is_refused_before_decoding(tmp_path, monkeypatch):
    from crs.extract import images

    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(tmp_path / "big.png")
    monkeypatch.setattr(images, "MAX_PIXELS", 1000)
    with pytest.raises(ImageError, match="40 x 30 pixels, more than the 1,000"):
        decode(tmp_path / "big.png", 16)
