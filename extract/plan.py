"""What an extraction will cost, worked out before it runs: forward passes, store size, GPU time.

Pure: numbers in, numbers out; nothing here loads a model, decodes an image or imports torch
(``crs extract --plan`` and ``benchmarks/scaling_plan.py`` share these figures), except
``macs_for`` on a record that neither a formula nor ``COUNTED_FLOPS`` covers (an encoder file's
own architecture): it counts that one on the meta device (torch, no weights, no download).

Forward passes of one (encoder, dataset) pair: every image once clean, plus every test image
once per perturbed condition (``crs.extract.prepare.prepare``: the suite is embedded only where the
dataset has a training split to probe and test images to perturb).

FLOPs: a multiply-add counts as 2 FLOPs (the convention of GPU peak figures; the "17.6
GFLOPs" often quoted for ViT-B/16 at 224 counts multiply-adds, i.e. 35 GFLOPs here). A ViT
block on N tokens of width D with MLP width M costs 4ND^2 (q, k, v, output projections) +
2N^2 D (scores and weighted sum) + 2NDM (MLP) multiply-adds; the patch embedding
N_p * 3p^2 * D. Norms, softmax, GELU and pooling heads add about 1 % and are left out. The
CNNs take their published multiply-add counts at 224 (ResNet-50: 4.1 G, He et al. 2016 /
torchvision; ConvNeXt-B: 15.4 G, Liu et al. 2022, Table 1), scaled by the input area.

GPU time: forward passes / a forward rate on one H200 (``forward_rate``), from the measured table
``MEASURED`` (raw forward, bf16 autocast, random weights: ``benchmarks/device_check.sh``, whose one
H200 run is quoted in issue 41): the measured records at their own rate, every other record scaled
from the measured one nearest to it in FLOPs per image by the ratio of their FLOPs (an estimate: it
assumes the same share of the peak, which small models do not reach -- their rate is bounded by the
input pipeline, not by FLOPs). ``images_per_second`` is the plain FLOP model (989 TFLOPs bf16 dense,
no sparsity, at 40 %), kept for ``benchmarks/scaling_plan.py``; the two measured rates reach 39 % and
30 % of that peak. Decoding and perturbing images add to it (``benchmarks/extract_bench.py`` measures
both).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

from crs.extract import encoders

# timm architecture names used by the registry -> (width, depth, patch, mlp width, class token)
TIMM_VIT = {"vit_base_patch16_224": (768, 12, 16, 3072, 1), "vit_large_patch16_224": (1024, 24, 16, 4096, 1)}
CNN_GMACS = {"resnet50": 4.1, "convnext_base": 15.4}  # at 224, published
# the hf records that add a class token to the patch tokens (CLIP, DINOv2 / RAD-DINO); SigLIP has none
CLS_TOKEN = {"dinov2": 1, "clip": 1, "pubmedclip": 1, "rad-dino": 1, "monet": 1}
PEAK_TFLOPS = 989.0  # H200 SXM, bf16 dense
UTILISATION = 0.4  # share of the peak a batched forward pass reaches
DEVICE = "one H200"
# zstd on float16 embeddings: the demo store's arrays took 58-100 % of their raw size (random-weight
# encoders), so the raw size is the figure to plan disk for
COMPRESSED_NOTE = "raw size; zstd keeps 60-100 % of it on embeddings"


def vit_macs(image: int, width: int, depth: int, patch: int, mlp: int, cls: int) -> float:
    n_p = (image // patch) ** 2
    n = n_p + cls
    block = 4 * n * width**2 + 2 * n**2 * width + 2 * n * width * mlp
    return depth * block + n_p * 3 * patch**2 * width


def macs_per_image(spec) -> float | None:
    """Multiply-adds of one forward pass at the record's input size; None where no figure is known."""
    a = spec.arch
    if a.get("timm") in CNN_GMACS:
        return CNN_GMACS[a["timm"]] * 1e9 * (spec.input_size / 224) ** 2
    if a.get("timm") in TIMM_VIT:
        width, depth, patch, mlp, cls = TIMM_VIT[a["timm"]]
        return vit_macs(spec.input_size, width, depth, patch, mlp, cls)
    if "hidden_size" in a:
        return vit_macs(spec.input_size, a["hidden_size"], a["num_hidden_layers"],
                        a["patch_size"], a.get("intermediate_size", 4 * a["hidden_size"]),
                        CLS_TOKEN.get(spec.name, 0))
    return None


# FLOPs per image of the registry records no formula above covers, as ``crs.extract.cost.estimate``
# counts them (the architecture on the meta device, at the record's input size): kept here so that
# the plan needs no torch; tests/extract/test_plan_cost.py recounts each, so a record changed
# without its count fails there
COUNTED_FLOPS = {"demo-resnet": 44_765_184, "demo-vit": 27_836_928, "demo-stats": 48_600}


