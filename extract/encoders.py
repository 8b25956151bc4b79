"""The encoder registry: one frozen record per encoder, data only (no torch here).

Two kinds of record:

* the demo encoders, which need no download: two random-weight timm architectures,
  created through the same ``timm.create_model`` path a pretrained model takes (with
  ``pretrained=False`` and a fixed init seed), and a non-deep baseline of colour and
  texture statistics. ``demo-resnet`` is the CRS reference of the demo;
* the real pretrained families (general, broad-medical, specialty), each loaded through
  its library's normal path (``crs.extract.models``): timm, or transformers.

``loader`` says how the weights become a model (one ``Loader`` record each in
``crs.extract.models.LOADERS``; a new name is added there and to ``LOADERS`` below):

* ``timm``: ``timm.create_model(model_id, pretrained=True)`` (timm ids and ``hf-hub:`` ids);
* ``timm-checkpoint``: a timm architecture (``arch['timm']``) filled from one checkpoint
  file of a hub repo (``checkpoint``) or a local file, with a key map (``keymap``);
* ``hf``: ``transformers.<hf_class>.from_pretrained(model_id)``;
* ``hf-vision-tower``: the vision tower alone of a vision-language model (MedGemma):
  built from the ``vision_config`` of the repo's config, filled with only the tensors
  whose names hold ``vision_tower.``; the language model is never downloaded or built;
* ``builtin``: code in this package (no learned weights).

``arch`` holds the architecture numbers the width follows from (taken from the model
cards / config files cited in the comments); tests check every record's width against
them and build a tiny model of the same class to run the real loader offline.
Widths, sizes and normalisation were read from the cited cards.

Revisions: every pretrained record either pins ``revision`` (a full 40-hex hub commit, its
source cited in the comment above the record) or says in ``revision_note`` why it does not
(the commit id was not known offline: the hub's main branch is loaded, and the commit it
resolved to is recorded with the embeddings; ``--revision ENCODER=REV`` pins one per run,
through ``with_revision``). No commit id here was guessed.

Reference: ``resnet50`` (a supervised ImageNet-1k ResNet-50) is the reference of real
runs, ``demo-resnet`` the demo's; ``reference_for`` picks the one a comparison set holds.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field

from crs.foundations.errors import BadInput

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

FAMILIES = ("general", "medical", "specialty", "baseline")
SOURCES = ("timm", "hf", "builtin")
LOADERS = ("timm", "timm-checkpoint", "hf", "hf-vision-tower", "builtin")
POOLINGS = ("model", "cls", "mean")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
HF_CLASSES = ("Dinov2Model", "CLIPVisionModelWithProjection", "SiglipVisionModel", "AutoModel")
KEYMAPS = (None, "mae", "cae", "open_clip")


@dataclass(frozen=True)
class EncoderSpec:
    name: str  # stable lowercase key, used in the store and on the command line
    family: str  # "general" | "medical" | "specialty" | "baseline"
    source: str  # library: "timm" | "hf" (transformers) | "builtin"
    model_id: str  # timm architecture / hub id, or the builtin's name
    width: int  # embedding width
    input_size: int  # square side the image is resized to
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"  # "bilinear" | "bicubic" | "nearest"
    pooling: str = "model"  # "model" (the model's pooled output) | "cls" | "mean" (of patch tokens)
    pretrained: bool = True
    init_seed: int | None = None  # for random-weight models: the torch seed used at creation
    revision: str | None = None  # pinned hub revision (40-hex commit, or a branch/tag name), where the hub has one
    revision_note: str | None = None  # why a pretrained record pins no revision
    licence: str = "unknown"
    gated: bool = False
    reference: bool = False  # the default CRS reference of this registry
    kwargs: dict = field(default_factory=dict)  # extra create_model arguments
    loader: str = "timm"  # see the module docstring
    hf_class: str | None = None  # transformers class, for loader "hf"
    checkpoint: str | None = None  # file inside the hub repo, for loader "timm-checkpoint"
    keymap: str | None = None  # how checkpoint tensor names map onto the timm model
    arch: dict = field(default_factory=dict)  # architecture numbers (config of the full model)
    page: str | None = None  # the model card / weights page a user reads and accepts
    modality: str | None = None  # for specialty models: the modality they were trained on

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def weight_source(self) -> str:
        if self.source == "builtin":
            return "none (no learned weights)"
        if not self.pretrained:
            return f"random init, torch seed {self.init_seed}"
        where = self.model_id + (f"/{self.checkpoint}" if self.checkpoint else "")
        return f"{self.source}:{where}" + (f"@{self.revision}" if self.revision else "")


_COMMIT = re.compile(r"[0-9a-f]{40}")
# a branch or tag name as git allows it (no '..', no leading '-' or '/', no spaces or control characters)
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._\-]*(/[A-Za-z0-9_][A-Za-z0-9._\-]*)*")


def is_commit(revision: str | None) -> bool:
    return bool(revision) and bool(_COMMIT.fullmatch(revision))


def revision_problem(revision: object) -> str | None:
    """None for a full 40-hex commit id or a branch/tag name, else what is wrong with ``revision``."""
    if not isinstance(revision, str) or not revision:
        return f"revision {revision!r} must be a full 40-character commit id or a branch/tag name"
    if _COMMIT.fullmatch(revision):
        return None
    if re.fullmatch(r"[0-9a-fA-F]{7,40}", revision):
        return (f"revision {revision!r} looks like an abbreviated or upper-case commit id; the hub needs the full "
                "40-character lower-case id (copy it from the model page's 'Files and versions' history)")
    if not _REF.fullmatch(revision) or ".." in revision or revision.endswith((".", ".lock", "/")):
        return f"revision {revision!r} must be a full 40-character commit id or a branch/tag name"
    return None


def check_spec(spec: EncoderSpec) -> EncoderSpec:
    """Raise BadInput (a ValueError) naming the bad field of a record (user records from --encoder-file too)."""
    problems = []
    if not re.fullmatch(r"[a-z0-9][a-z0-9._+\-]*", spec.name or ""):
        problems.append(f"name {spec.name!r} must be lowercase letters, digits, '.', '_', '+', '-'")
    for what, value, valid in (
        ("family", spec.family, FAMILIES), ("source", spec.source, SOURCES), ("loader", spec.loader, LOADERS),
        ("pooling", spec.pooling, POOLINGS), ("interpolation", spec.interpolation, INTERPOLATIONS),
        ("keymap", spec.keymap, KEYMAPS),
    ):
        if value not in valid:
            problems.append(f"{what} {value!r} is not one of {', '.join(map(str, valid))}")
    if spec.loader == "hf" and spec.hf_class not in HF_CLASSES:
        problems.append(f"hf_class {spec.hf_class!r} is not one of {', '.join(HF_CLASSES)}")
    if not all(isinstance(v, int) and v > 0 for v in (spec.width, spec.input_size)):
        problems.append(f"width and input_size must be positive integers (got {spec.width!r}, {spec.input_size!r})")
    if len(spec.mean) != 3 or len(spec.std) != 3 or any(s <= 0 for s in spec.std):
        problems.append(f"mean and std need three values each, std positive (got {spec.mean!r}, {spec.std!r})")
    if spec.revision is not None and (why := revision_problem(spec.revision)):
        problems.append(why)
    if spec.revision is not None and (spec.source == "builtin" or not spec.pretrained):
        problems.append(f"revision {spec.revision!r} given, but the record loads no hub weights "
                        "(builtin or random init)")
    if spec.loader == "timm-checkpoint" and "timm" not in spec.arch:
        problems.append("loader timm-checkpoint needs arch = {timm = 'ARCHITECTURE', ...}")
    if problems:
        raise BadInput(f"encoder record {spec.name!r}: " + "; ".join(problems))
    return spec


_REGISTRY: tuple[EncoderSpec, ...] = (
    # ------------------------------------------------------------------ demo (no download)
    EncoderSpec(
        name="demo-resnet", family="general", source="timm", model_id="resnet10t", width=512, input_size=32,
        pooling="model", pretrained=False, init_seed=0, licence="apache-2.0 (architecture; random weights)",
        reference=True,
    ),
    EncoderSpec(
        name="demo-vit", family="general", source="timm", model_id="vit_tiny_patch16_224", width=192, input_size=32,
        mean=HALF, std=HALF, interpolation="bicubic", pooling="mean", pretrained=False, init_seed=0,
        licence="apache-2.0 (architecture; random weights)", kwargs={"img_size": 32, "depth": 6},
    ),
    EncoderSpec(
        name="demo-stats", family="baseline", source="builtin", model_id="colour_texture_stats", width=54,
        input_size=32, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), pooling="model", pretrained=False,
        licence="apache-2.0", loader="builtin",
    ),
    # ------------------------------------------------------------------ general purpose
    # https://huggingface.co/timm/resnet50.a1_in1k (ResNet-50 A1 recipe, supervised on ImageNet-1k; 2048 features,
    # 224 train, bicubic). The CRS reference of real runs: a well-known supervised ImageNet CNN.
    # Revision: the snapshot several public projects pin or hold in their hub cache (six or more, incl. a cache
    # path; found by code search, not checked against the hub).
    EncoderSpec(
        name="resnet50", family="general", source="timm", model_id="resnet50.a1_in1k", width=2048, input_size=224,
        interpolation="bicubic", licence="apache-2.0", arch={"timm": "resnet50"}, reference=True,
        revision="767268603ca0cb0bfe326fa87277f19c419566ef", page="https://huggingface.co/timm/resnet50.a1_in1k",
    ),
    # https://huggingface.co/timm/convnext_base.fb_in22k_ft_in1k (ConvNeXt-B, 1024 features)
    EncoderSpec(
        name="convnext", family="general", source="timm", model_id="convnext_base.fb_in22k_ft_in1k", width=1024,
        input_size=224, interpolation="bicubic", licence="apache-2.0", arch={"timm": "convnext_base"},
        revision_note=("one public source names commit 67758fc..., which the hub's own tree pages for this "
                       "repo (bae7fe1, 5240a4d, fd76ecc) do not list, so none is pinned; the hub's main branch is "
                       "loaded and the commit it resolved to is recorded with the embeddings; pin one with "
                       "--revision convnext=COMMIT"),
        page="https://huggingface.co/timm/convnext_base.fb_in22k_ft_in1k",
    ),
    # https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k (ViT-B/16, mean/std 0.5)
    # Revision: the snapshot several public projects pin or hold in their hub cache (five or more, incl. two cache
    # paths; found by code search, not checked against the hub).
    EncoderSpec(
        name="vit-base", family="general", source="timm", model_id="vit_base_patch16_224.augreg2_in21k_ft_in1k",
        width=768, input_size=224, mean=HALF, std=HALF, interpolation="bicubic", pooling="cls",
        licence="apache-2.0", arch={"timm": "vit_base_patch16_224"},
        revision="063c6c38a5d8510b2e57df480445e94b231dad2c", page="https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
    ),
    # https://huggingface.co/timm/vit_large_patch16_224.augreg_in21k_ft_in1k (ViT-L/16, 1024 features)
    # Revision: the snapshot several public projects pin or hold in their hub cache (two projects; found by code
    # search, not checked against the hub).
    EncoderSpec(
        name="vit-large", family="general", source="timm", model_id="vit_large_patch16_224.augreg_in21k_ft_in1k",
        width=1024, input_size=224, mean=HALF, std=HALF, interpolation="bicubic", pooling="cls",
        licence="apache-2.0", arch={"timm": "vit_large_patch16_224"},
        revision="0930ab3308b84cb2ae091a4a80703c459412a4c7", page="https://huggingface.co/timm/vit_large_patch16_224.augreg_in21k_ft_in1k",
    ),
    # https://huggingface.co/facebook/dinov2-base (ViT-B/14, hidden 768; processor: 224 crop, bicubic, ImageNet).
    # Revision: as pinned in MTEB's model list (embeddings-benchmark/mteb, docs/overview/available_models/image.md).
    EncoderSpec(
        name="dinov2", family="general", source="hf", model_id="facebook/dinov2-base", width=768, input_size=224,
        interpolation="bicubic", pooling="cls", licence="apache-2.0", loader="hf", hf_class="Dinov2Model",
        revision="f9e44c814b77203eaa57a6bdbbd535f21ede1415",
        arch={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 14,
              "image_size": 518},
        page="https://huggingface.co/facebook/dinov2-base",
    ),
    # https://huggingface.co/openai/clip-vit-base-patch16 (ViT-B/16, projection 512, CLIP normalisation).
    # Revision: as pinned in MTEB's ModelMeta (embeddings-benchmark/mteb, mteb/models/clip_models.py).
    EncoderSpec(
        name="clip", family="general", source="hf", model_id="openai/clip-vit-base-patch16", width=512,
        input_size=224, mean=CLIP_MEAN, std=CLIP_STD, interpolation="bicubic", pooling="model", licence="mit",
        loader="hf", hf_class="CLIPVisionModelWithProjection", revision="57c216476eefef5ab752ec549e440a49ae4ae5f3",
        arch={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 16,
              "image_size": 224, "projection_dim": 512},
        page="https://huggingface.co/openai/clip-vit-base-patch16",
    ),
    # https://huggingface.co/google/siglip-base-patch16-224 (vision hidden 768, MAP-head pooled output, 0.5 norm).
    # Revision: as pinned in MTEB's SigLIP ModelMeta (embeddings-benchmark/mteb, mteb/models/siglip_models.py).
    EncoderSpec(
        name="siglip", family="general", source="hf", model_id="google/siglip-base-patch16-224", width=768,
        input_size=224, mean=HALF, std=HALF, interpolation="bicubic", pooling="model", licence="apache-2.0",
        loader="hf", hf_class="SiglipVisionModel", revision="7fd15f0689c79d79e38b1c2e2e2370a7bf2761ed",
        arch={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 16,
              "image_size": 224, "intermediate_size": 3072},
        page="https://huggingface.co/google/siglip-base-patch16-224",
    ),
    # https://huggingface.co/google/siglip-so400m-patch14-384/blob/main/config.json
    # (vision: hidden 1152, intermediate 4304, 27 layers, 16 heads, patch 14, image 384).
    # Revision: as pinned in MTEB's SigLIP ModelMeta (embeddings-benchmark/mteb, mteb/models/siglip_models.py).
    EncoderSpec(
        name="siglip-so400m", family="general", source="hf", model_id="google/siglip-so400m-patch14-384",
        width=1152, input_size=384, mean=HALF, std=HALF, interpolation="bicubic", pooling="model",
        licence="apache-2.0", loader="hf", hf_class="SiglipVisionModel",
        revision="9fdffc58afc957d1a03a25b10dba0329ab15c2a3",
        arch={"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16, "patch_size": 14,
              "image_size": 384, "intermediate_size": 4304},
        page="https://huggingface.co/google/siglip-so400m-patch14-384",
    ),
    # ------------------------------------------------------------------ broad medical
    # https://huggingface.co/google/medsiglip-448 (gated, HAI-DEF terms; 400M SigLIP vision encoder, 448 px)
    # Revision: the snapshot several public projects pin or hold in their hub cache (about eight, incl. a cache
    # path; found by code search, not checked against the hub).
    EncoderSpec(
        name="medsiglip", family="medical", source="hf", model_id="google/medsiglip-448", width=1152,
        input_size=448, mean=HALF, std=HALF, interpolation="bilinear", pooling="model",
        licence="health-ai-developer-foundations", gated=True, loader="hf", hf_class="SiglipVisionModel",
        arch={"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16, "patch_size": 14,
              "image_size": 448, "intermediate_size": 4304},
        revision="9cea28a1a1195f665105faa6e8544c112fd960a4", page="https://huggingface.co/google/medsiglip-448",
    ),
    # https://huggingface.co/google/medgemma-4b-it (gated; Gemma 3 with a SigLIP-400M vision tower at 896 px,
    # no pooling head in the tower: the embedding is the mean of its 4096 patch tokens)
    # Revision: the snapshot several public projects pin or hold in their hub cache (eight or more, incl. cache
    # paths; the repo's update of 2025-10-28; found by code search, not checked against the hub).
    EncoderSpec(
        name="medgemma", family="medical", source="hf", model_id="google/medgemma-4b-it", width=1152,
        input_size=896, mean=HALF, std=HALF, interpolation="bilinear", pooling="mean",
        licence="health-ai-developer-foundations", gated=True, loader="hf-vision-tower",
        arch={"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16, "patch_size": 14,
              "image_size": 896, "intermediate_size": 4304},
        revision="290cda5eeccbee130f987c4ad74a59ae6f196408", page="https://huggingface.co/google/medgemma-4b-it",
    ),
    # https://huggingface.co/microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224 (open_clip checkpoint:
    # a timm vit_base_patch16_224 trunk, CLS token, linear projection 768 -> 512 without bias).
    # Revision: the snapshot ten or more public projects pin or hold in their hub cache (found by code search,
    # not checked against the hub).
    EncoderSpec(
        name="biomedclip", family="medical", source="timm",
        model_id="microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224", width=512, input_size=224,
        mean=CLIP_MEAN, std=CLIP_STD, interpolation="bicubic", pooling="model", licence="mit",
        loader="timm-checkpoint", checkpoint="open_clip_pytorch_model.bin", keymap="open_clip",
        revision="9f341de24bfb00180f1b847274256e9b65a3a32e",
        arch={"timm": "vit_base_patch16_224", "projection_dim": 512},
        page="https://huggingface.co/microsoft/BiomedCLIP-PubMedBERT_256-vit_base_patch16_224",
    ),
    # https://huggingface.co/flaviagiammarino/pubmed-clip-vit-base-patch32 (CLIP ViT-B/32 tuned on ROCO, proj 512)
    # Revision: the snapshot several public projects pin or hold in their hub cache (two or three authors, incl. a
    # cache path; found by code search, not checked against the hub).
    EncoderSpec(
        name="pubmedclip", family="medical", source="hf", model_id="flaviagiammarino/pubmed-clip-vit-base-patch32",
        width=512, input_size=224, mean=CLIP_MEAN, std=CLIP_STD, interpolation="bicubic", pooling="model",
        licence="mit", loader="hf", hf_class="CLIPVisionModelWithProjection",
        arch={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 32,
              "image_size": 224, "projection_dim": 512},
        revision="26c0c67f6da303ad2a38909130bd35744ea93517", page="https://huggingface.co/flaviagiammarino/pubmed-clip-vit-base-patch32",
    ),
    # ------------------------------------------------------------------ specialty
    # https://huggingface.co/microsoft/rad-dino (DINOv2 ViT-B/14 on chest X-rays, 518 px, CLS 768).
    # Revision: the commit whose tree lists the uploaded model.safetensors (tree/2358...). Mean/std are those of
    # its preprocessor_config.json, not checked against the hub's copy of the file.
    EncoderSpec(
        name="rad-dino", family="specialty", source="hf", model_id="microsoft/rad-dino", width=768, input_size=518,
        mean=(0.5307, 0.5307, 0.5307), std=(0.2583, 0.2583, 0.2583), interpolation="bicubic", pooling="cls",
        revision="23589fe9321302b1138a6b6e6f26c349fdbcd752", licence="mit (msrla before 2025)", loader="hf",
        hf_class="Dinov2Model", modality="radiology",
        arch={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 14,
              "image_size": 518},
        page="https://huggingface.co/microsoft/rad-dino",
    ),
    # https://huggingface.co/YukunZhou/RETFound_mae_natureCFP (gated; MAE ViT-L/16 on colour fundus photographs;
    # a PyTorch checkpoint {'model': ...}: loaded with weights_only=True, decoder tensors dropped)
    # Revision: the snapshot several public projects pin or hold in their hub cache (two, one a cache path; found by
    # code search, not checked against the hub).
    EncoderSpec(
        name="retfound", family="specialty", source="timm", model_id="YukunZhou/RETFound_mae_natureCFP", width=1024,
        input_size=224, interpolation="bicubic", pooling="mean", licence="cc-by-nc-4.0", gated=True,
        loader="timm-checkpoint", checkpoint="RETFound_mae_natureCFP.pth", keymap="mae",
        arch={"timm": "vit_large_patch16_224"}, modality="ophthalmology",
        revision="556830f78214f0e8da35af965292ac5a3180ac47", page="https://huggingface.co/YukunZhou/RETFound_mae_natureCFP",
    ),
    # https://github.com/SiyuanYan1/PanDerm (CAE ViT-L/16 with layer scale; linear probe on the normed CLS token;
    # ImageNet normalisation with std 0.228 as in its builder.py). The weights are on Google Drive only (link in
    # the README): download them and pass --weights PATH.
    EncoderSpec(
        name="panderm", family="specialty", source="timm", model_id="SiyuanYan1/PanDerm", width=1024,
        input_size=224, std=(0.228, 0.224, 0.225), interpolation="bilinear", pooling="cls",
        licence="cc-by-nc-nd-4.0 (see the repository)", loader="timm-checkpoint",
        checkpoint="panderm_ll_data6_checkpoint-499.pth", keymap="cae",
        arch={"timm": "vit_large_patch16_224", "init_values": 0.1, "hub": False}, modality="dermatology",
        revision_note="not on a model hub (Google Drive only): the sha256 of the --weights file is recorded instead",
        page="https://github.com/SiyuanYan1/PanDerm",
    ),
    # https://huggingface.co/suinleelab/monet (CLIP ViT-L/14 trained on dermatology image-text pairs; proj 768)
    # Revision: the head of main on the hub's own tree page as stored by the library's crawl ("update bibtex";
    # no project pins it).
    EncoderSpec(
        name="monet", family="specialty", source="hf", model_id="suinleelab/monet", width=768, input_size=224,
        mean=CLIP_MEAN, std=CLIP_STD, interpolation="bicubic", pooling="model", licence="see the model card",
        loader="hf", hf_class="CLIPVisionModelWithProjection", modality="dermatology",
        arch={"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "patch_size": 14,
              "image_size": 224, "projection_dim": 768, "intermediate_size": 4096},
        revision="1d1efd0b8d61bde82cde22d2e93c28d73441f29e", page="https://huggingface.co/suinleelab/monet",
    ),
)



def index(specs, where: str = "the built-in registry") -> dict[str, EncoderSpec]:
    """{name: record} of checked records; a name given twice is refused (``where`` names the source)."""
    out: dict[str, EncoderSpec] = {}
    for spec in specs:
        if spec.name in out:
            raise BadInput(f"{where}: encoder name {spec.name!r} is given twice; every record needs its own name")
        out[spec.name] = check_spec(spec)
    return out


ENCODERS: dict[str, EncoderSpec] = index(_REGISTRY)


def names() -> list[str]:
    return list(ENCODERS)


def demo_names() -> list[str]:
    """The encoders that need no download (``crs demo`` and ``--all`` use these)."""
    return [s.name for s in ENCODERS.values() if not s.pretrained or s.source == "builtin"]


def get(name: str) -> EncoderSpec:
    try:
        return ENCODERS[name]
    except KeyError:
        raise KeyError(
            f"unknown encoder {name!r}; valid encoders: {', '.join(ENCODERS)} "
            "(or timm:NAME, hf:ORG/NAME, or --encoder-file spec.toml)"
        ) from None


def reference_for(names: list[str]) -> tuple[str | None, str]:
    """(the reference encoder of a comparison set, or None; a one-line note saying which and why).

    The registry's reference of real runs (the pretrained record marked ``reference``:
    resnet50) when it is among ``names``; else the demo's (demo-resnet) when that is; else
    None, and the note says so, so that the caller can print it and record its fallback."""
    names = list(names)
    marked = [s for s in ENCODERS.values() if s.reference]
    real = [s.name for s in marked if s.pretrained and s.source != "builtin"]
    demo = [s.name for s in marked if s.name not in real]
    for pool, what in ((real, "the registry's reference (a supervised ImageNet CNN)"),
                       (demo, "the demo's reference (random weights)")):
        for ref in pool:
            if ref in names:
                return ref, f"reference auto: {ref}, {what}; CRS is scaled so that {ref} scores 50"
    shown = ", ".join(names[:6]) + (f", ... ({len(names)} encoders)" if len(names) > 6 else "")
    return None, (
        f"reference 'auto': none of the scored encoders ({shown}) is a registry reference "
        f"({' or '.join(real + demo)}); fell back to 'median' (each axis scored against the median over the "
        f"encoders: an encoder at that median on every axis scores 50); add {real[0] if real else demo[0]} to "
        "the encoders, or pass --reference ENCODER to choose one"
    )


def default_reference(encoders: list[str]) -> str:
    """The reference ``reference_for`` picks, else 'median' (the fallback of ``--reference auto``)."""
    ref, _ = reference_for(encoders)
    return ref if ref is not None else "median"


def null_like(spec: EncoderSpec) -> EncoderSpec:
    """A stand-in with ``spec``'s width, input size and preprocessing whose model costs next to nothing
    (``crs.extract.models.NullModel``): what the pipeline alone can feed (``benchmarks/extract_bench.py
    --encoder null``), and the tests' cheap encoder. Not a registry record."""
    return EncoderSpec(name=f"null-{spec.name}", family="baseline", source="builtin", model_id="null",
                       width=spec.width, input_size=spec.input_size, mean=spec.mean, std=spec.std,
                       interpolation=spec.interpolation, pretrained=False, licence="apache-2.0", loader="builtin")


