"""Side-by-side, in one run, same model, batch size and precision:

(a) raw forward throughput: the encoder on pre-made tensors already at its input size;
(b) the whole ``crs extract`` pipeline: PNG files on disk -> decode (DataLoader workers) ->
    clean + perturbed conditions -> resize, normalise, forward -> a complete store, with its time per
    stage (``crs.extract.timing``: decode, host-side perturbation, host to device, device-side
    perturbation, forward, device to host, store write, the main thread's wait) in seconds per 1,000
    forward images (``stages_s_per_1000``; the workers' stages summed over the workers, the device's
    from CUDA events on CUDA). ``--encoder null`` runs it with an encoder of ``--like``'s width and input
    size that costs next to nothing (``crs.extract.models.NullModel``): what the pipeline alone can feed;
    ``--null-ceiling`` runs that too beside a real encoder (``null_ceiling``).

(c) perturbation throughput alone, per modality suite (``--suites``): perturbed images/s of every
    family at every severity of ``--severities`` on a batch at the working size (``--work-size``), beside
    the raw forward rate of ViT-B/16 at 224 (timm, random weights) timed in the same run (before and
    after the suites; best of ``--repeats`` calls per family and severity, default 2; ``--families``
    times only those families, e.g. ``zoom_blur`` with ``--repeats 7`` on a busy machine). The goal is a
    suite rate above the ViT rate: perturbing an image costs less than embedding it. ``--compare-with
    PATH`` times another ``perturb.py`` (e.g. main's) on the same images, for before/after ratios.
    ``--perturb-only`` runs (c) alone.

Images per second count forward passes (an image under 16 conditions counts 16 times).
The pipeline decodes each file once (``decodes``). The model has random weights (no
download): any registry record's architecture, or a timm architecture name. Prints both
rates and their ratio; the last line is one JSON object. Usage:

    python benchmarks/extract_bench.py [--encoder vit-base|null] [--like vit-base] [--null-ceiling]
        [--images 256] [--batch 64] [--file-size 256] [--severities 3|default] [--workers 2]
        [--device cpu] [--precision auto] [--no-suite-rates]

The resume unit: (b) also times every commit (a chunk of one condition with its done flag).
A kill loses what was computed since the last commit: ``commit_gap_max_s`` now that each
(chunk, condition) is committed as soon as it is embedded, ``unit_max_s`` when a unit (a chunk
under every condition) was committed only once all its conditions were embedded. Test rows
come first in the store, so the first units are all test images, each embedded under all
``conditions``: ``unit_at_chunk_s`` and ``commit_at_chunk_s`` scale the measured cost per
(image, condition) of those units to ``--at-chunk`` images (default 256, the CLI's --chunk).
With ``--images 4*chunk`` units 0 and 1 are all test; unit 0 (model warm-up) is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


class PngDataset:
    """A dataset of PNG files: half test, half train (crs.extract.datasets.Dataset's members)."""

    task, classes, ordinal, shift_target, shift_spec = "multiclass", ("a", "b"), False, None, None
    description, source, size, seed, provenance = "benchmark PNG files", "benchmark", 1.0, 0, None

    def __init__(self, folder: Path, n: int, image_size: int, modality: str):
        self.name = "bench"
        self.paths = [folder / f"{i:05d}.png" for i in range(n)]
        self.image_size, self.modality = image_size, modality

    def table(self):
        from crs.extract.table import Table

        n = len(self.paths)
        return Table(ids=np.array([p.stem for p in self.paths]), labels=np.arange(n) % 2,
                     split=np.where(np.arange(n) % 2 == 0, 2, 0).astype(np.int8),
                     group=np.array([p.stem for p in self.paths]))

    def images(self, rows):
        return np.stack([self.load_image(r) for r in rows])

    def load_image(self, row):
        from PIL import Image

        with Image.open(self.paths[row]) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)


