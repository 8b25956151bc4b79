"""``Encoder``: a loaded model with its preprocessing, mapping images [n, 3, H, W] in [0, 1] to
embeddings [n, width] (pooling, bf16 autocast on CUDA, channels-last CNNs), and the built-in models."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from crs.extract.encoders import EncoderSpec
from crs.extract.models.weights import weights_info
from crs.foundations.errors import BadInput


class ColourTextureStats(torch.nn.Module):
    """A non-deep baseline: 54 colour and texture statistics of an image in [0, 1].

    Per channel: mean, std and the 10/25/50/75/90% order statistics (21); mean and std of the
    gradient magnitude (6); mean |Laplacian| (3); a 16-bin grey-level histogram (16);
    centre-minus-border mean (3); mean std inside 4x4 blocks (3); mean and std of chroma
    (max - min over channels) (2).
    """

    width = 54

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [n, 3, H, W] in [0, 1]
        n, c, h, w = x.shape
        flat = x.reshape(n, c, -1)
        ordered = flat.sort(dim=2).values
        at = [min(int(round(f * (h * w - 1))), h * w - 1) for f in (0.1, 0.25, 0.5, 0.75, 0.9)]
        stats = [flat.mean(2), flat.std(2), *(ordered[..., i] for i in at)]  # 7 x [n, c]
        gx = x[..., :, 1:] - x[..., :, :-1]
        gy = x[..., 1:, :] - x[..., :-1, :]
        grad = torch.sqrt(gx[..., :-1, :] ** 2 + gy[..., :, :-1] ** 2 + 1e-12).reshape(n, c, -1)
        stats += [grad.mean(2), grad.std(2)]
        lap_kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=x.device)
        lap = F.conv2d(x.reshape(n * c, 1, h, w), lap_kernel.view(1, 1, 3, 3)).reshape(n, c, -1)
        stats.append(lap.abs().mean(2))
        grey = x.mean(1).reshape(n, -1)
        bins = torch.clamp((grey * 16).long(), 0, 15)
        hist = torch.zeros(n, 16, device=x.device).scatter_add_(1, bins, torch.ones_like(grey)) / grey.shape[1]
        ch, cw = h // 4, w // 4
        centre = x[..., ch : h - ch, cw : w - cw].reshape(n, c, -1).mean(2)
        stats.append(centre - flat.mean(2))
        m1 = F.avg_pool2d(x, 4)
        m2 = F.avg_pool2d(x * x, 4)
        local = (m2 - m1 * m1).clamp_min(0).sqrt()  # std inside each 4x4 block
        stats.append(local.reshape(n, c, -1).mean(2))
        chroma = (x.amax(1) - x.amin(1)).reshape(n, -1)
        out = torch.cat([torch.cat(stats, 1), hist, chroma.mean(1, keepdim=True), chroma.std(1, keepdim=True)], 1)
        return out


class NullModel(torch.nn.Module):
    """The pipeline's ceiling (``benchmarks/extract_bench.py --encoder null``): embeddings of the right
    width at next to no cost, each a function of its own image only (means of a 4 x 4 grid of its
    pixels, 48 values, repeated to ``width``), so a change in what an image became shows in them."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [n, 3, H, W]
        cells = F.adaptive_avg_pool2d(x, 4).flatten(1)  # [n, 48]
        return cells.repeat(1, -(-self.width // cells.shape[1]))[:, : self.width]


# Token models: how many leading tokens are not patches (CLS, registers), per transformers class
_PREFIX_TOKENS = {"Dinov2Model": 1, "CLIPVisionModelWithProjection": 1, "SiglipVisionModel": 0}


class Encoder:
    """A loaded encoder: preprocessing plus model, mapping [n, 3, H, W] in [0, 1] to [n, width]."""

    def __init__(self, spec: EncoderSpec, model: torch.nn.Module, device: torch.device, kind: str = "timm",
                 precision: str = "auto"):
        self.spec = spec
        self.kind = kind  # "timm" | "hf" | "builtin": how the model is called
        self.device = torch.device(device)
        self.model = model.eval().to(self.device)
        # bf16 autocast on CUDA (the store keeps float16/float32 either way); exact float32 on the CPU
        self.autocast = self.device.type == "cuda" and precision in ("auto", "bf16")
        if self.device.type == "cuda" and kind == "timm" and _is_cnn(model):
            self.model = self.model.to(memory_format=torch.channels_last)
            self.channels_last = True
        else:
            self.channels_last = False
        self.mean = torch.tensor(spec.mean, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec.std, device=self.device).view(1, 3, 1, 1)
        # what was loaded: {"source", "revision_requested", "revision_loaded", "weights_sha256"} (set by load)
        self.weights_info: dict = weights_info(spec.weight_source, spec.revision)
        # the record is the user's (--encoder-file), not the registry's: a wrong width is bad input (set by load)
        self.user_record = False

    @property
    def width(self) -> int:
        return self.spec.width

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        size = self.spec.input_size
        if x.shape[-2:] != (size, size):
            mode = self.spec.interpolation
            x = F.interpolate(
                x, size=(size, size), mode=mode, antialias=mode in ("bilinear", "bicubic"),
                align_corners=False if mode != "nearest" else None,
            ).clamp(0, 1)
        return (x - self.mean) / self.std

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        pooling = self.spec.pooling
        if self.kind == "builtin":
            return self.model(x)
        if self.kind == "hf":
            out = self.model(pixel_values=x)
            cls = type(self.model).__name__
            if pooling == "model":
                pooled = getattr(out, "image_embeds", None)
                if pooled is None:
                    pooled = getattr(out, "pooler_output", None)
                if pooled is None:  # a model without a pooled output: mean of its tokens
                    pooled = out.last_hidden_state[:, _PREFIX_TOKENS.get(cls, 0):].mean(1)
                return pooled.flatten(1)
            tokens = out.last_hidden_state
            if pooling == "cls":
                return tokens[:, 0]
            return tokens[:, _PREFIX_TOKENS.get(cls, 0):].mean(1)
        if pooling == "model":
            return self.model(x)
        feats = self.model.forward_features(x)
        if feats.ndim == 4:  # CNN feature map [n, C, h, w]
            return feats.mean((2, 3))
        if pooling == "cls":
            return feats[:, 0]
        if pooling == "mean":
            return feats[:, getattr(self.model, "num_prefix_tokens", 0):].mean(1)
        raise ValueError(f"encoder {self.spec.name!r}: unknown pooling {pooling!r} (model, cls, mean)")

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self.preprocess(x.to(self.device, non_blocking=True))
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            out = self._forward(x)
        if out.ndim != 2 or out.shape[1] != self.spec.width:
            raise self._width_error(tuple(out.shape))
        return out.float()

    def _width_error(self, shape: tuple[int, ...]) -> Exception:
        """Embeddings of another shape than [n, width]: bad input where the user declared the record (an
        --encoder-file record, ``user_record``), else a registry record that is wrong, our bug."""
        name, declared = self.spec.name, self.spec.width
        if not self.user_record:
            return RuntimeError(f"encoder {name!r} gave embeddings of shape {shape}; its registry record says "
                                f"width {declared}. Fix the record's width or pooling")
        if len(shape) != 2:
            return BadInput(f"encoder {name!r}: its record declares width {declared}, but the model gives "
                            f"embeddings of shape {shape}, not [images, width]; set `pooling` (model, cls or mean) "
                            "of its record in the encoder file (--encoder-file)")
        return BadInput(f"encoder {name!r}: its record in the encoder file declares width {declared}, but the "
                        f"model gives embeddings of width {shape[1]}; correct `width` to {shape[1]} in the "
                        "encoder file (--encoder-file)")


def _is_cnn(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules()) and not hasattr(model, "patch_embed")


def pick_device(name: str | None = None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def builtin_model(spec: EncoderSpec) -> torch.nn.Module:
    if spec.model_id == "null":  # not a registry record: a benchmark's and the tests' stand-in
        return NullModel(spec.width)
    if spec.model_id != "colour_texture_stats":
        raise ValueError(f"unknown builtin encoder {spec.model_id!r}")
    return ColourTextureStats()
