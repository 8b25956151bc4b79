"""The counter-based generator (extract/noise.py) against a pure Python reference, and its statistics."""

import math

import pytest
import torch

from crs.extract import noise, perturb
from crs.foundations.names import PERTURBATION_GENERATORS


def lowbias32_reference(seed: int, i: int) -> int:
    """The slow, obvious definition: lowbias32(k0 + g * i mod 2**32), k0 and g from the seed's two halves."""
    m = 0xFFFFFFFF
    k0, g = seed & m, ((seed >> 32) << 1 | 1) & m
    x = (k0 + g * i) & m
    x ^= x >> 16
    x = (x * 0x7FEB352D) & m
    x ^= x >> 15
    x = (x * 0x846CA68B) & m
    x ^= x >> 16
    return x


SEEDS = [0, 1, (1 << 63) - 1, perturb.image_seed("img7", "gaussian_noise@3"), perturb.image_seed("a", "shot_noise@5")]


def test_the_draws_are_the_reference_hash_bit_for_bit():
    counters = torch.tensor([0, 1, 2, 3, 1000, 65535, 65536, 786431, (1 << 31) - 1], dtype=torch.int32)
    got = noise.bits(noise.keys(SEEDS, "cpu"), counters)
    for row, seed in enumerate(SEEDS):
        for col, i in enumerate(counters.tolist()):
            assert int(got[row, col]) & 0xFFFFFFFF == lowbias32_reference(seed, i), (seed, i)
    u = noise.uniform(noise.keys(SEEDS, "cpu"), counters)
    want = [[((lowbias32_reference(s, i) >> 9) * 2 + 1) / 2**24 for i in counters.tolist()] for s in SEEDS]
    assert torch.equal(u, torch.tensor(want, dtype=torch.float32))  # exact in float32


def test_the_same_key_draws_the_same_values_and_another_key_others():
    counters = torch.arange(4096, dtype=torch.int32)
    a = noise.uniform(noise.keys(SEEDS, "cpu"), counters)
    b = noise.uniform(noise.keys(SEEDS[::-1], "cpu"), counters)
    assert torch.equal(a, b.flip(0))
    for i in range(len(SEEDS)):
        for j in range(i):
            assert (a[i] == a[j]).float().mean() < 0.01  # two keys: as good as independent streams
    # a key is (image, family, severity): another image, family or severity is another key
    seeds = {perturb.image_seed(i, c) for i in ("a", "b") for c in ("gaussian_noise@1", "gaussian_noise@2",
                                                                    "speckle_noise@1")}
    assert len(seeds) == 6


def test_uniforms_are_uniform_and_open():
    u = noise.field(noise.keys(SEEDS, "cpu"), (3, 64, 64), "cpu")
    assert u.shape == (len(SEEDS), 3, 64, 64) and u.dtype == torch.float32
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    hist = torch.histc(u, bins=16, min=0, max=1) / u.numel()
    assert float((hist - 1 / 16).abs().max()) < 0.004
    # neighbours (along a row, a column, a channel, and the next image) are uncorrelated
    for a, b in ((u[..., 1:], u[..., :-1]), (u[..., 1:, :], u[..., :-1, :]), (u[:, 1:], u[:, :-1]), (u[1:], u[:-1])):
        r = torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1]
        assert abs(float(r)) < 0.02


def test_normals_have_unit_variance():
    z = noise.normal(noise.field(noise.keys(SEEDS, "cpu"), (3, 64, 64), "cpu"))
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1) < 0.02
    assert float(z.abs().max()) < 5.5  # u is never 0 or 1
    assert abs(float((z.abs() > 1.96).float().mean()) - 0.05) < 0.005


def _poisson_pmf(mean: float, k_max: int) -> list[float]:
    p = [math.exp(-mean)]
    for k in range(1, k_max + 1):
        p.append(p[-1] * mean / k)
    return p


@pytest.mark.parametrize("mean", [0.3, 2.0, 9.5, 10.0, 35.0, 150.0])
def test_poisson_draws_have_the_poisson_mean_variance_and_shape(mean):
    n = 1 << 16
    u = noise.uniform(noise.keys([7], "cpu"), torch.arange(n, dtype=torch.int32))[0]
    x = noise.poisson(torch.full((n,), mean), u)
    assert torch.equal(x, x.round()) and float(x.min()) >= 0
    se = math.sqrt(mean / n)
    assert abs(float(x.mean()) - mean) < 5 * se
    assert abs(float(x.var()) / mean - 1) < 0.03
    k_max = int(mean + 10 * math.sqrt(mean) + 10)
    pmf = torch.tensor(_poisson_pmf(mean, k_max))
    seen = torch.bincount(x.long(), minlength=k_max + 1)[: k_max + 1].float() / n
    tv = 0.5 * float((seen - pmf).abs().sum())
    # sampling error ~0.01 at 2**16 draws; the approximation of counts over 5 adds at most 0.0022
    assert tv < 0.015, tv


def test_exact_poisson_inversion_is_the_quantile_of_each_uniform():
    """Where u <= F(5), each count is the smallest k with F(k) >= u (checked against the CDF in float64)."""
    means = torch.tensor([0.05, 0.5, 1.0, 4.0, 9.99, 150.0])
    u = torch.tensor([2.0**-24, 0.01, 0.3, 0.5, 0.9, 0.999, 1 - 2.0**-24])
    x = noise.poisson(means[:, None].expand(6, 7).contiguous(), u.expand(6, 7).contiguous())
    for i, m in enumerate(means.tolist()):
        cdf = torch.tensor(_poisson_pmf(m, 400), dtype=torch.float64).cumsum(0)
        for j, uj in enumerate(u.tolist()):
            want = int((cdf < uj).sum())
            if want < noise.POISSON_EXACT_COUNTS:
                assert abs(int(x[i, j]) - want) <= (1 if abs(float(cdf[want]) - uj) < 1e-6 else 0), (m, uj)
            else:  # the approximation: never under 6, and near the quantile
                assert int(x[i, j]) >= noise.POISSON_EXACT_COUNTS and abs(int(x[i, j]) - want) <= 2, (m, uj)


def test_the_generator_is_named_and_the_last_of_the_list():
    assert perturb.GENERATOR == PERTURBATION_GENERATORS[-1] == "counter-lowbias32-v1"
    assert len(set(PERTURBATION_GENERATORS)) == len(PERTURBATION_GENERATORS)