def write_pngs(folder: Path, n: int, size: int) -> None:
    from PIL import Image

    from crs.extract import synthetic

    ds = synthetic.get("demo_derm", size=max(n / 900, 0.05))
    imgs = ds.images(np.arange(n) % len(ds.table().ids))
    for i, img in enumerate(imgs):
        Image.fromarray(img).resize((size, size), Image.BILINEAR).save(folder / f"{i:05d}.png")


def random_weights(name: str, tmp: Path):
    """(spec, weights path or None): the record's architecture with random weights, no download."""
    import torch

    from crs.extract import encoders
    from crs.extract.models import build_random
    from crs.store.keys import store_key

    if name in encoders.ENCODERS:
        spec = encoders.get(name)
    else:  # a timm architecture name
        spec = encoders.EncoderSpec(name=store_key(name), family="general", source="timm",
                                    model_id=name, width=0, input_size=224)
    if spec.source == "builtin" or not spec.pretrained:
        return spec, None
    if spec.loader == "timm" and spec.width == 0:
        import timm

        m = timm.create_model(name, pretrained=False, num_classes=0)
        spec = dataclasses.replace(spec, width=int(m.num_features), pretrained=False, init_seed=0,
                                   input_size=int(m.pretrained_cfg["input_size"][-1]))
        return spec, None
    if spec.loader == "timm":
        return dataclasses.replace(spec, model_id=spec.arch.get("timm", spec.model_id), pretrained=False,
                                   init_seed=0), None
    torch.manual_seed(0)
    model, _ = build_random(spec)
    folder = tmp / "weights"
    folder.mkdir()
    if spec.loader == "hf":
        model.save_pretrained(folder)
        return spec, str(folder)
    if spec.loader == "hf-vision-tower":
        from safetensors.torch import save_file

        cfg = {k: getattr(model.config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                      "num_attention_heads", "patch_size", "image_size")}
        (folder / "config.json").write_text(json.dumps(
            {"vision_config": {"model_type": "siglip_vision_model", **cfg, "vision_use_head": False}}))
        save_file({"vision_tower." + k: v.contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model.safetensors"))
        return spec, str(folder)
    # timm-checkpoint records: save the random timm model plainly and load it as a timm record
    path = folder / "model.safetensors"
    from safetensors.torch import save_file

    if spec.keymap == "open_clip":
        save_file({"visual.trunk." + k: v.contiguous() for k, v in model.trunk.state_dict().items()}
                  | {"visual.head.proj.weight": model.proj.weight.detach().contiguous()}, str(path))
    else:
        spec = dataclasses.replace(spec, keymap=None)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return spec, str(path)


def load_perturb_module(path: str):
    """Another ``perturb.py`` (e.g. ``/work/main/extract/perturb.py``) as a module of its own name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("perturb_compared", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def suite_rates(mods: list, x, modality: str, severities: tuple[int, ...], ids: list[str], repeats: int = 2,
                families: tuple[str, ...] | None = None) -> list[tuple[float, dict]]:
    """Per module of ``mods``: (perturbed images/s over the suite's conditions, seconds per image of each
    family). The modules' calls alternate (family by family, severity by severity, best of ``repeats``), so a
    change in the machine's load falls on all of them alike."""
    per_family = [{} for _ in mods]
    for family in mods[0].suite(modality):
        if families and family not in families:
            continue
        for s in severities:
            for i, mod in enumerate(mods):
                best = math.inf
                for _ in range(repeats):
                    t = time.perf_counter()
                    mod.apply(x, family, s, ids)
                    best = min(best, time.perf_counter() - t)
                per_family[i][family] = per_family[i].get(family, 0.0) + best / (len(severities) * len(x))
    return [(1.0 / (sum(f.values()) / len(f)), f) for f in per_family]


def vit_forward_rate(batch: int, batches: int = 3) -> float:
    """Raw forward images/s of ViT-B/16 at 224 (timm, random weights, float32, no grad) on the CPU."""
    import timm
    import torch

    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0).eval()
    x = torch.rand(batch, 3, 224, 224)
    with torch.inference_mode():
        model(x)  # warm-up
        t = time.perf_counter()
        for _ in range(batches):
            model(x)
    return batches * batch / (time.perf_counter() - t)


DEMO_OF = {"dermatology": "demo_derm", "ophthalmology": "demo_fundus", "radiology": "demo_cxr"}


def perturb_rates(args, sev: tuple[int, ...]) -> dict:
    """(c): each suite's perturbed images/s at the working size, interleaved with ViT-B/16's forward rate
    (timed before and after the suites: the machine's load moves both alike)."""
    import torch

    from crs.extract import perturb, synthetic

    ids = [f"img{i}" for i in range(args.perturb_batch)]

    def batch(modality: str):  # the demo dataset of the modality (grey X-rays for radiology), at the working size
        ds = synthetic.get(DEMO_OF[modality], size=0.05)
        imgs = torch.from_numpy(ds.images(np.arange(args.perturb_batch))).permute(0, 3, 1, 2).float().div(255)
        return torch.nn.functional.interpolate(imgs, size=(args.work_size,) * 2, mode="bilinear").clamp(0, 1)

    vit = [vit_forward_rate(args.perturb_batch)]
    other = load_perturb_module(args.compare_with) if args.compare_with else None
    out = {"work_size": args.work_size, "perturb_batch": args.perturb_batch, "severities": list(sev), "suites": {}}
    for modality in args.suites.split(","):
        x = batch(modality)
        rates = suite_rates([perturb] + ([other] if other is not None else []), x, modality, sev, ids,
                            repeats=args.repeats, families=tuple(args.families.split(",")) if args.families else None)
        rate, fams = rates[0]
        row = {"perturbed_images_per_s": round(rate, 2),
               "ms_per_image": {f: round(v * 1000, 2) for f, v in sorted(fams.items(), key=lambda kv: -kv[1])}}
        if other is not None:
            rate_o, fams_o = rates[1]
            row["compared_images_per_s"] = round(rate_o, 2)
            row["speedup"] = round(rate / rate_o, 2)
            row["compared_ms_per_image"] = {f: round(v * 1000, 2) for f, v in fams_o.items()}
        out["suites"][modality] = row
    vit.append(vit_forward_rate(args.perturb_batch))
    out["vit_b16_224_images_per_s"] = round(float(np.mean(vit)), 2)
    for modality, row in out["suites"].items():
        row["ratio_to_vit"] = round(row["perturbed_images_per_s"] / out["vit_b16_224_images_per_s"], 2)
        print(f"{modality} suite at {args.work_size} px: {row['perturbed_images_per_s']:.1f} perturbed images/s "
              f"({row['ratio_to_vit']:.2f} x ViT-B/16's forward at 224, {out['vit_b16_224_images_per_s']:.1f}/s)"
              + (f"; compared module {row['compared_images_per_s']:.1f}/s (speedup {row['speedup']:.2f})"
                 if other is not None else ""), file=sys.stderr)
    out["torch_threads"] = torch.get_num_threads()
    return out


@contextlib.contextmanager
def timed_commits():
    """Record (time, chunk, condition) of every chunk commit (``EmbeddingArray.write_chunk``)."""
    from crs.store.zarr_store import EmbeddingArray

    out, write = [], EmbeddingArray.write_chunk

    def timed(self, j, values):
        write(self, j, values)
        out.append((time.perf_counter(), j, self.condition, len(values)))

    EmbeddingArray.write_chunk = timed
    try:
        yield out
    finally:
        EmbeddingArray.write_chunk = write


def unit_costs(commits: list, n_cond: int, at_chunk: int) -> dict:
    """What a kill can lose, from the commit times of the all-test units after the first: the
    longest gap between two commits, and a unit's whole time (from its predecessor's last commit)."""
    commits = sorted(commits)
    last = {}
    for t, j, _, _ in commits:
        last[j] = t
    full = [j for j in sorted(last) if j > 0 and sum(1 for c in commits if c[1] == j) == n_cond]
    if not full:
        return {}
    gaps, spans, per_image_cond = [], [], []
    for j in full:
        start = last[j - 1]
        mine = [c for c in commits if c[1] == j]
        ts = [start] + [c[0] for c in mine]
        gaps += [b - a for a, b in zip(ts, ts[1:])]
        spans.append(ts[-1] - start)
        per_image_cond.append((ts[-1] - start) / (mine[0][3] * n_cond))
    cost = float(np.mean(per_image_cond))
    return {"commit_gap_max_s": round(max(gaps), 3), "unit_max_s": round(max(spans), 3),
            "seconds_per_image_condition": round(cost, 5), "at_chunk": at_chunk,
            "commit_at_chunk_s": round(cost * at_chunk * max(gaps) / np.mean(gaps), 2),
            "unit_at_chunk_s": round(cost * at_chunk * n_cond, 2)}


def pipeline(store_path: Path, spec, weights, ds, args, sev, device) -> tuple:
    """(b) once: (the run's summary, seconds per stage per 1,000 forward images, the commit times)."""
    from crs.extract.options import ExtractOptions
    from crs.extract.run import extract
    from crs.extract.timing import StageTimes
    from crs.store import Store

    stages = StageTimes(device)
    with timed_commits() as commits:
        options = ExtractOptions(chunk=args.chunk, batch=args.batch, device=str(device), severities=sev,
                                 workers=args.workers, weights=weights, precision=args.precision)
        run = extract(Store(str(store_path)), spec, "bench", options, ds=ds, stages=stages)
    assert run.complete
    return run, stages.per_thousand(run.forward_images), commits


def stage_line(name: str, rate: float, per_1000: dict) -> str:
    parts = ", ".join(f"{k} {v:.3g}" for k, v in per_1000.items())
    return f"{name}: {rate:.1f} images/s; seconds per 1,000 forward images: {parts}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoder", default="vit-base", help="registry name or timm architecture (random weights); "
                    "'null': the pipeline alone (embeddings of --like's width and input size at next to no cost)")
    ap.add_argument("--like", default="vit-base", help="with --encoder null: the registry record it stands in for")
    ap.add_argument("--null-ceiling", action="store_true", help="also run the pipeline with the null stand-in of "
                    "--encoder (its ceiling), beside the encoder's own")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--file-size", type=int, default=256, help="side of the PNG files")
    ap.add_argument("--severities", default="3", help="comma-separated severities of the suite, or 'default' "
                    "(every severity, as crs extract)")
    ap.add_argument("--modality", default="dermatology")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--device", default=None)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--raw-batches", type=int, default=0, help="forward batches for (a); default: as many as (b) runs")
    ap.add_argument("--at-chunk", type=int, default=256, help="chunk length the unit costs are scaled to")
    ap.add_argument("--suites", default="dermatology,ophthalmology,radiology", help="(c): the suites timed")
    ap.add_argument("--no-suite-rates", action="store_true", help="skip (c)")
    ap.add_argument("--work-size", type=int, default=512, help="(c): side of the images perturbed")
    ap.add_argument("--perturb-batch", type=int, default=8, help="(c): images per perturbed batch")
    ap.add_argument("--compare-with", default=None, metavar="PERTURB_PY",
                    help="(c): also time this perturb.py on the same images (before/after)")
    ap.add_argument("--perturb-only", action="store_true", help="run (c) alone")
    ap.add_argument("--repeats", type=int, default=2, help="(c): best of this many calls per (family, severity)")
    ap.add_argument("--families", default=None, help="(c): time only these families (comma-separated; the rate "
                    "is then theirs, not the suite's)")
    args = ap.parse_args()

    import torch

    from crs.extract import encoders, perturb
    from crs.extract.models import load, pick_device

    device = pick_device(args.device)
    sev = perturb.SEVERITIES if args.severities == "default" else \
        tuple(int(s) for s in args.severities.split(",") if s.strip())
    perturbation = None if args.no_suite_rates else perturb_rates(args, sev)
    if args.perturb_only:
        print(json.dumps({"perturbation": perturbation}))
        return
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "png").mkdir()
        write_pngs(tmp / "png", args.images, args.file_size)
        if args.encoder == "null":
            spec, weights = encoders.null_like(encoders.get(args.like)), None
        else:
            spec, weights = random_weights(args.encoder, tmp)
        ds = PngDataset(tmp / "png", args.images, args.file_size, args.modality)

        # (a) raw forward on pre-made tensors at the input size
        enc = load(spec, device, weights=weights, precision=args.precision)
        spec = enc.spec
        n_cond = 1 + len(perturb.conditions(args.modality, sev))
        n_forward = args.images + (args.images // 2) * (n_cond - 1)
        batches = args.raw_batches or max(3, -(-n_forward // args.batch))
        x = torch.rand(args.batch, 3, spec.input_size, spec.input_size, device=device)
        for _ in range(2):  # warm-up (cudnn autotune, allocator)
            enc(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(batches):
            out = enc(x)
        out.cpu()
        if device.type == "cuda":
            torch.cuda.synchronize()
        raw = batches * args.batch / (time.perf_counter() - t)
        del enc

        # (b) the pipeline, files to a complete store; then, with --null-ceiling, the same with the null stand-in
        t = time.perf_counter()
        run, stages, commits = pipeline(tmp / "store.zarr", spec, weights, ds, args, sev, device)
        total = time.perf_counter() - t
        pipeline_rate = run.forward_images / run.seconds
        units = unit_costs(commits, n_cond, args.at_chunk)
        ceiling = None
        if args.null_ceiling and args.encoder != "null":
            null = encoders.null_like(spec)
            nrun, nstages, _ = pipeline(tmp / "null.zarr", null, None, ds, args, sev, device)
            ceiling = {"images_per_s": round(nrun.forward_images / nrun.seconds, 2),
                       "ratio_to_raw": round(nrun.forward_images / nrun.seconds / raw, 2),
                       "stages_s_per_1000": nstages}
    result = {
        "benchmark": "extract", "encoder": args.encoder, **({"like": args.like} if args.encoder == "null" else {}),
        "device": str(device), "precision": args.precision, "batch": args.batch,
        "input_size": spec.input_size, "file_size": args.file_size, "workers": args.workers,
        "severities": list(sev), "modality": args.modality,
        "raw_images_per_s": round(raw, 2), "pipeline_images_per_s": round(pipeline_rate, 2),
        "ratio": round(pipeline_rate / raw, 3), "stages_s_per_1000": stages,
        "raw_forward_s_per_1000": round(1000 / raw, 4), "null_ceiling": ceiling,
        "images": args.images, "conditions": n_cond,
        "forward_images": run.forward_images, "decodes": run.decodes,
        "pipeline_seconds_with_model_load": round(total, 2), "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(), "chunk": args.chunk, **units, "perturbation": perturbation,
    }
    print(f"{args.encoder} on {device} ({args.precision}, batch {args.batch}): raw forward {raw:.1f} images/s, "
          f"pipeline {pipeline_rate:.1f} images/s (ratio {pipeline_rate / raw:.2f}); {run.decodes} decodes for "
          f"{args.images} files x {n_cond} conditions", file=sys.stderr)
    print(stage_line("pipeline", pipeline_rate, stages), file=sys.stderr)
    if ceiling is not None:
        print(stage_line("null ceiling", ceiling["images_per_s"], ceiling["stages_s_per_1000"]), file=sys.stderr)
    if "unit_at_chunk_s" in units:
        print(f"resume unit at chunk {args.at_chunk}, {n_cond} conditions: a kill loses up to "
              f"{units['commit_at_chunk_s']:.1f} s (one chunk x one condition; was the whole unit, "
              f"{units['unit_at_chunk_s']:.1f} s)", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
