"""`crs merge` at the consortium's scale: N paper-sized sites merged and scored, beside one site's `crs score`.

One site at the published benchmark's scale is built once with score_bench's builder (``paper_store``: 15
encoders, 3 datasets each with a shift target, 5 seeds, 7 fractions, 68 perturbed conditions; kept under
--store-dir for reuse). In one run, with the same --bootstrap:

1. ``score single``: ``crs score`` of that site (``crs.stages.score.run``; its scores.json is what the export
   carries as the site's score settings);
2. ``export``: ``crs export`` of the site (``crs.stages.bundles.export``);
3. the other sites' bundles: hard-linked copies of the first bundle under another site name (site.json and
   the manifest rewritten), not timed as a phase. Their predictions are the first site's, unperturbed: a merged
   stratum is bootstrapped with its own image draws, and ``resample.AurocDraws`` shares identical arrays only
   within one draw, so identical sites cost what different ones cost; only the numbers (every site agrees
   about the leader) are not a consortium's;
4. for each count in --sites: ``merge`` (``crs.stages.merge.merge``: digests checked, store written) and
   ``score merged`` (``crs score`` of the merged folder, the per-site section included), each timed in wall
   and CPU seconds, the score per phase (score_bench's ``PhaseTimer``, plus the per-site section).

Then the bundle's weight: total bytes, the predictions' bytes and share, the store's compressed bytes of the
same arrays, and a check that the bundle's prediction arrays are exactly those ``crs score`` read (the same
(dataset, encoder, condition) keys, the same bytes). The last line is one JSON object. Usage:

    python benchmarks/merge_bench.py [--store-dir DIR] [--sites 20 | --sites 2,5,10] [--bootstrap 1000]
                                     [--encoders 15] [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import score_bench  # noqa: E402  (the paper-scale builder and the phase timer)


def timed(fn, *a, **kw):
    """(fn's result, wall seconds, CPU seconds of the process: every thread)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*a, **kw)
    return out, round(time.perf_counter() - t0, 2), round(time.process_time() - c0, 2)


def build(store_dir: Path, n_encoders: int, n_seeds: int) -> float | None:
    """The paper-scale site under ``store_dir`` (store.zarr, results/), built once; seconds taken, None if reused."""
    from crs.foundations import records

    results = store_dir / "results"
    if any(records.records_dir(results).glob("*.parquet")):
        return None
    t0 = time.perf_counter()
    score_bench.save_records(results, score_bench.paper_store(str(store_dir / "store.zarr"), n_encoders, n_seeds))
    return round(time.perf_counter() - t0, 1)


def staged(fn, phases: list[tuple[object, str, str]], *a, **kw) -> dict:
    """``fn(*a, **kw)`` timed in wall and CPU seconds, and per phase (``PhaseTimer`` over ``phases``)."""
    with score_bench.PhaseTimer(phases) as timer:
        _, wall, cpu = timed(fn, *a, **kw)
    timer.wall["other"] = wall - timer.main_wall
    return {"wall_s": wall, "cpu_s": cpu,
            "phases": {k: {"wall_s": round(timer.wall.get(k, 0.0), 2), "cpu_s": round(timer.cpu.get(k, 0.0), 2)}
                       for k in sorted(timer.wall)}}


def io_phases() -> list[tuple[object, str, str]]:
    """What ``staged`` wraps in ``crs export`` and ``crs merge``."""
    from crs.stages import bundles, merge
    from crs.store import Store

    return [(bundles, "write_manifest", "digests (sha256)"), (merge, "sha256_file", "digests (sha256)"),
            (bundles, "_write_predictions", "export: predictions"), (bundles, "_write_datasets", "export: datasets"),
            (bundles, "_write_records", "export: run records"), (bundles, "fairness_record", "export: site record"),
            (Store, "read_predictions", "reading the store"), (Store, "write_predictions", "writing the store"),
            (merge, "_write_dataset", "merge: datasets"), (merge, "_write_site_records", "merge: run records"),
            (merge.np, "load", "merge: reading .npy")]


def score(results: Path, n_bootstrap: int, store: str | None = None) -> dict:
    """``crs score`` of ``results`` with the default settings and B = ``n_bootstrap``: wall, CPU, phases."""
    from crs.foundations.config import Score
    from crs.scoring import run
    from crs.stages import score as score_stage

    phases = [*score_bench.score_phases(), (run, "consortium", "per-site section")]
    with score_bench.PhaseTimer(phases) as timer:
        scores, wall, cpu = timed(score_stage.run, results, Score(bootstrap=n_bootstrap), store=store)
    timer.wall["other"] = wall - timer.main_wall
    timer.cpu["other (all threads: total minus phases)"] = cpu - sum(timer.cpu.values())
    return {"wall_s": wall, "cpu_s": cpu, "encoders": scores.encoders.height,
            "leader": scores.encoders["encoder"][0],
            "phases": {k: {"wall_s": round(timer.wall.get(k, 0.0), 2), "cpu_s": round(timer.cpu.get(k, 0.0), 2)}
                       for k in sorted({**timer.wall, **timer.cpu})}}


def site_copy(bundle: Path, out: Path, site: str) -> None:
    """``bundle`` as site ``site``'s: every file hard-linked but site.json and the manifest, which are rewritten."""
    from crs.stages.bundles import MANIFEST, SITE_RECORD, sha256_file

    for src in bundle.rglob("*"):
        dst = out / src.relative_to(bundle)
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        elif src.name not in (MANIFEST, SITE_RECORD) or src.parent != bundle:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
    record = json.loads((bundle / SITE_RECORD).read_text(encoding="utf-8"))
    (out / SITE_RECORD).write_text(json.dumps({**record, "site": site}, indent=1, sort_keys=True), encoding="utf-8")
    manifest = json.loads((bundle / MANIFEST).read_text(encoding="utf-8"))
    manifest["site"] = site
    manifest["files"][SITE_RECORD] = {"sha256": sha256_file(out / SITE_RECORD),
                                      "bytes": (out / SITE_RECORD).stat().st_size}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")


def weight(bundle: Path, store: Path, read: dict) -> dict:
    """The bundle's bytes by part, the store's bytes of the same prediction arrays, and whether the bundle's
    prediction arrays are exactly those the score read (``read``: (dataset, encoder, condition key) -> bytes)."""
    parts: dict[str, int] = {}
    for p in bundle.rglob("*"):
        if p.is_file():
            part = p.relative_to(bundle).parts[0] if p.parent != bundle else p.name
            parts[part] = parts.get(part, 0) + p.stat().st_size
    npy = {(p.parts[-3], p.parts[-2], p.stem): p.stat().st_size for p in (bundle / "predictions").rglob("*.npy")}
    header = {k: npy[k] - read[k] for k in npy if k in read}  # np.save's header: 128 bytes an array
    stored = sum(p.stat().st_size for p in store.glob("datasets/*/predictions/**/*") if p.is_file())
    total = sum(parts.values())
    return {"bundle_bytes": total, "parts_bytes": parts,
            "predictions_share": round(parts.get("predictions", 0) / total, 4),
            "prediction_arrays": len(npy), "arrays_score_read": len(read),
            "arrays_in_bundle_not_read": sorted("/".join(k) for k in set(npy) - set(read)),
            "arrays_read_not_in_bundle": sorted("/".join(k) for k in set(read) - set(npy)),
            "array_bytes_read": sum(read.values()), "npy_header_bytes_max": max(header.values(), default=0),
            "store_compressed_prediction_bytes": stored}


def recording_reads():
    """Store.read_predictions wrapped to record what it returns: (patch, restore, {key: bytes})."""
    from crs.store import Store, condition_key

    seen: dict[tuple[str, str, str], int] = {}
    original = Store.read_predictions

    def read_predictions(self, dataset, encoder, condition):
        values, attrs = original(self, dataset, encoder, condition)
        seen[(dataset, encoder, condition_key(condition))] = int(values.nbytes)
        return values, attrs

    return (lambda: setattr(Store, "read_predictions", read_predictions),
            lambda: setattr(Store, "read_predictions", original), seen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store-dir", default=None, help="where the paper-scale site is built once and reused")
    ap.add_argument("--sites", default="20", help="site counts to merge and score, e.g. 20 or 2,5,10")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--encoders", type=int, default=15)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    counts = sorted({int(n) for n in args.sites.split(",")})
    from crs.stages import bundles, merge

    store_dir = Path(args.store_dir or tempfile.mkdtemp(prefix="crs-merge-"))
    built = build(store_dir, args.encoders, args.seeds)
    results, work = store_dir / "results", store_dir / "merge-bench"
    shutil.rmtree(work, ignore_errors=True)
    patch, restore, read = recording_reads()
    patch()
    try:
        single = score(results, args.bootstrap, store=str(store_dir / "store.zarr"))
    finally:
        restore()
    print(json.dumps({"score_single": single}), flush=True)
    first = work / "bundles" / "site000"
    export = staged(bundles.export, io_phases(), results, first, "site000", store=str(store_dir / "store.zarr"))
    t0 = time.perf_counter()
    for i in range(1, max(counts)):
        site_copy(first, work / "bundles" / f"site{i:03d}", f"site{i:03d}")
    copies = round(time.perf_counter() - t0, 2)
    runs = []
    for n in counts:
        out = work / f"merged-{n}"
        merged_io = staged(merge.merge, io_phases(), [work / "bundles" / f"site{i:03d}" for i in range(n)], out)
        merged = score(out, args.bootstrap)
        runs.append({"sites": n, "merge": merged_io, "score_merged": merged,
                     "ratio_wall": round(merged["wall_s"] / single["wall_s"], 2),
                     "ratio_cpu": round(merged["cpu_s"] / single["cpu_s"], 2)})
        print(json.dumps({"sites": n, **runs[-1]}), flush=True)
        shutil.rmtree(out)
    print(json.dumps({
        "bootstrap": args.bootstrap, "encoders": args.encoders, "seeds": args.seeds, "store": str(store_dir),
        "built_s": built, "copies_s": copies, "export": export,
        "score_single": {k: single[k] for k in ("wall_s", "cpu_s")},
        "runs": [{"sites": r["sites"], "merge": {k: r["merge"][k] for k in ("wall_s", "cpu_s")},
                  "score_merged": {k: r["score_merged"][k] for k in ("wall_s", "cpu_s")},
                  "ratio_wall": r["ratio_wall"], "ratio_cpu": r["ratio_cpu"]} for r in runs],
        "weight": weight(first, store_dir / "store.zarr", read)}))


if __name__ == "__main__":
    main()
