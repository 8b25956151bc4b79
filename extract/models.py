"""Load an encoder from its registry record and turn image batches into embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from crs.extract.encoders import EncoderSpec


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


class Encoder:
    """A loaded encoder: preprocessing plus model, mapping [n, 3, H, W] in [0, 1] to [n, width]."""

    def __init__(self, spec: EncoderSpec, model: torch.nn.Module, device: torch.device):
        self.spec = spec
        self.model = model.eval().to(device)
        self.device = device
        self.mean = torch.tensor(spec.mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec.std, device=device).view(1, 3, 1, 1)

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        size = self.spec.input_size
        if x.shape[-2:] != (size, size):
            mode = self.spec.interpolation
            x = F.interpolate(
                x, size=(size, size), mode=mode, antialias=mode in ("bilinear", "bicubic"),
                align_corners=False if mode != "nearest" else None,
            ).clamp(0, 1)
        return (x - self.mean) / self.std

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self.preprocess(x.to(self.device))
        pooling = self.spec.pooling
        if pooling == "model" or self.spec.source == "builtin":
            out = self.model(x)
        else:
            feats = self.model.forward_features(x)
            if feats.ndim == 4:  # CNN feature map [n, C, h, w]
                out = feats.mean((2, 3))
            elif pooling == "cls":
                out = feats[:, 0]
            elif pooling == "mean":
                prefix = getattr(self.model, "num_prefix_tokens", 0)
                out = feats[:, prefix:].mean(1)
            else:
                raise ValueError(f"encoder {self.spec.name!r}: unknown pooling {pooling!r} (model, cls, mean)")
        if out.ndim != 2 or out.shape[1] != self.spec.width:
            raise RuntimeError(
                f"encoder {self.spec.name!r} gave embeddings of shape {tuple(out.shape)}; its registry "
                f"record says width {self.spec.width}. Fix the record's width or pooling"
            )
        return out.float()


def pick_device(name: str | None = None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load(spec: EncoderSpec, device: torch.device | None = None) -> Encoder:
    """Build the model through its library's normal path and wrap it with its preprocessing."""
    device = device or pick_device()
    if spec.source == "builtin":
        if spec.model_id != "colour_texture_stats":
            raise ValueError(f"unknown builtin encoder {spec.model_id!r}")
        model: torch.nn.Module = ColourTextureStats()
    elif spec.source == "timm":
        import timm

        if spec.init_seed is not None:
            torch.manual_seed(spec.init_seed)
        model = timm.create_model(spec.model_id, pretrained=spec.pretrained, num_classes=0, **spec.kwargs)
    else:
        raise ValueError(f"encoder {spec.name!r}: source {spec.source!r} is not supported yet (timm, builtin)")
    return Encoder(spec, model, device)
