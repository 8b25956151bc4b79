"""What an encoder costs to run: parameters, FLOPs per image at its input size, width.

FLOPs are counted by PyTorch's own ``torch.utils.flop_counter.FlopCounterMode`` on one
all-zero image through the encoder's full call (preprocessing and pooling included), with
its convention: a multiply-add is 2 FLOPs, and only the operators it has formulas for are
counted (matrix products, convolutions, attention); element-wise work (normalisation,
activations, the resize) is not. The builtin colour/texture baseline is nearly all
element-wise, so its count is small (its one Laplacian convolution): a lower bound, not zero
cost. Counted on the encoder's own device; one forward pass of batch 1. PyTorch's fused
attention on the CPU (``_scaled_dot_product_flash_attention_for_cpu``) has no formula in the
counter, so it is given the one of the GPU kernels (``sdpa_flop_count``: 4 * b * h * s_q * s_k * d),
and a ViT counts the same on either device.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from crs.extract.models import Encoder, build_random, load


def _cpu_attention() -> dict:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None:
        return {}

    def flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    return {op: flops}


def measure(encoder) -> dict:
    """{"parameters": int, "flops_per_image": int | None (None: the counter failed on this model),
    "width": int, "input_size": int} of a loaded ``crs.extract.models.Encoder``."""
    parameters = sum(p.numel() for p in encoder.model.parameters())
    size = int(encoder.spec.input_size)
    x = torch.zeros(1, 3, size, size, device=encoder.device)
    counter = FlopCounterMode(display=False, custom_mapping=_cpu_attention())
    try:
        with counter:
            encoder(x)
        flops = int(counter.get_total_flops())
    except (RuntimeError, NotImplementedError, TypeError):  # an operator the counter cannot trace
        flops = None
    return {"parameters": int(parameters), "flops_per_image": flops, "width": int(encoder.width),
            "input_size": size}


def estimate(spec) -> dict:
    """``measure`` of a registry record without its weights: the architecture is built on the meta device
    (no memory, no download) and counted the same way (for a plan before a long run). Records whose width
    comes from the model (``timm:``/``hf:`` ids, width 0) have no architecture to build: ValueError."""
    if spec.source == "builtin":  # no learned weights: the real thing, moved to the meta device
        return measure(load(spec, "meta"))
    if spec.width == 0:
        raise ValueError(f"encoder {spec.name!r}: a timm:/hf: id has no architecture before it is loaded")
    with torch.device("meta"):
        model, kind = build_random(spec)
    return measure(Encoder(spec, model, torch.device("meta"), kind))


def parameters(spec) -> int | None:
    """The parameter count of a registry record without its weights (built on the meta device, no
    forward pass), as ``estimate`` counts it; None for a timm:/hf: id (no architecture before loading)."""
    if spec.source == "builtin":
        model = load(spec, "meta").model
    elif spec.width == 0:
        return None
    else:
        with torch.device("meta"):
            model, _ = build_random(spec)
    return int(sum(p.numel() for p in model.parameters()))


def model_cost(model) -> dict:
    """{"weights": the loaded encoder's ``weights_info``, "cost": ``crs.extract.cost.measure`` of it}
    (``{}`` where no model was loaded); the part of ``crs.extract.prepare.record_cost`` that needs the model,
    so that a Ray replica can work it out where its model lives."""
    if model is None:
        return {"weights": None, "cost": {}}
    return {"weights": getattr(model, "weights_info", None), "cost": measure(model)}


def device_name(device) -> str:
    """'cpu', or e.g. 'cuda:0 NVIDIA H200'."""
    device = torch.device(device)
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} {torch.cuda.get_device_name(index)}"
