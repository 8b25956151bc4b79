"""Scoring at the published benchmark's scale, against straightforward per-replicate loops.

1. A run-record table of 15 encoders x 3 datasets (one with a shift target) x 5 seeds:
   clean at 7 label fractions plus 68 perturbed conditions (and the shift) at fraction 1,
   about 17,000 rows. Times ``score(..., bootstrap=1000)`` (the seed-paired bootstrap
   and everything else ``crs score`` computes from run records; ``seed_bootstrap_s``),
   ``crs score --bootstrap 1000`` in a fresh process (imports and writes included), and the same
   seed bootstrap as a loop that recomputes seed means and scores one replicate at a time.
2. The image-level bootstrap on probabilities of 15 encoders x 5 seeds x 5,000 test
   images x 8 classes: B = 1000 replicates of D (macro AUROC) and C (1 - ECE) per
   (encoder, seed), the same image draw for every encoder; against a loop that
   resamples the images and re-sorts them for every replicate (rank-based AUROC), timed
   on --loop-replicates replicates and scaled linearly to B (each replicate costs the same).
3. The cumulative sum inside ``crs.scoring.metrics.weighted_auroc``: row by row down the
   [image, replicate] counts against ``np.cumsum(axis=0)``, which walks them with a stride.
5. The default unit ('both': seeds and test images together) at the published benchmark's
   scale: ``resample.run_axes`` (every axis of one (encoder, dataset, seed) under B image
   draws: 6 fractions below 1, 68 perturbed conditions and a shift target, each a macro
   AUROC) timed once per dataset shape given by --test-sets (images x classes; default
   ISIC 2019-, APTOS 2019- and CheXpert-like test splits): before, the exact kernel per array
   (one (encoder, seed) timed, scaled by encoders x seeds); after, each encoder's arrays as one
   ``resample.AurocDraws`` batch (identical arrays once, each exact in one compiled pass per class,
   docs/crs-v1.md section 5; one encoder timed, scaled by encoders), side by side, plus the seed-paired scoring; store
   reads are not counted. ``--default-only`` runs this part alone, ``--after-only`` skips 'before'.
4. Writing the scores as one set (``Scores.write``: a fresh folder, fsync, swapped in by
   two renames; ``crs.scoring.scoreset``) against writing each file in place by its own
   atomic rename, as crs score did before (``--write-only`` runs this part alone).

6. ``--end-to-end``: ``crs score`` itself (``crs.stages.score.run``: read the run records, score
   with the default settings, B = --bootstrap, write the set) on a paper-scale store built once
   (``paper_store``, kept under --store-dir for reuse): synthetic probe predictions written in the
   store's format, no probe fitted; test sets 5000x8 multi-class, 730x5 ordinal, 500x5 multi-label,
   each with a shift target of as many images; --encoders x --seeds, 7 fractions, 68 perturbed
   conditions. Timed per phase (``PhaseTimer``: reading the run records, checking the probe runs,
   reading predictions, image draws, metrics from probabilities, seed draws, CRS replicates, ranks
   and tier, weight grid, verdict, writing; inside the image draws the exact AUROC and the sorts,
   inside the metrics the temperature fits and the array metrics, each exclusive of the others).
   ``--first-encoders N`` scores only the first N encoders (run it with PYTHONPATH at an older
   checkout to time that one beside this);
   ``--direct-reads`` reads predictions as proposed for crs/store (``direct_read_predictions``).

Prints ratios measured in this one run, wall-clock and CPU time (process time: what the
run would take on a machine it had to itself, where wall time counts other processes'
share of the cores); the last line is one JSON object. Usage:

    python benchmarks/score_bench.py [--bootstrap 1000] [--images 5000] [--loop-replicates 10] [--write-only]
                                     [--default-only] [--after-only] [--test-sets 5000x8,730x5,500x5]
                                     [--end-to-end [--store-dir DIR] [--first-encoders N] [--direct-reads]
                                      [--versions 1,2 [--repeats 2]]]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np
import polars as pl

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
FAMILIES = (
    "gaussian_noise", "shot_noise", "speckle_noise", "gaussian_blur", "motion_blur", "defocus_blur",
    "contrast", "brightness", "saturate", "jpeg", "pixelate", "elastic", "gamma", "bias_field",
)  # fmt: skip


STORELESS = "1"  # the CRS version of the parts that score run records without a store (v2 needs one)


def run_table(n_encoders: int = 15, n_seeds: int = 5, rng_seed: int = 0) -> pl.DataFrame:
    from crs.foundations.records import COLUMNS

    rng = np.random.default_rng(rng_seed)
    conditions = [f"{f}@{v}" for f in FAMILIES for v in range(1, 6)][:68]
    datasets = {"bench_derm": None, "bench_fundus": None, "bench_cxr": "bench_cxr_site2"}
    cols: dict[str, list] = {c: [] for c in ("encoder", "dataset", "seed", "fraction", "condition", "auroc", "ece")}

    def add(e, d, s, f, c, a, ece):
        for k, v in zip(cols, (e, d, s, f, c, a, ece), strict=True):
            cols[k].append(v)

    for e in range(n_encoders):
        quality = 0.78 + 0.15 * rng.random()
        for d, target in datasets.items():
            for s in range(n_seeds):
                base = quality + 0.02 * rng.standard_normal()
                ece = float(np.clip(0.08 - 0.05 * quality + 0.01 * rng.standard_normal(), 0, 1))
                for f in FRACTIONS:
                    a = base - 0.12 * (1 - f) ** 4 * (f < 1) + 0.01 * rng.standard_normal() * (f < 1)
                    add(f"enc{e:02d}", d, s, f, "clean", float(a), ece)
                for c in conditions:
                    sev = int(c.split("@")[1])
                    add(f"enc{e:02d}", d, s, 1.0, c, float(base - 0.015 * sev * rng.random()), ece)
                if target:
                    add(f"enc{e:02d}", d, s, 1.0, f"shift:{target}", float(base - 0.06 * rng.random()), ece)
    n = len(cols["encoder"])
    full = {c: cols.get(c, [None] * n) for c in COLUMNS}
    return pl.DataFrame(full, schema={c: getattr(pl, t) for c, (t, _) in COLUMNS.items()})


def seed_loop(x_seed: np.ndarray, draw: np.ndarray) -> np.ndarray:
    """The seed bootstrap one replicate at a time: seed means, scores, ranks (reference: median)."""
    from crs.scoring.crs import score
    from crs.scoring.ranks import rank_desc

    crs = []
    for b in range(draw.shape[0]):
        x = x_seed[:, :, draw[b], :].mean(axis=2)
        s = score(x, "median")
        rank_desc(s.crs)
        crs.append(s.crs)
    return np.array(crs)


def loop_auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Mann-Whitney AUROC with average ranks from a fresh sort (the per-replicate baseline)."""
    s = np.sort(scores)
    ranks = (np.searchsorted(s, scores, "left") + np.searchsorted(s, scores, "right") + 1) / 2.0
    n_pos = positive.sum()
    n_neg = positive.size - n_pos
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def cumsum_rows_vs_numpy(n: int, b: int, repeats: int = 5) -> float:
    """CPU-time ratio np.cumsum(axis=0) / metrics.weighted.cumsum_rows on int32 counts [image, replicate]."""
    from crs.scoring.metrics.weighted import cumsum_rows

    base = np.random.default_rng(3).integers(0, 3, size=(n, b)).astype(np.int32)
    rows, strided = [], []
    for _ in range(repeats):
        c = base.copy()
        c0 = time.process_time()
        cumsum_rows(c)
        rows.append(time.process_time() - c0)
        c0 = time.process_time()
        ref = np.cumsum(base, axis=0, dtype=np.int32)
        strided.append(time.process_time() - c0)
        assert np.array_equal(c, ref)
    return float(np.median(strided) / np.median(rows))


