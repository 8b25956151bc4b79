"""Perturbations that keep up: the fast convolutions equal the direct ones they replace; one
extraction with several encoders decodes and perturbs each (chunk, condition) once and writes what
separate runs write; small images are perturbed at their own size; the store records the tool,
the weights and the measured cost, and a run with nothing to do keeps the content digest."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from PIL import Image

from crs.extract import image_ops, perturb, units
from crs.extract.images import decode
from crs.extract.options import ExtractOptions
from crs.extract.run import extract, extract_many
from crs.extract.table import Table
from crs.store import Store


def _encoders():
    """Two cheap encoders: demo-stats, and the same builtin under a second name (other store arrays)."""
    import dataclasses

    from crs.extract import encoders

    spec = encoders.get("demo-stats")
    return [spec, dataclasses.replace(spec, name="demo-stats-2")]


ENCODERS = ["demo-stats", "demo-stats-2"]


# ------------------------------------------------------------- the slow references (the former implementations)
def direct_conv(x, kernels):
    """Each image [n, c, H, W] with its own kernel [n, k, k] as one grouped conv2d (reflect padding)."""
    n, c, h, w = x.shape
    k = kernels.shape[-1]
    pad = k // 2
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect" if pad < min(h, w) else "replicate")
    weight = kernels.to(x.dtype).repeat_interleave(c, 0).unsqueeze(1)
    return F.conv2d(xp.reshape(1, n * c, h + 2 * pad, w + 2 * pad), weight, groups=n * c).reshape(n, c, h, w)


def reference(x, family, severity, ids):
    """The perturbation as computed before the fast forms: torchvision's 2-D Gaussian blur, direct
    convolutions for defocus and motion blur, and every stroke point's distance to every pixel for ink."""
    p = perturb.parameters(family, severity)
    value = p[perturb.FAMILIES[family].parameter]
    seeds = perturb.Seeds(ids, f"{family}@{severity}")
    side = min(x.shape[-2:])
    if family == "gaussian_blur":
        sigma = value * side
        k = 2 * math.ceil(3 * sigma) + 1
        return TF.gaussian_blur(x, kernel_size=[k, k], sigma=[sigma, sigma]).clamp(0, 1)
    if family == "defocus_blur":
        kernel = image_ops.disc(value * side, x.device)
        return direct_conv(x, kernel.expand(len(x), *kernel.shape)).clamp(0, 1)
    if family == "motion_blur":
        angles = seeds.uniform(x.device, 1)[:, 0] * math.pi
        return direct_conv(x, image_ops.lines(max(value * side, 1.0), angles)).clamp(0, 1)
    assert family == "ink_marks"
    h, w = x.shape[-2:]
    covers = []
    for u in seeds.uniform(x.device, 6 * int(value)):
        width = 0.015 * max(h, w) / side
        t = torch.linspace(0, 1, 24)[None, :, None]
        p0, p1, p2 = u.view(3, int(value), 1, 2)
        p2 = p0 + (p2 - 0.5) * 0.6
        p1 = (p0 + p2) / 2 + (p1 - 0.5) * 0.3
        pts = ((1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2).reshape(-1, 2)
        ys, xs = torch.linspace(0, 1, h), torch.linspace(0, 1, w)
        d = ((ys[:, None, None] - pts[:, 1]) ** 2 + (xs[None, :, None] - pts[:, 0]) ** 2).amin(-1).sqrt()
        covers.append(((width - d) * side + 0.5).clamp(0, 1))
    cover = torch.stack(covers).unsqueeze(1)
    ink = torch.tensor([0.22, 0.12, 0.42]).view(1, 3, 1, 1)
    return x * (1 - 0.9 * cover) + ink * 0.9 * cover


@pytest.mark.parametrize("family", ["gaussian_blur", "defocus_blur", "motion_blur", "ink_marks"])
@pytest.mark.parametrize("shape", [(96, 96), (33, 50)])
def test_fast_forms_equal_the_direct_convolutions(family, shape):
    """FFT / separable / windowed forms against the former direct ones, every severity: kernels of 3 to 27
    pixels at 96 px (direct and FFT paths), square and not. Tolerance 2e-5 on [0, 1] (float32 rounding, far
    below 1/255)."""
    x = torch.rand(2, 3, *shape, generator=torch.Generator().manual_seed(1))
    ids = ["a", "b"]
    for s in perturb.SEVERITIES:
        got, want = perturb.apply(x, family, s, ids), reference(x, family, s, ids)
        assert got.shape == want.shape
        err = (got - want).abs().max().item()
        assert err < 2e-5, (family, s, shape, err)
        if family == "ink_marks":
            assert err == 0  # the same float operations per pixel: identical


# ------------------------------------------------------------- one extraction, several encoders
def _count_calls(monkeypatch):
    calls = {"apply": [], "decode": []}
    apply, getitem = perturb.apply, units.DecodedUnits.__getitem__

    def counted_apply(x, family, severity, ids):
        calls["apply"].append((f"{family}@{severity}", tuple(ids)))
        return apply(x, family, severity, ids)

    def counted_getitem(self, j):
        calls["decode"].append(j)
        return getitem(self, j)

    monkeypatch.setattr(perturb, "apply", counted_apply)
    monkeypatch.setattr(units.DecodedUnits, "__getitem__", counted_getitem)
    return calls


def test_several_encoders_decode_and_perturb_once_write_what_one_writes_and_resume_apart(tmp_path, monkeypatch):
    """Two encoders (the same builtin under two names) in one call: each unit decoded once, each (chunk,
    condition) perturbed once, and both write what one encoder's own run writes. Then one encoder done
    and the other with one damaged (clean) chunk: only that unit is decoded, only the second encoder
    embeds, and the done encoder's arrays (and digest) stay as they were."""
    kw = dict(size=0.05, chunk=16, severities=(2,))
    alone = Store(str(tmp_path / "alone.zarr"))
    extract(alone, _encoders()[0], "demo_fundus", **kw)
    calls = _count_calls(monkeypatch)
    store = Store(str(tmp_path / "together.zarr"))
    runs = extract_many(store, _encoders(), "demo_fundus", ExtractOptions(**kw))
    assert [r.encoder for r in runs] == ENCODERS and all(r.complete for r in runs)
    n_chunks = store.open_embedding("demo_fundus", ENCODERS[0], "clean").n_chunks
    assert n_chunks > 1 and sorted(calls["decode"]) == list(range(n_chunks))  # once, not once per encoder
    assert len(calls["apply"]) == len(set(calls["apply"]))  # each (chunk, condition) perturbed once
    n_test_chunks = store.open_embedding("demo_fundus", ENCODERS[0], "gaussian_noise@2").n_chunks
    assert len(calls["apply"]) == n_test_chunks * len(perturb.conditions("ophthalmology", (2,)))
    held = sorted(store.embeddings("demo_fundus"))
    assert held == sorted((d, e, c, True) for d, _, c, _ in alone.embeddings("demo_fundus") for e in ENCODERS)
    for d, e, c, _ in held:
        np.testing.assert_array_equal(store.read_embedding(d, e, c), alone.read_embedding(d, ENCODERS[0], c))

    digest = store.content_digest("demo_fundus", ENCODERS[0])
    store.open_embedding("demo_fundus", ENCODERS[1], "clean").group["done"][1] = False  # chunk 1 pending again
    calls["decode"].clear(), calls["apply"].clear()
    runs = extract_many(store, _encoders(), "demo_fundus", ExtractOptions(**kw))
    assert calls["decode"] == [1] and calls["apply"] == []  # a clean chunk: decoded, nothing perturbed
    assert [r.chunks_written for r in runs] == [0, 1] and all(r.complete for r in runs)
    assert store.content_digest("demo_fundus", ENCODERS[0]) == digest


# ------------------------------------------------------------- the store's records
def test_arrays_record_tool_weights_and_cost_and_a_no_op_rerun_keeps_the_digest(tmp_path):
    store = Store(str(tmp_path / "s.zarr"))
    run = extract(store, "demo-stats", "demo_derm", size=0.05, chunk=32, severities=(2,))
    assert run.forward_images > 0 and run.forward_seconds > 0
    attrs = dict(store.open_embedding("demo_derm", "demo-stats", "clean").group.attrs)
    assert attrs["tool"]["crs_bench"] and attrs["tool"]["settings"]["extract"]["chunk"] == 32
    assert "weights" in attrs  # the encoder's weights_info (None where the encoder has none)
    cost = attrs["cost"]
    assert cost["device"] == "cpu" and cost["images_per_s"] == pytest.approx(
        run.forward_images / run.forward_seconds, rel=1e-3)
    assert cost["seconds"] == pytest.approx(run.forward_seconds, abs=1e-3)  # the device's, as a Ray run records
    perturbed = dict(store.open_embedding("demo_derm", "demo-stats", "gaussian_noise@2").group.attrs)
    assert perturbed["cost"] == cost and perturbed["perturbation"]["severity"] == 2
    digest = store.content_digest("demo_derm", "demo-stats")
    again = extract(store, "demo-stats", "demo_derm", size=0.05, chunk=32, severities=(2,))
    assert again.forward_images == 0
    assert store.content_digest("demo_derm", "demo-stats") == digest
    assert dict(store.open_embedding("demo_derm", "demo-stats", "clean").group.attrs)["cost"] == cost


# ------------------------------------------------------------- small images are not upscaled
SIZE = 24


class NativeFiles:
    """PNG files of two sizes, decoded by ``crs.extract.images.decode`` (``upscale`` as the real adapters)."""

    name, task, classes, ordinal, shift_target, shift_spec = "native", "multiclass", ("a", "b"), False, None, None
    description, source, size, seed, provenance, modality = "test files", "test", 1.0, 0, None, "dermatology"
    image_size = SIZE

    def __init__(self, paths):
        self.paths = paths

    def table(self):
        n = len(self.paths)
        return Table(ids=np.array([f"img{i:02d}" for i in range(n)]), labels=np.arange(n) % 2,
                     split=np.array([2, 0] * (n // 2), dtype=np.int8), group=np.array([f"g{i}" for i in range(n)]))

    def load_image(self, row, upscale=True):
        return decode(self.paths[row], self.image_size, upscale=upscale)

    def images(self, rows):
        return np.stack([self.load_image(r) for r in rows])


def test_decode_without_upscaling_keeps_small_images_at_their_size(tmp_path):
    rng = np.random.default_rng(0)
    for name, (h, w) in {"small": (12, 20), "large": (60, 40)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{name}.png")
    assert decode(tmp_path / "small.png", SIZE, upscale=False).shape == (12, 12, 3)
    assert decode(tmp_path / "small.png", SIZE).shape == (SIZE, SIZE, 3)  # the default rule is unchanged
    np.testing.assert_array_equal(decode(tmp_path / "large.png", SIZE, upscale=False),
                                  decode(tmp_path / "large.png", SIZE))


def test_small_images_are_perturbed_at_their_own_size(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(8):
        side = 12 if i % 4 < 2 else 40  # each unit holds both sizes
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(paths[-1])
    ds = NativeFiles(paths)
    _, images, failures = units.DecodedUnits(ds, {0: np.arange(4)}, ds.paths)[0]
    assert failures == [] and [tuple(im.shape) for im in images] == [(12, 12, 3)] * 2 + [(SIZE, SIZE, 3)] * 2
    store = Store(str(tmp_path / "s.zarr"))
    run = extract(store, "demo-stats", ds, chunk=4, severities=(3,))
    assert run.complete and run.failures == 0
    # the embedding of a small test image under a perturbation = the encoder on the image perturbed at 12 px
    from crs.extract.models import load

    model = load(run_spec(), "cpu")
    table = store.dataset("native")
    row = int(np.flatnonzero(table.ids == "img00")[0])  # a 12 px test image
    x = torch.from_numpy(decode(paths[0], SIZE, upscale=False).copy()).permute(2, 0, 1).float().div(255)[None]
    want = model(perturb.apply(x, "defocus_blur", 3, ["img00"])).numpy()[0]
    got = store.read_embedding("native", "demo-stats", "defocus_blur@3")[row]
    np.testing.assert_allclose(got, want.astype(got.dtype), rtol=1e-3, atol=1e-3)


def run_spec():
    from crs.extract import encoders

    return encoders.get("demo-stats")
