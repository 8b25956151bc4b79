"""The full benchmark on paper: images x conditions x encoders, forward FLOPs per image from each
registry record's architecture, GPU-hours on one H200 at a stated utilisation, store size in
float16. Prints a Markdown table per section (docs/scaling.md quotes them) and, last, one JSON
object. Nothing is downloaded or run: the numbers follow from the registry and the suites.

    python benchmarks/scaling_plan.py [--utilisation 0.4] [--peak-tflops 989] [--scale 1] [--chunk 256]

The resume unit: extraction commits each (chunk, condition) as soon as it is embedded, so a
kill loses at most ``--chunk`` forward passes; the "s per commit" column is their GPU time at
the same rate (decoding and perturbing add to it; benchmarks/extract_bench.py measures both).

FLOPs and the H200 figures: ``crs.extract.plan`` (its docstring states the model), shared with
`crs extract --plan`.
"""

from __future__ import annotations

import argparse
import json

from crs.extract import encoders, perturb
from crs.extract.plan import PEAK_TFLOPS, UTILISATION, macs_per_image

# (dataset, images per split as the plan assumes them, modality): the brief's round figures
DATASETS = [
    # CheXpert v1.0 frontal views, re-split: ~190k train/val, ~20k test
    ("chexpert", {"train": 190_000, "test": 20_000}, "radiology"),
    ("isic2019", {"train": 20_000, "test": 5_331}, "dermatology"),  # 25,331 training images, 80/20
    ("aptos2019", {"train": 2_930, "test": 732}, "ophthalmology"),  # 3,662 labelled images, 80/20
    ("mimic-cxr", {"train": 0, "test": 5_000}, "radiology"),  # official test split, frontal: about 5,000 (shift only)
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utilisation", type=float, default=UTILISATION, help="share of the bf16 dense peak reached")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS, help="H200 SXM bf16 dense peak (no sparsity)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply images and encoders (10: ten times larger)")
    ap.add_argument("--chunk", type=int, default=256, help="images per commit (crs extract --chunk)")
    args = ap.parse_args()

    specs = [s for s in encoders.ENCODERS.values() if s.family != "baseline" and not s.name.startswith("demo")]
    rows, total_fwd_by_ds = [], {}
    print("| dataset | modality | train+val | test | conditions | forward passes per encoder |")
    print("|---|---|---:|---:|---:|---:|")
    for name, split, modality in DATASETS:
        conds = len(perturb.conditions(modality)) if split["train"] else 0
        fwd = (split["train"] + split["test"]) + split["test"] * conds
        fwd *= args.scale
        total_fwd_by_ds[name] = fwd
        print(f"| {name} | {modality} | {split['train']:,} | {split['test']:,} | 1 + {conds} | {fwd:,.0f} |")
    fwd_per_encoder = sum(total_fwd_by_ds.values())
    print(f"\nforward passes per encoder: {fwd_per_encoder:,.0f}\n")

    peak = args.peak_tflops * 1e12 * args.utilisation
    print(f"| encoder | input | GMACs/img | GFLOPs/img | img/s on one H200 at {args.utilisation:.0%} | "
          f"GPU-hours | store GB (fp16) | s per commit ({args.chunk} images) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    total_h = total_gb = 0.0
    for s in specs:
        macs = macs_per_image(s)
        if macs is None:
            raise ValueError(f"no FLOP model for {s.name} (arch {s.arch}); add it to crs.extract.plan")
        flops = 2 * macs
        rate = peak / flops
        hours = fwd_per_encoder / rate / 3600
        gb = fwd_per_encoder * s.width * 2 / 1e9
        total_h += hours
        total_gb += gb
        rows.append({"encoder": s.name, "input": s.input_size, "gmacs": macs / 1e9, "gflops": flops / 1e9,
                     "images_per_s": rate, "gpu_hours": hours, "store_gb": gb, "width": s.width,
                     "seconds_per_commit": args.chunk / rate})
        print(f"| {s.name} | {s.input_size} | {macs / 1e9:.1f} | {flops / 1e9:.1f} | {rate:,.0f} | {hours:.2f} | "
              f"{gb:.1f} | {args.chunk / rate:.2f} |")
    reps = args.scale  # ten times larger: ten times the encoders as well as the images
    print(f"| **all {len(specs)} x {reps:g}** | | | | | **{total_h * reps:,.0f}** | **{total_gb * reps:,.0f}** | |")
    print(json.dumps({"utilisation": args.utilisation, "peak_tflops": args.peak_tflops, "scale": args.scale,
                      "chunk": args.chunk,
                      "forward_passes_per_encoder": fwd_per_encoder, "encoders": len(specs) * reps,
                      "gpu_hours": total_h * reps, "store_gb": total_gb * reps, "per_encoder": rows}))


if __name__ == "__main__":
    main()