def with_revision(spec: EncoderSpec, revision: str | None) -> EncoderSpec:
    """``spec`` pinned to ``revision`` for one run (``--revision ENCODER=REV``, or ``revision`` in an
    encoder file / the TOML config). A full 40-hex commit id or a branch/tag name; None keeps the record's."""
    if revision is None:
        return spec
    why = revision_problem(revision)
    if why:
        raise BadInput(f"--revision {spec.name}={revision}: {why}")
    if spec.source == "builtin" or not spec.pretrained:
        raise BadInput(f"--revision {spec.name}={revision}: {spec.name!r} loads no hub weights "
                       f"({spec.weight_source}); there is nothing to pin")
    if spec.arch.get("hub", True) is False:
        raise BadInput(f"--revision {spec.name}={revision}: {spec.name!r} is not on a model hub; its --weights file "
                       "is identified by its sha256 instead")
    return dataclasses.replace(spec, revision=revision, revision_note=None)


# ---------------------------------------------------------------- user-given encoders
def from_id(text: str) -> EncoderSpec:
    """A record for ``timm:NAME`` or ``hf:ORG/NAME`` given on the command line.

    timm ids take their width, input size and normalisation from timm's pretrained
    config when the model is loaded (``width=0`` here means "ask the model"); hf ids use
    ``AutoModel`` and the model's pooled output. The store key is ``store_key(text)``.
    """
    from crs.store.keys import store_key  # crs.store loads zarr: `crs encoders` does not

    kind, _, ident = text.partition(":")
    if kind not in ("timm", "hf") or not ident or any(ord(c) < 32 for c in ident):
        raise BadInput(f"encoder id {text!r} must look like timm:NAME or hf:ORG/NAME")
    if kind == "hf" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*", ident):
        raise BadInput(f"encoder id {text!r}: hf ids look like hf:ORG/NAME (letters, digits, '.', '_', '-')")
    return EncoderSpec(
        name=store_key(text), family="general", source=kind, model_id=ident, width=0, input_size=224,
        pooling="model", loader="timm" if kind == "timm" else "hf",
        hf_class=None if kind == "timm" else "AutoModel", licence="see the model card",
    )


