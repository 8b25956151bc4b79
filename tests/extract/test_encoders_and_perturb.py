import numpy as np
import pytest
import torch

from crs.extract import encoders, perturb
from crs.extract.models import load


@pytest.mark.parametrize("name", encoders.names())
def test_every_registry_record_gives_its_width(name):
    spec = encoders.get(name)
    enc = load(spec, torch.device("cpu"))
    x = torch.rand(3, 3, 48, 40)  # any image size: the encoder resizes to its input size
    out = enc(x)
    assert out.shape == (3, spec.width)
    assert torch.isfinite(out).all()
    assert spec.name == spec.name.lower()


def test_random_weights_are_reproducible():
    spec = encoders.get("demo-vit")
    x = torch.rand(2, 3, 64, 64)
    a = load(spec, torch.device("cpu"))(x)
    b = load(spec, torch.device("cpu"))(x)
    assert torch.equal(a, b)


def test_unknown_encoder_lists_valid_names():
    with pytest.raises(KeyError, match="valid encoders: demo-resnet"):
        encoders.get("nope")


def test_registry_has_one_reference():
    assert sum(s.reference for s in encoders.ENCODERS.values()) == 1
    assert encoders.default_reference(["demo-stats", "demo-resnet"]) == "demo-resnet"
    assert encoders.default_reference(["demo-stats"]) == "median"


def test_suite_names_and_parameters():
    conds = perturb.conditions()
    assert len(conds) == 25 and "gaussian_noise@1" in conds and "jpeg@5" in conds
    assert perturb.parameters("jpeg", 5) == {"family": "jpeg", "severity": 5, "quality": 10}
    with pytest.raises(KeyError, match="valid: gaussian_noise"):
        perturb.parameters("fog", 1)
    with pytest.raises(ValueError, match="severity"):
        perturb.parameters("jpeg", 6)


@pytest.mark.parametrize("family", list(perturb.SUITE))
def test_perturbations_are_per_image_deterministic_and_grow_with_severity(family):
    g = torch.Generator().manual_seed(0)
    base = torch.rand(4, 3, 32, 32, generator=g) * 0.6 + 0.2
    # smooth images so that blur and JPEG act like on photographs
    x = torch.nn.functional.avg_pool2d(base, 5, stride=1, padding=2)
    ids = ["a", "b", "c", "d"]
    distances = []
    for sev in perturb.SEVERITIES:
        y = perturb.apply(x, family, sev, ids)
        assert y.shape == x.shape and y.min() >= 0 and y.max() <= 1
        # the same image gets the same perturbation in another batch, in another position
        y2 = perturb.apply(x[[2, 0]], family, sev, ["c", "a"])
        torch.testing.assert_close(y2, y[[2, 0]], atol=1e-6, rtol=0)
        distances.append(float((y - x).abs().mean()))
    assert all(b > a for a, b in zip(distances, distances[1:])), distances
    assert distances[0] > 0


def test_noise_differs_between_images_and_conditions():
    x = torch.full((2, 3, 8, 8), 0.5)
    y = perturb.apply(x, "gaussian_noise", 1, ["a", "b"])
    assert not torch.equal(y[0], y[1])
    assert perturb.image_seed("a", "gaussian_noise@1") != perturb.image_seed("a", "gaussian_noise@2")
    assert perturb.image_seed("a", "gaussian_noise@1") == perturb.image_seed("a", "gaussian_noise@1")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", list(perturb.SUITE))
def test_perturbations_on_cuda_match_the_cpu(family):
    x = torch.nn.functional.avg_pool2d(torch.rand(3, 3, 32, 32), 5, stride=1, padding=2)
    ids = ["a", "b", "c"]
    cpu = perturb.apply(x, family, 3, ids)
    gpu = perturb.apply(x.cuda(), family, 3, ids).cpu()
    tol = 2 / 255 if family == "jpeg" else 1e-5  # JPEG codecs may round differently
    torch.testing.assert_close(gpu, cpu, atol=tol, rtol=0)