def write_cost(scores, repeats: int = 5) -> tuple[float, float]:
    """(seconds per set write, seconds per write of the same files one atomic rename each), medians."""
    from pathlib import Path

    from crs.foundations.files import atomic_write

    def per_file(out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        for name, table in scores.written_tables().items():
            atomic_write(out / f"{name}.parquet", table.write_parquet)
            atomic_write(out / f"{name}.csv", table.write_csv)
        text = json.dumps(scores.to_json(), indent=2, allow_nan=False) + "\n"
        atomic_write(out / "scores.json", lambda p: p.write_text(text, encoding="utf-8"))
        atomic_write(out.parent / "mt.parquet", scores.metric_table.write_parquet)

    times: dict[str, list[float]] = {"set": [], "files": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):  # every write after the first replaces an existing set
            for kind, write in (("set", lambda: scores.write(Path(tmp) / "set" / "scores",
                                                             metric_table=Path(tmp) / "set" / "mt.parquet")),
                                ("files", lambda: per_file(Path(tmp) / "files" / "scores"))):
                t0 = time.perf_counter()
                write()
                times[kind].append(time.perf_counter() - t0)
    return float(np.median(times["set"])), float(np.median(times["files"]))


def default_unit_cost(test_sets: list[tuple[int, int]], n_encoders: int, n_seeds: int, n_bootstrap: int,
                      n_perturbed: int = 68, n_low: int = 6, before: bool = True, shared_full: bool = True) -> dict:
    """CPU and wall seconds of the image part of the 'both' bootstrap, per dataset and in all (part 5).

    'after': what ``predictions.image_bootstrap_axes`` does, one encoder's arrays (every seed,
    fraction and condition) as one ``resample.AurocDraws`` batch per draw, then ``run_axes``
    per seed; timed on one encoder and scaled by encoders. As the probe fits them, the seeds'
    arrays at fraction 1 are one array (``shared_full``: the whole training set is one problem,
    one probe for every seed), so the image part scores it once; ``shared_full=False`` gives
    them different last bits (~1e-6), as the probe did before, so no array is shared. 'before':
    ``run_axes`` without a batch (the exact kernel per array), timed on one (encoder, seed) and
    scaled by encoders x seeds.
    """
    from crs.scoring import resample

    rng = np.random.default_rng(3)
    out = {}
    for n, k in test_sets:
        y = rng.integers(0, k, n)
        y[:k] = np.arange(k)
        target = np.eye(k, dtype=np.int8)[y]
        known = np.ones_like(target, dtype=bool)

        def probs(noise: float, z0: np.ndarray | None = None, target: np.ndarray = target) -> np.ndarray:
            z = 1.5 * target + noise * rng.normal(size=target.shape) if z0 is None else z0
            p = np.exp(z - z.max(-1, keepdims=True))
            return (p / p.sum(-1, keepdims=True)).astype(np.float32)

        z_full = [1.5 * target + (1.2 + 0.01 * c) * rng.normal(size=(n, k)) for c in range(n_perturbed + 2)]
        per_seed = []
        for _ in range(n_seeds):
            jitter = [probs(0, z if shared_full else z + 1e-6 * rng.normal(size=z.shape)) for z in z_full]
            low = [probs(1.0 + 0.2 * f) for f in range(n_low)]
            per_seed.append(resample.RunArrays(np.stack([*low, jitter[0]]), jitter[1:-1], [jitter[-1]]))
        test = resample.Draw(target, known, resample.image_counts(n, n_bootstrap, np.random.default_rng(4)))
        shift = resample.Draw(target, known, resample.image_counts(n, n_bootstrap, np.random.default_rng(5)))
        row = {}
        if before:
            t0, c0 = time.perf_counter(), time.process_time()
            resample.run_axes(per_seed[0], test, [shift], "multiclass")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            runs = n_encoders * n_seeds
            row.update(before_cpu_s=round(cpu * runs, 1), before_wall_s=round(wall * runs, 1))
        t0, c0 = time.perf_counter(), time.process_time()
        aurocs = [resample.AurocDraws(test), resample.AurocDraws(shift)]
        for run in per_seed:
            for p in [*run.clean, *run.perturbed]:
                aurocs[0].add(p)
            aurocs[1].add(run.shift[0])
        for a in aurocs:
            a.compute()
        got = [resample.run_axes(run, test, [shift], "multiclass", aurocs) for run in per_seed]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        row.update(after_cpu_s=round(cpu * n_encoders, 1), after_wall_s=round(wall * n_encoders, 1),
                   arrays={key: sum(a.summary()[key] for a in aurocs) for key in ("exact", "shared")})
        if before:  # the first seed's axes both ways: the batch must equal the per-array kernel
            exact = resample.run_axes(per_seed[0], test, [shift], "multiclass")
            row["max_axis_diff_over_sd"] = round(float(np.max(np.abs(got[0] - exact) / exact.std(axis=0))), 4)
        out[f"{n}x{k}"] = row
    for when in ("before", "after"):
        for unit in ("cpu", "wall"):
            name = f"{when}_{unit}_s"
            if all(name in v for v in out.values() if isinstance(v, dict)):
                out[f"total_{name}"] = round(sum(v[name] for v in list(out.values()) if isinstance(v, dict)), 1)
    return out


# ---------------------------------------------------------------- part 6: end to end
PAPER_DATASETS = (  # name, test images, classes, task; each with a shift target of as many test images
    ("bench_derm", 5000, 8, "multiclass"), ("bench_fundus", 730, 5, "multiclass"), ("bench_cxr", 500, 5, "multilabel"),
)  # fmt: skip


def _paper_probs(rng: np.random.Generator, target: np.ndarray, task: str, signal: float, shape: tuple) -> np.ndarray:
    """Probabilities [*shape, image, class] float32: softmax (multi-class) or sigmoid (multi-label) of noisy logits."""
    z = signal * (2.0 * target - 1.0) + rng.normal(size=(*shape, *target.shape))
    if task == "multilabel":
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
    p = np.exp(z - z.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


BENCH_GENERATION = "bench"  # the probe generation the benchmark's predictions and run records name


def save_records(results, table: pl.DataFrame) -> None:
    """Run records as ``crs probe`` leaves them: a file per (encoder, dataset) with every column (those the
    benchmark does not compute null), its digest, generation and probe settings."""
    from crs.foundations import records as run_records

    table = table.with_columns(pl.lit(None, getattr(pl, dtype)).alias(name)
                               for name, (dtype, _) in run_records.COLUMNS.items() if name not in table.columns)
    meta = {run_records.PROVENANCE: json.dumps({"created": "2026-12-01T00:00:00+00:00",
                                                "settings": {"head": "linear"}})}
    for (encoder, dataset), rows in table.group_by("encoder", "dataset"):
        run_records.write_parquet(run_records.path(results, encoder, dataset), rows, BENCH_GENERATION, meta)


def paper_store(path: str, n_encoders: int = 15, n_seeds: int = 5, n_perturbed: int = 68,
                datasets=PAPER_DATASETS, rng_seed: int = 0) -> pl.DataFrame:
    """A store at the published benchmark's scale with synthetic probe predictions, and its run records.

    Per dataset (``datasets``: name, test images, classes, task) a shift target ``NAME_site2`` with
    as many test images; per (encoder, dataset): clean test probabilities [seed, fraction, image,
    class] at the 7 ``FRACTIONS``, validation ones at the same fractions (half as many images),
    ``n_perturbed`` perturbed conditions and the shift at fraction 1. As the probe writes them, every
    seed's fraction-1 probe is one probe, so its arrays are the same for every seed. No probe is
    fitted: the run records' AUROC and ECE are computed from these probabilities.
    """
    from crs.foundations.records import COLUMNS
    from crs.store import Store

    rng = np.random.default_rng(rng_seed)
    store = Store(path, "a")
    conditions = [f"{f}@{v}" for f in FAMILIES for v in range(1, 6)][:n_perturbed]
    rows: list[dict] = []
    for name, n, k, task in datasets:
        splits = {ds: _paper_split(store, rng, ds, n, k, task, name == "bench_fundus", shift)
                  for ds, shift in ((name, f"{name}_site2"), (f"{name}_site2", None))}
        for e in range(n_encoders):
            arrays = _paper_encoder(store, rng, name, f"enc{e:02d}", task, n_seeds, conditions, splits)
            rows.extend(_paper_records(f"enc{e:02d}", name, task, n_seeds, arrays))
    full = [{c: r.get(c) for c in COLUMNS} for r in rows]
    return pl.DataFrame(full, schema={c: getattr(pl, t) for c, (t, _) in COLUMNS.items()})


def _paper_split(store, rng, ds: str, n: int, k: int, task: str, ordinal: bool, shift: str | None):
    """Write dataset ``ds`` (n test, n/2 validation, 8 training images); (test target, test known,
    validation target)."""
    from crs.foundations.labels import targets
    from crs.store import SPLIT_CODE, DatasetTable

    n_val, n_train = n // 2, 8
    total = n + n_val + n_train
    if task == "multiclass":
        labels = rng.integers(0, k, total)
        labels[:k] = np.arange(k)
    else:
        labels = (rng.random((total, k)) < 0.3).astype(np.int8)
        labels[rng.random((total, k)) < 0.05] = -1
        labels[:2] = [[1] * k, [0] * k]
    split = np.repeat(np.array([SPLIT_CODE["test"], SPLIT_CODE["val"], SPLIT_CODE["train"]], np.int8),
                      [n, n_val, n_train])
    attrs = {"task": task, "classes": [f"c{i}" for i in range(k)], "ordinal": ordinal}
    if shift:
        attrs["shift_target"] = shift
    store.write_dataset(DatasetTable(np.array([f"{ds}-{i}" for i in range(total)]), labels, split,
                                     np.array(["g"] * total), name=ds, attrs=attrs))
    t, known = targets(labels, task, k)
    return t[:n], known[:n], t[n:n + n_val]


def _paper_encoder(store, rng, name: str, enc: str, task: str, n_seeds: int, conditions, splits) -> dict:
    """Write one encoder's predictions on dataset ``name``; {condition: (probs, target, known)} of its test arrays."""
    from crs.foundations import forms

    (target, known, val_target), (s_target, s_known, _) = splits[name], splits[f"{name}_site2"]
    meta = {"seeds": list(range(n_seeds)), "classes": [f"c{i}" for i in range(target.shape[1])],
            forms.KEY: forms.LOG_PROB, "generation": BENCH_GENERATION}  # as crs probe stores them
    signal = 0.6 + 0.6 * rng.random()
    scale = [signal * (1.0 - 0.5 * (1.0 - f) ** 2) for f in FRACTIONS]  # fewer labels, less signal

    def at_fractions(t: np.ndarray) -> np.ndarray:  # [seed, fraction, image, class]; fraction 1: one probe
        return np.stack([np.broadcast_to(_paper_probs(rng, t, task, scale[j], (1 if f == 1.0 else n_seeds,)),
                                         (n_seeds, *t.shape)) for j, f in enumerate(FRACTIONS)], axis=1)

    clean = at_fractions(target)
    store.write_predictions(name, enc, "clean", np.log(clean), {**meta, "fractions": list(FRACTIONS)})
    store.write_predictions(name, enc, "validation", np.log(at_fractions(val_target)),
                            {**meta, "fractions": list(FRACTIONS)})
    arrays = {"clean": (clean, target, known)}
    for c in [*conditions, f"shift:{name}_site2"]:
        t, kn = (s_target, s_known) if c.startswith("shift:") else (target, known)
        sev = 3 if c.startswith("shift:") else int(c.split("@")[1])
        probs = np.broadcast_to(_paper_probs(rng, t, task, signal * (1.0 - 0.08 * sev), (1, 1)), (n_seeds, 1, *t.shape))
        store.write_predictions(name, enc, c, np.log(probs), {**meta, "fractions": [1.0]})
        arrays[c] = (probs, t, kn)
    return arrays


def _paper_records(enc: str, name: str, task: str, n_seeds: int, arrays: dict) -> list[dict]:
    """Run-record rows of one encoder on one dataset, AUROC and ECE computed from its test arrays."""
    from crs.scoring import metrics

    rows: list[dict] = []
    for c, (probs, t, kn) in arrays.items():
        ones = np.ones((t.shape[0], 1))
        for j in range(probs.shape[1]):
            f = FRACTIONS[j] if c == "clean" else 1.0
            for s in range(n_seeds):
                if s and f == 1.0:  # the same probe for every seed: the same metrics
                    rows.append({**rows[-1], "seed": s})
                    continue
                p = probs[s, j]
                rows.append({"encoder": enc, "dataset": name, "task": task, "seed": s, "fraction": f,
                             "condition": c, "n_eval": t.shape[0],
                             "auroc": float(metrics.weighted_macro_auroc(p, t, kn, ones)[0]),
                             "ece": float(metrics.weighted_ece(p, t, kn, ones, task)[0])})
    return rows


class PhaseTimer:
    """Exclusive wall and CPU seconds per phase: functions wrapped in place for the duration of a ``with``.

    A wrapped call's time goes to its label minus the time of wrapped calls inside it (per thread:
    CPU is the thread's own, ``time.thread_time``). In one thread the phases add up to the time of
    the outermost one; phases run by helper threads overlap the others, so the walls add up to more
    than the total and 'other' (total minus the main thread's phases) is what no phase covers."""

    def __init__(self, targets: list[tuple[object, str, str]]):
        import threading

        self.targets, self.saved = targets, []
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.main_wall = self.main_cpu = 0.0  # the main thread's outermost phases
        self._local = threading.local()
        self._main = threading.get_ident()
        self._lock = threading.Lock()

    def _wrap(self, fn, label: str):
        import functools

        @functools.wraps(fn)
        def timed(*a, **kw):
            import threading

            stack = self._local.__dict__.setdefault("stack", [])  # per open call: [child wall, child cpu]
            stack.append([0.0, 0.0])
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
                child = stack.pop()
                with self._lock:
                    self.wall[label] = self.wall.get(label, 0.0) + wall - child[0]
                    self.cpu[label] = self.cpu.get(label, 0.0) + cpu - child[1]
                    if stack:
                        stack[-1][0] += wall
                        stack[-1][1] += cpu
                    elif threading.get_ident() == self._main:
                        self.main_wall += wall
                        self.main_cpu += cpu

        return timed

    def __enter__(self):
        for owner, name, label in self.targets:
            fn = getattr(owner, name, None)
            if fn is None:  # an older crs (the 'before' of a side-by-side run) has no such function
                continue
            self.saved.append((owner, name, fn))
            setattr(owner, name, self._wrap(fn, label))
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self.saved):
            setattr(owner, name, fn)
        self.saved = []


def direct_read_predictions(self, dataset: str, encoder: str, condition: str):
    """``Store.read_predictions`` as proposed for crs/store (not this benchmark's to change): the array
    opened by its path in one lookup, instead of listing the datasets and walking the groups one
    ``in`` and one ``[]`` at a time (about 15 metadata round trips a read). The same errors: absent
    -> StoreError naming the probe command; not written whole or damaged -> as before."""
    from crs.store import StoreError
    from crs.store.zarr_store import condition_key, repair_hint

    key = condition_key(condition)
    where = f"datasets/{dataset}/predictions/{encoder}/{key}"
    what = f"test probabilities {encoder}/{dataset}/{condition}"
    with self.checks.reading(where):
        try:
            arr = self.root[where]
        except KeyError:
            raise StoreError(
                f"no {what} in {self.path!r}; run `crs probe --encoder {encoder} --dataset {dataset}`") from None
        attrs = dict(arr.attrs)
    if "condition" not in attrs:
        raise StoreError(f"{what} in {self.path!r} were not written whole (the run that wrote them was "
                         f"interrupted). To repair: {repair_hint(self.path, where)}")
    return self.checks.checked_read(arr, what), attrs


def score_phases() -> list[tuple[object, str, str]]:
    """What ``PhaseTimer`` wraps to time ``crs score`` per phase (part 6; benchmarks/merge_bench.py too)."""
    from crs.foundations import records as run_records
    from crs.scoring import analysis, metrics, predictions, replicates, resample, run, scoreset, temperature, verdict
    from crs.scoring.predictions import image_bootstrap, read, stored_metrics
    from crs.store import Store

    return [
        (run_records, "read", "reading run records"),
        (Store, "read_predictions", "reading predictions"),
        (read, "split_targets", "reading predictions"),
        (stored_metrics, "split_targets", "reading predictions"),
        (image_bootstrap, "split_targets", "reading predictions"),
        (run, "check_probe_runs", "checking probe runs"),
        (predictions, "image_bootstrap_axes", "image draws"),
        (resample, "exact_batch", "image draws: exact AUROC"),
        (resample, "sort_classes", "image draws: sorts"),
        (temperature, "fit", "metrics: temperature fits"),
        (metrics, "array_metrics", "metrics: array metrics"),
        (replicates, "draw_seeds", "seed draws"),
        (replicates, "seed_means_of", "seed draws"),
        (replicates, "resample_seeds", "seed draws"),
        (replicates, "score_replicates", "CRS replicates"),
        (run, "summarise", "ranks, intervals, tier"),
        (analysis, "weight_sensitivity", "weight grid"),
        (predictions, "probe_metrics", "metrics from probabilities"),
        (predictions.MetricsPass, "add_pair", "metrics from probabilities"),
        (verdict, "build", "verdict"),
        (scoreset, "write_set", "writing"),
        (scoreset, "write_table", "writing"),
    ]


def end_to_end(store_dir: str | None, n_encoders: int, n_seeds: int, n_bootstrap: int, n_perturbed: int = 68,
               bootstrap_unit: str = "both", direct_reads: bool = False, first_encoders: int = 0,
               crs_version: int | None = None) -> dict:
    """``crs score`` (``crs.stages.score.run``: read the run records, score with the default settings, write
    the set) on a paper-scale store (``paper_store``), timed per phase; part 6."""
    import os
    from pathlib import Path

    from crs.foundations import records as run_records
    from crs.foundations.config import Score
    from crs.scoring import run
    from crs.stages import score as score_stage
    from crs.store import Store

    tmp = tempfile.mkdtemp(prefix="crs-e2e-") if store_dir is None else store_dir
    store_path, results = os.path.join(tmp, "store.zarr"), Path(tmp) / "results"
    built = None
    if not any(run_records.records_dir(results).glob("*.parquet")):
        t0 = time.perf_counter()
        save_records(results, paper_store(store_path, n_encoders, n_seeds, n_perturbed))
        built = time.perf_counter() - t0
    if first_encoders:  # score the first N encoders of a larger store: their own results folder
        table = run_records.read(results)
        results = Path(tmp) / f"results-{first_encoders}"
        keep = sorted(table["encoder"].unique().to_list())[:first_encoders]
        save_records(results, table.filter(pl.col("encoder").is_in(keep)))
    phases = score_phases()
    saved = Store.read_predictions
    if direct_reads:  # the timer wraps whichever is in place: either is counted as reading
        Store.read_predictions = direct_read_predictions
    try:
        with PhaseTimer(phases) as timer:
            t0, c0 = time.perf_counter(), time.process_time()
            options = Score(bootstrap=n_bootstrap, bootstrap_unit=bootstrap_unit)
            if crs_version is not None:
                options = Score(bootstrap=n_bootstrap, bootstrap_unit=bootstrap_unit, crs_version=str(crs_version))
            scores = score_stage.run(results, options, store=store_path)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        Store.read_predictions = saved
    timer.wall["other"] = wall - timer.main_wall
    timer.cpu["other (all threads: total minus phases)"] = cpu - sum(timer.cpu.values())
    return {
        "store": tmp, "built_s": None if built is None else round(built, 1),
        "unit": scores.settings["bootstrap"]["unit"], "leader": scores.encoders["encoder"][0],
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "phases": {k: {"wall_s": round(timer.wall.get(k, 0.0), 2), "cpu_s": round(timer.cpu.get(k, 0.0), 2)}
                   for k in {**timer.wall, **timer.cpu}},
        "image_method": scores.settings["bootstrap"].get("image_method"), "direct_reads": direct_reads,
        "encoders": scores.encoders.height, "scoring_from": str(Path(run.__file__).resolve().parent),
        "crs_version": scores.settings.get("crs_version"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--encoders", type=int, default=15)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--loop-replicates", type=int, default=10)
    ap.add_argument("--write-only", action="store_true", help="time only the writing of the scores (part 4)")
    ap.add_argument("--default-only", action="store_true", help="time only the default unit's image part (part 5)")
    ap.add_argument("--after-only", action="store_true", help="part 5: leave out the exact per-run timing")
    ap.add_argument("--jittered-full", action="store_true",
                    help="part 5: the seeds' fraction-1 arrays differ in the last bits "
                         "(the probe before it shared them)")
    ap.add_argument("--test-sets", default="5000x8,730x5,500x5", help="part 5: test images x classes per dataset")
    ap.add_argument("--end-to-end", action="store_true",
                    help="part 6 alone: `crs score` with the default settings on a paper-scale store, per phase")
    ap.add_argument("--versions", default="",
                    help="with --end-to-end: time `crs score` under each of these CRS versions side by side, e.g. 1,2")
    ap.add_argument("--repeats", type=int, default=2, help="with --versions: interleaved rounds (best one kept)")
    ap.add_argument("--store-dir", default=None,
                    help="part 6: build the store and run records here once and reuse them (default: a fresh temp dir)")
    ap.add_argument("--direct-reads", action="store_true",
                    help="part 6: read predictions as proposed for crs/store (direct_read_predictions)")
    ap.add_argument("--first-encoders", type=int, default=0,
                    help="part 6: score only the first N encoders of the store (e.g. to time an older crs beside)")
    args = ap.parse_args()
    if args.end_to_end and args.versions:
        _versions_part(args)
        return
    if args.end_to_end:
        _end_to_end_part(args)
        return
    if args.default_only:
        _default_part(args)
        return

    from crs.scoring import ScoreOptions, metrics, resample, score
    from crs.scoring.axes import axes_by_seed
    from crs.scoring.bootstrap import draw_seeds, seed_tensor

    # ---------------------------------------------------------------- seed-paired
    # Parts 1-4 score run records alone, without a store: CRS v1, since v2 reads C from the stored test
    # probabilities (docs/crs-v2.md section 1); the seed bootstrap they time is the same code under either
    # version, and part 6 (--end-to-end, --versions 1,2) times v2 on a store.
    records = run_table(args.encoders, args.seeds)
    score(records.filter(pl.col("encoder") <= "enc01"), ScoreOptions(bootstrap=10, crs_version=STORELESS))  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    scores = score(records, ScoreOptions(bootstrap=args.bootstrap, seed=0, bootstrap_unit="seed",
                                         crs_version=STORELESS))
    seed_s, seed_cpu = time.perf_counter() - t0, time.process_time() - c0
    set_s, files_s = write_cost(scores)
    print(f"writing the scores ({len(scores.written_tables())} tables as Parquet and CSV, scores.json, the metric "
          f"table): as one set {set_s * 1e3:.0f} ms, file by file {files_s * 1e3:.0f} ms: ratio {set_s / files_s:.2f}")
    if args.write_only:
        print(json.dumps({"write_set_s": set_s, "write_files_s": files_s}))
        return
    encoders = sorted(records["encoder"].unique().to_list())
    datasets = sorted(records["dataset"].unique().to_list())
    x_seed, _ = seed_tensor(axes_by_seed(records), encoders, datasets)
    draw = draw_seeds(args.seeds, args.bootstrap, 0)
    t0 = time.perf_counter()
    from crs.scoring.bootstrap import replicates

    replicates(x_seed, draw, "median")
    seed_core_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    seed_loop(x_seed, draw)
    seed_loop_s = time.perf_counter() - t0
    # the command itself, in a fresh process: imports, reading the Parquet, writing every table
    with tempfile.TemporaryDirectory() as tmp:
        save_records(tmp, records)
        cmd = [sys.executable, "-m", "crs.cli", "score", "--results", tmp, "--bootstrap", str(args.bootstrap),
               "--reference", "median", "--crs-version", STORELESS, "--quiet"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        cli_s = time.perf_counter() - t0
    print(f"`crs score --bootstrap {args.bootstrap} --crs-version {STORELESS}` on them (no store), a fresh process: "
          f"{cli_s:.2f} s wall")
    print(f"run records: {records.height} rows; score(..., bootstrap={args.bootstrap}) "
          f"{seed_s:.2f} s wall, {seed_cpu:.2f} s CPU in all (leader {scores.encoders['encoder'][0]})")
    print(f"seed bootstrap alone: vectorised {seed_core_s * 1e3:.1f} ms, per-replicate loop "
          f"{seed_loop_s * 1e3:.0f} ms: ratio {seed_loop_s / seed_core_s:.0f}x")

    # ---------------------------------------------------------------- image-level
    rng = np.random.default_rng(1)
    n, k, S, E, B = args.images, args.classes, args.seeds, args.encoders, args.bootstrap
    y = rng.integers(0, k, n)
    target = np.eye(k, dtype=np.int8)[y]
    known = np.ones_like(target, dtype=bool)
    signal = rng.uniform(0.5, 2.0, size=(E, 1, 1, 1))
    logits = signal * target[None, None] + rng.normal(size=(E, S, n, k))
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (probs / probs.sum(-1, keepdims=True)).astype(np.float32)  # [encoder, seed, image, class]
    t0, c0 = time.perf_counter(), time.process_time()
    counts = resample.image_counts(n, B, np.random.default_rng(2))
    weights = counts.astype(np.float64)
    d = np.empty((B, E, S))
    c = np.empty((B, E, S))
    for e in range(E):
        for s in range(S):
            d[:, e, s] = metrics.weighted_macro_auroc(probs[e, s], target, known, counts)
            c[:, e, s] = 1.0 - metrics.weighted_ece(probs[e, s], target, known, weights, "multiclass")
    image_s, image_cpu = time.perf_counter() - t0, time.process_time() - c0

    # the straightforward loop: per replicate, index the images and re-sort every probe
    r = min(args.loop_replicates, B)
    draws = np.random.default_rng(2).integers(0, n, size=(r, n))
    t0, c0 = time.perf_counter(), time.process_time()
    check = np.empty((r, E, S))
    for b in range(r):
        idx = draws[b]
        for e in range(E):
            for s in range(S):
                p = probs[e, s, idx]
                check[b, e, s] = np.mean([loop_auroc(p[:, j], y[idx] == j) for j in range(k)])
                metrics.weighted_ece(p, target[idx], known[idx], np.ones((n, 1)), "multiclass")
    loop_s = (time.perf_counter() - t0) * B / r
    loop_cpu = (time.process_time() - c0) * B / r
    # the same generator and seed draw the same images: the loop checks the vectorised values
    assert np.allclose(check, d[:r]), "vectorised and looped image-bootstrap AUROC differ"
    ratio = loop_s / image_s
    cumsum_ratio = cumsum_rows_vs_numpy(n, B)
    print(f"image bootstrap (D and C; {E} encoders x {S} seeds x {n} images x {k} classes, B={B}): "
          f"{image_s:.1f} s wall, {image_cpu:.1f} s CPU; per-replicate loop {loop_s:.0f} s wall, "
          f"{loop_cpu:.0f} s CPU (timed on {r} replicates, scaled to {B}): ratio {ratio:.0f}x wall, "
          f"{loop_cpu / image_cpu:.0f}x CPU")
    print(f"cumulative sum down [{n}, {B}] int32 counts: row by row (metrics.weighted.cumsum_rows) is "
          f"{cumsum_ratio:.1f}x faster than np.cumsum(axis=0)")
    print(json.dumps({
        "run_records": records.height,
        "seed_bootstrap_s": round(seed_s, 3),
        "image_bootstrap_s": round(image_s, 2),
        "loop_ratio": round(ratio, 1),
        "seed_bootstrap_cpu_s": round(seed_cpu, 3),
        "crs_score_cli_s": round(cli_s, 2),
        "image_bootstrap_cpu_s": round(image_cpu, 2),
        "loop_ratio_cpu": round(loop_cpu / image_cpu, 1),
        "seed_bootstrap_core_s": round(seed_core_s, 4),
        "seed_loop_ratio": round(seed_loop_s / seed_core_s, 1),
        "image_loop_replicates_timed": r,
        "cumsum_rows_speedup": round(cumsum_ratio, 2),
    }))
    _default_part(args, seed_cpu)


def _default_part(args, seed_cpu: float | None = None) -> None:
    sets = [tuple(int(v) for v in part.split("x")) for part in args.test_sets.split(",")]
    cost = default_unit_cost(sets, args.encoders, args.seeds, args.bootstrap, before=not args.after_only,
                             shared_full=not args.jittered_full)
    for name, c in cost.items():
        if isinstance(c, dict):
            was = "" if "before_cpu_s" not in c else (
                f"before {c['before_cpu_s']:.0f} s CPU ({c['before_wall_s']:.0f} s wall), ")
            diff = "" if "max_axis_diff_over_sd" not in c else (
                f"; one run's axes differ from exact by at most {c['max_axis_diff_over_sd']:.1%} of their sd")
            print(f"default unit 'both', test set {name}, {args.encoders} encoders x {args.seeds} seeds: {was}"
                  f"after {c['after_cpu_s']:.1f} s CPU ({c['after_wall_s']:.1f} s wall); arrays {c['arrays']}{diff}")
    tail = "" if seed_cpu is None else f" + seed-paired scoring {seed_cpu:.1f} s CPU"
    if "total_before_cpu_s" in cost:
        print(f"default unit 'both' at this scale (B={args.bootstrap}), image draws: before "
              f"{cost['total_before_cpu_s']:.0f} s CPU ({cost['total_before_wall_s']:.0f} s wall at this load), "
              f"after {cost['total_after_cpu_s']:.1f} s CPU ({cost['total_after_wall_s']:.1f} s wall){tail}")
    else:
        print(f"default unit 'both' at this scale (B={args.bootstrap}), image draws: "
              f"{cost['total_after_cpu_s']:.1f} s CPU ({cost['total_after_wall_s']:.1f} s wall){tail}")
    print(json.dumps({"default_unit": cost}))


def _versions_part(args) -> None:
    """``--versions 1,2``: ``crs score`` end to end under each CRS version, on the same store, in this one
    process, the versions interleaved over --repeats rounds (so a load change on the machine falls on
    both); each version's best round, and v2's cost relative to v1 in wall and CPU time."""
    versions = [int(v) for v in args.versions.split(",")]
    runs: dict[int, list[dict]] = {v: [] for v in versions}
    store_dir = args.store_dir or tempfile.mkdtemp(prefix="crs-e2e-")
    for _ in range(args.repeats):
        for v in versions:
            cost = end_to_end(store_dir, args.encoders, args.seeds, args.bootstrap, crs_version=v)
            runs[v].append({"wall_s": cost["wall_s"], "cpu_s": cost["cpu_s"], "recorded": cost["crs_version"]})
            print(f"  CRS v{v}: {cost['wall_s']:.1f} s wall, {cost['cpu_s']:.1f} s CPU", flush=True)
    best = {v: {k: min(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for v, rs in runs.items()}
    first = versions[0]
    ratio = {v: {k: round(best[v][k] / best[first][k], 3) for k in ("wall_s", "cpu_s")} for v in versions}
    for v in versions:
        print(f"CRS v{v}: best {best[v]['wall_s']:.1f} s wall, {best[v]['cpu_s']:.1f} s CPU; "
              f"x{ratio[v]['wall_s']:.3f} wall, x{ratio[v]['cpu_s']:.3f} CPU against v{first}")
    print(json.dumps({"versions": {str(v): {"best": best[v], "ratio_to_first": ratio[v], "runs": runs[v]}
                                   for v in versions}, "encoders": args.encoders, "seeds": args.seeds,
                      "bootstrap": args.bootstrap, "store": store_dir}))


def _end_to_end_part(args) -> None:
    cost = end_to_end(args.store_dir, args.encoders, args.seeds, args.bootstrap, direct_reads=args.direct_reads,
                      first_encoders=args.first_encoders)
    if cost["built_s"] is not None:
        print(f"paper-scale store and run records built in {cost['built_s']:.0f} s at {cost['store']}")
    print(f"`crs score` (default settings, unit {cost['unit']!r}, B={args.bootstrap}), {cost['encoders']} encoders x "
          f"{args.seeds} seeds, test sets {', '.join(f'{n}x{k} {t}' for _, n, k, t in PAPER_DATASETS)} (each with "
          f"a shift target){' with the proposed direct reads' if cost['direct_reads'] else ''}: "
          f"{cost['wall_s']:.1f} s wall, {cost['cpu_s']:.1f} s CPU")
    for name, t in sorted(cost["phases"].items(), key=lambda kv: -kv[1]["wall_s"]):
        print(f"  {name:28s} {t['wall_s']:7.2f} s wall {t['cpu_s']:7.2f} s CPU")
    print(json.dumps({"end_to_end": cost}))


if __name__ == "__main__":
    main()