def from_toml(path: str) -> list[EncoderSpec]:
    """Records from a TOML file: one ``[[encoder]]`` table per record, keys as in EncoderSpec."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"{path}: not valid TOML ({exc})") from None
    tables = data.get("encoder")
    if not isinstance(tables, list) or not tables:
        raise BadInput(f"{path}: expected one or more [[encoder]] tables")
    known = {f.name for f in dataclasses.fields(EncoderSpec)}
    specs = []
    for i, t in enumerate(tables):
        unknown = set(t) - known
        if unknown:
            raise BadInput(f"{path}: [[encoder]] #{i + 1} has unknown keys {sorted(unknown)}; valid: {sorted(known)}")
        missing = {"name", "family", "source", "model_id", "width", "input_size"} - set(t)
        if missing:
            raise BadInput(f"{path}: [[encoder]] #{i + 1} lacks {sorted(missing)}")
        t = dict(t)
        for key in ("mean", "std"):
            if key in t:
                t[key] = tuple(t[key])
        t.setdefault("loader", "hf" if t["source"] == "hf" else t["source"])
        spec = check_spec(EncoderSpec(**t))
        if spec.name in ENCODERS:
            raise BadInput(f"{path}: encoder name {spec.name!r} is taken by the built-in registry; rename it")
        specs.append(spec)
    index(specs, where=path)  # a name twice in one file
    return specs


def resolve(name: str, extra: dict[str, EncoderSpec] | None = None) -> EncoderSpec:
    """A registry name, a user record (from --encoder-file), or a timm:/hf: id."""
    if extra and name in extra:
        return extra[name]
    if name.startswith(("timm:", "hf:")):
        return from_id(name)
    return get(name)