def macs_for(spec) -> float | None:
    """Multiply-adds per image of any record, for the plan: ``macs_per_image`` where a formula or a
    published figure exists; else half the FLOPs ``crs.extract.cost.estimate`` counts (cached in
    ``COUNTED_FLOPS`` for the registry's own records, counted now for others: torch, the
    architecture built on the meta device, no weights, no download); None where the architecture
    cannot be built without its weights (a timm:/hf: id, whose width is 0 until it is loaded)."""
    macs = macs_per_image(spec)
    if macs is not None:
        return macs
    if spec.name in COUNTED_FLOPS and encoders.ENCODERS.get(spec.name) == spec:
        return COUNTED_FLOPS[spec.name] / 2
    from crs.extract import cost  # torch: crs extract --plan runs without it

    try:
        flops = cost.estimate(spec)["flops_per_image"]
    except ValueError:  # no architecture to build before the weights are loaded
        return None
    return None if flops is None else flops / 2


# record -> raw forward images/s measured on one H200 (bf16 autocast, random weights, batch 256 / 128),
# benchmarks/device_check.sh as quoted in issue 41
MEASURED = {"vit-large": 3103.0, "siglip-so400m": 451.0}
RATE_SOURCE = ("measured raw forward on one H200, bf16 (benchmarks/device_check.sh, issue 41): vit-large 3,103 img/s "
               "at 224 px, siglip-so400m 451 img/s at 384 px; every other encoder scaled from the one nearer in "
               "FLOPs by the ratio of FLOPs per image (an estimate; small models are bounded by the input pipeline)")


def forward_rate(name: str, macs: float | None) -> tuple[float | None, str | None]:
    """(forward images/s on one H200, its basis: 'measured' or 'scaled from NAME by FLOPs') of a record
    named ``name`` with ``macs`` multiply-adds per image; (None, None) where no figure is known."""
    if name in MEASURED:
        return MEASURED[name], "measured"
    if not macs:
        return None, None
    anchors = {n: macs_per_image(encoders.get(n)) for n in MEASURED}
    nearest = min(anchors, key=lambda n: abs(math.log(anchors[n] / macs)))
    return MEASURED[nearest] * anchors[nearest] / macs, f"scaled from {nearest} by FLOPs"


def images_per_second(macs: float | None, peak_tflops: float = PEAK_TFLOPS,
                      utilisation: float = UTILISATION) -> float | None:
    return None if not macs else peak_tflops * 1e12 * utilisation / (2 * macs)


@dataclass
class Pair:
    """The plan of one (encoder, dataset) pair."""

    encoder: str
    dataset: str
    images: int | None  # rows of the dataset (None: its files could not be read)
    test_images: int | None
    conditions: int | None  # clean + perturbed
    forward_passes: int | None
    store_bytes: int | None  # raw (uncompressed) size of the embeddings written
    gflops_per_image: float | None
    gpu_seconds: float | None
    rate_basis: str | None = None  # how the forward rate was had (``forward_rate``); None: the FLOP model

    def as_dict(self) -> dict:
        return asdict(self)


class Rows(NamedTuple):
    """A dataset's images to embed: all its rows, its test rows (None: its files could not be read) and
    how many perturbed conditions each test row is embedded under."""

    images: int | None
    test_images: int | None
    perturbed: int = 0


@dataclass(frozen=True)
class Speed:
    """How fast forward passes run: a measured or scaled ``rate`` in images/s with its ``basis``
    (``forward_rate``), or, where no rate is given, the FLOP model at ``peak_tflops`` and ``utilisation``."""

    rate: float | None = None
    basis: str | None = None
    peak_tflops: float = PEAK_TFLOPS
    utilisation: float = UTILISATION


def pair(encoder: str, dataset: str, *, width: int, macs: float | None, rows: Rows, itemsize: int,
         speed: Speed = Speed()) -> Pair:
    """Forward passes = images + test_images * perturbed; store bytes = width * itemsize * forward passes;
    GPU seconds = forward passes / ``speed.rate`` (images/s), or by the FLOP model where no rate is given."""
    images, test_images, perturbed = rows
    if images is None or test_images is None:
        return Pair(encoder, dataset, None, None, None, None, None,
                    None if not macs else 2 * macs / 1e9, None, speed.basis)
    forward = images + test_images * perturbed
    rate = images_per_second(macs, speed.peak_tflops, speed.utilisation) if speed.rate is None else speed.rate
    return Pair(encoder, dataset, images, test_images, 1 + perturbed, forward,
                width * itemsize * forward if width else None, None if not macs else 2 * macs / 1e9,
                None if rate is None else forward / rate, speed.basis)


def totals(pairs: list[Pair]) -> dict:
    """Sums over the pairs; a total is None where a pair's figure is unknown (so it is never understated)."""
    def add(key):
        vals = [getattr(p, key) for p in pairs]
        return None if any(v is None for v in vals) else sum(vals)
    return {"pairs": len(pairs), "forward_passes": add("forward_passes"), "store_bytes": add("store_bytes"),
            "gpu_seconds": add("gpu_seconds")}
