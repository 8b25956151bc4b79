"""Which encoders load together: groups whose float32 weights plus one batch's activations fit a share
of the device's free memory (``encoder_groups``, ``model_groups``)."""

from __future__ import annotations

import logging
import os

import torch

from crs.extract.cost import parameters
from crs.extract.models import pick_device

log = logging.getLogger("crs.extract")

MEMORY_SHARE = 0.8  # of the device's free memory (the host's available memory on the CPU) a group may take
MAX_MODELS = 8  # loaded together at most unless --max-models says otherwise (module docstring of extract_many)
BYTES_PER_PARAMETER = 4  # weights stay float32 (bf16 is autocast, crs.extract.models)
# one image's activations at their peak, per input pixel: 64 float32 values. The widest tensor of a forward
# pass holds ~16-21 values per input pixel (ViT-L/16 at 224: 197 tokens x 4096 MLP units = 16; SigLIP
# so400m at 384: 729 x 4304 = 21; ResNet-50's 64 x 112 x 112 stem output: 16); its input, output and the
# residual stream are alive together, and bf16 would halve it: 64 float32 is an upper estimate
ACTIVATION_BYTES_PER_PIXEL = 64 * 4


def model_bytes(spec, batch: int) -> tuple[int | None, int]:
    """(float32 weights in bytes, from the record's parameter count on the meta device: None where unknown
    before loading; one batch's activations, ``batch * input_size**2 * ACTIVATION_BYTES_PER_PIXEL``)."""
    p = parameters(spec)
    return (None if p is None else BYTES_PER_PARAMETER * p), batch * spec.input_size ** 2 * ACTIVATION_BYTES_PER_PIXEL


def memory_budget(device: str | None) -> int:
    """``MEMORY_SHARE`` of what ``device`` has free now: a CUDA device's free memory, else the host's."""
    dev = pick_device(device)
    if dev.type == "cuda":
        return int(MEMORY_SHARE * torch.cuda.mem_get_info(dev)[0])
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX host
        free = 8 << 30
    return int(MEMORY_SHARE * free)


def encoder_groups(specs: dict, device: str | None, max_models: int | None, batch: int = 64,
                   budget: int | None = None) -> list[list[str]]:
    """The names of ``specs`` in groups to load together (``model_groups``): each group's float32 weights
    plus one batch's activations (``model_bytes``) within ``budget`` bytes (default ``memory_budget``),
    and at most ``max_models`` models (None: ``MAX_MODELS``). Says in the log how many load together."""
    names = list(specs)
    if len(names) <= 1:
        return [names] if names else []
    budget = memory_budget(device) if budget is None else budget
    sizes, acts = zip(*(model_bytes(specs[n], batch) for n in names))
    cap = MAX_MODELS if max_models is None else max_models
    groups = [[names[i] for i in g] for g in model_groups(list(sizes), budget=budget, max_models=cap,
                                                         activations=list(acts))]
    log.info("extract: %d encoders in %d groups, at most %d models loaded together (budget %.2f GB: float32 "
             "weights plus one batch of %d images' activations; at most %d models)", len(names), len(groups),
             max(map(len, groups)), budget / 1e9, batch, cap)
    return groups


def model_groups(sizes: list[int | None], *, budget: int | None, max_models: int | None,
                 activations: list[int] | None = None) -> list[list[int]]:
    """Consecutive groups of the indices of ``sizes`` (bytes of each model's weights), in order: a group
    closes when the next model would take it past ``budget`` bytes -- its weights summed plus the largest
    of its ``activations`` (one batch's, default 0: the models run one after the other) -- or past
    ``max_models`` models (None: no such limit). A model of unknown size (None), or one over the budget
    alone, gets a group of its own."""
    if max_models is not None and max_models < 1:
        raise ValueError(f"max_models must be at least 1, not {max_models}")
    acts = activations or [0] * len(sizes)
    groups: list[list[int]] = []
    weights, peak, closed = 0, 0, True
    for i, size in enumerate(sizes):
        alone = budget is not None and (size is None or size + acts[i] > budget)
        room = (not closed and not alone and (max_models is None or len(groups[-1]) < max_models)
                and (budget is None or weights + size + max(peak, acts[i]) <= budget))
        if room:
            groups[-1].append(i)
            weights, peak = weights + (size or 0), max(peak, acts[i])
        else:
            groups.append([i])
            weights, peak = size or 0, acts[i]
        closed = alone
    return groups
