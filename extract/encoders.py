"""The encoder registry: one frozen record per encoder, data only (no torch here).

Built-in demo encoders need no download: two random-weight timm architectures,
created through the same ``timm.create_model`` path a pretrained model takes (with
``pretrained=False`` and a fixed init seed), and a non-deep baseline of colour and
texture statistics. Random conv features are a known, fair baseline for linear
probes; the point of the demo is three visibly different reliability profiles, not
good absolute numbers. Real pretrained families join this registry later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class EncoderSpec:
    name: str  # stable lowercase key, used in the store and on the command line
    family: str  # "general" | "medical" | "specialty" | "baseline"
    source: str  # "timm" | "builtin"
    model_id: str  # timm architecture / hub id, or the builtin's name
    width: int  # embedding width
    input_size: int  # square side the image is resized to
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"  # "bilinear" | "bicubic" | "nearest"
    pooling: str = "model"  # "model" (the model's pooled output) | "cls" | "mean"
    pretrained: bool = True
    init_seed: int | None = None  # for random-weight models: the torch seed used at creation
    revision: str | None = None  # pinned hub revision, where the hub has one
    licence: str = "unknown"
    gated: bool = False
    reference: bool = False  # the default CRS reference of this registry
    kwargs: dict = field(default_factory=dict)  # extra create_model arguments

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def weight_source(self) -> str:
        if self.source == "builtin":
            return "none (no learned weights)"
        if not self.pretrained:
            return f"random init, torch seed {self.init_seed}"
        return f"{self.source}:{self.model_id}" + (f"@{self.revision}" if self.revision else "")


_REGISTRY: tuple[EncoderSpec, ...] = (
    EncoderSpec(
        name="demo-resnet",
        family="general",
        source="timm",
        model_id="resnet10t",
        width=512,
        input_size=64,
        pooling="model",
        pretrained=False,
        init_seed=0,
        licence="apache-2.0 (architecture; random weights)",
        reference=True,
    ),
    EncoderSpec(
        name="demo-vit",
        family="general",
        source="timm",
        model_id="vit_tiny_patch16_224",
        width=192,
        input_size=64,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        interpolation="bicubic",
        pooling="mean",
        pretrained=False,
        init_seed=0,
        licence="apache-2.0 (architecture; random weights)",
        kwargs={"img_size": 64},
    ),
    EncoderSpec(
        name="demo-stats",
        family="baseline",
        source="builtin",
        model_id="colour_texture_stats",
        width=54,
        input_size=64,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        pooling="model",
        pretrained=False,
        licence="apache-2.0",
    ),
)

ENCODERS: dict[str, EncoderSpec] = {spec.name: spec for spec in _REGISTRY}


def names() -> list[str]:
    return list(ENCODERS)


def get(name: str) -> EncoderSpec:
    try:
        return ENCODERS[name]
    except KeyError:
        raise KeyError(f"unknown encoder {name!r}; valid encoders: {', '.join(ENCODERS)}") from None


def default_reference(encoders: list[str]) -> str:
    """The registry's reference encoder if it is among ``encoders``, else 'median'."""
    for name in encoders:
        if name in ENCODERS and ENCODERS[name].reference:
            return name
    return "median"
