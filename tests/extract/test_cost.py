"""cost.measure against hand counts (a multiply-add is 2 FLOPs, as torch's FlopCounterMode counts)."""

import pytest
import torch

from crs.extract import cost, encoders
from crs.extract.models import Encoder, load


def one_conv_encoder(size):
    """Conv2d(3 -> 4, 3x3, padding 1) then the spatial mean: FLOPs = 2 * 4*3*3*3 * size*size."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    class OneConv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x):
            return self.conv(x).mean((2, 3))

    spec = encoders.EncoderSpec(name="one-conv", family="baseline", source="builtin", model_id="one_conv", width=4,
                                input_size=size, pretrained=False, loader="builtin", licence="test")
    return Encoder(spec, OneConv(), torch.device("cpu"), kind="builtin")


@pytest.mark.parametrize("size", [8, 16])
def test_a_single_convolution_counts_two_flops_per_multiply_add(size):
    got = cost.measure(one_conv_encoder(size))
    assert got == {"parameters": 4 * 3 * 3 * 3 + 4, "flops_per_image": 2 * (4 * 3 * 3 * 3) * size * size,
                   "width": 4, "input_size": size}


def test_a_tiny_timm_vit_matches_its_hand_count():
    """ViT, 1 block, width 32, 2 heads, 32 px, patch 16: 4 patches + CLS = 5 tokens, MLP 4x."""
    spec = encoders.EncoderSpec(
        name="tiny-vit", family="general", source="timm", model_id="vit_tiny_patch16_224", width=32, input_size=32,
        pooling="cls", pretrained=False, init_seed=0, licence="test",
        kwargs={"depth": 1, "embed_dim": 32, "num_heads": 2, "img_size": 32},
    )
    t, d, heads = 5, 32, 2
    patch_embed = 2 * d * (3 * 16 * 16) * 4  # one output per patch and channel
    qkv, proj = 2 * t * d * 3 * d, 2 * t * d * d
    attention = 2 * (2 * heads * t * t * (d // heads))  # q k^T and (attention) v
    mlp = 2 * (2 * t * d * 4 * d)
    got = cost.measure(load(spec, "cpu"))
    assert got["flops_per_image"] == patch_embed + qkv + attention + proj + mlp
    assert got["width"] == 32 and got["input_size"] == 32
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **spec.kwargs)
    assert got["parameters"] == sum(p.numel() for p in model.parameters())


def test_the_builtin_baseline_counts_only_its_laplacian():
    """demo-stats is element-wise except one 3x3 Laplacian per channel (valid, 30x30 outputs at 32 px)."""
    got = cost.measure(load(encoders.get("demo-stats"), "cpu"))
    assert got["parameters"] == 0 and got["flops_per_image"] == 2 * 9 * 30 * 30 * 3


def test_a_tiny_transformers_vit_counts_its_attention_on_the_cpu():
    """Dinov2, 1 layer, hidden 32, 2 heads, MLP ratio 4, 28 px, patch 14: 5 tokens."""
    import dataclasses

    from transformers import Dinov2Config, Dinov2Model

    model = Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=4,
                                     patch_size=14, image_size=28))
    spec = dataclasses.replace(encoders.get("dinov2"), width=32, input_size=28)
    t, d = 5, 32
    expected = (2 * d * (3 * 14 * 14) * 4 + 3 * 2 * t * d * d  # patches; q, k, v
                + 2 * (2 * 2 * t * t * (d // 2))  # q k^T and (attention) v, 2 heads
                + 2 * t * d * d + 2 * (2 * t * d * 4 * d))  # output projection; MLP
    got = cost.measure(Encoder(spec, model, torch.device("cpu"), kind="hf"))
    assert got["flops_per_image"] == expected and got["parameters"] == sum(p.numel() for p in model.parameters())


def test_estimate_without_weights_equals_the_measure_of_the_loaded_model():
    for name in encoders.demo_names():
        spec = encoders.get(name)
        assert cost.estimate(spec) == cost.measure(load(spec, "cpu")), name
    # a registry record at full size, on the meta device: ResNet-50 at 224 px is 4.1 GMACs, 23.5 M parameters
    resnet = cost.estimate(encoders.get("resnet50"))
    assert resnet["parameters"] == 23_508_032 and 8.1e9 < resnet["flops_per_image"] < 8.3e9
