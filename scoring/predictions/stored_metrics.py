"""The metrics that need stored probabilities, per (encoder, dataset, seed, fraction, condition), with
temperature scaling, reliability bins and per-class AUROC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from crs.foundations.conditions import parse
from crs.foundations.labels import check_task
from crs.foundations.names import VALIDATION
from crs.scoring import metrics, resample
from crs.scoring import temperature as ts
from crs.scoring.axes import FRACTION_TOL
from crs.scoring.predictions.read import VAL, MissingPredictions, Predictions, find_index, split_targets
from crs.store import Store


class ProbeMetrics(NamedTuple):
    metrics: pl.DataFrame  # per (encoder, dataset, seed, fraction, condition)
    reliability: pl.DataFrame  # reliability-diagram bins at fraction 1, clean and shift
    per_class: pl.DataFrame  # AUROC per class or label at fraction 1, clean and shift
    warnings: list[str]


def probe_metrics(
    store: Store, records: pl.DataFrame, encoders: Sequence[str], datasets: Sequence[str]
) -> ProbeMetrics:
    """Metrics that need stored probabilities, per (encoder, dataset, seed, fraction, condition).

    Returns ProbeMetrics(metrics, reliability, per_class, warnings). metrics has the columns of
    ``metrics.all_metrics`` (balanced accuracy, classwise ECE, AURC, quadratic kappa for
    ordinal datasets, ...), ``temperature`` (fitted per seed and fraction on the
    ``validation`` probabilities) and ``ece_ts``, ``brier_ts``, ``nll_ts`` after
    temperature scaling. Clean rows at every fraction of the run records, other
    conditions at fraction 1 (what docs/crs-v1.md reads). reliability holds the top-label
    reliability bins at fraction 1 for the clean test split and each shift target, before
    and after scaling (``scaled``); per_class the one-vs-rest AUROC of each class (each
    label, multi-label) there, with its name. A (dataset, encoder) without validation
    probabilities gets null temperature columns, and one warning names them all.
    """
    metrics_pass = MetricsPass(store, records, encoders, datasets)
    for dataset in datasets:
        for encoder in encoders:
            metrics_pass.add_pair(dataset, encoder)
    return metrics_pass.result()


class MetricsPass:
    """``probe_metrics`` one (dataset, encoder) at a time, so that a reader of the same arrays
    (``image_bootstrap_axes``) can hand over what it has read: ``add_pair`` every pair, in
    ``datasets`` then ``encoders`` order, then ``result``. MissingPredictions met on the way is
    raised by ``result``, as ``probe_metrics`` would raise it."""

    def __init__(self, store: Store, records: pl.DataFrame, encoders: Sequence[str], datasets: Sequence[str]):
        self.store, self.encoders, self.datasets = store, list(encoders), list(datasets)
        cells = records.select("encoder", "dataset", "seed", "fraction", "condition")
        self._seeds = {(e, d): sorted(set(s)) for (e, d), s in _grouped(cells, ["encoder", "dataset"], "seed")}
        self._fractions: dict[tuple, dict[str, list[float]]] = {}
        for (e, d, c), fr in _grouped(cells, ["encoder", "dataset", "condition"], "fraction"):
            self._fractions.setdefault((e, d), {})[c] = sorted(set(fr))
        self._parts = _Parts([], [], [])
        self._no_validation: list[str] = []
        self._tests: dict[str, _TestSplit] = {}
        self._vals: dict[str, tuple] = {}
        self.kept: dict = {}  # counted_rows per (dataset, split), for Predictions
        self._missing: MissingPredictions | None = None
        self._pairs = 0

    def split(self, dataset: str) -> _TestSplit:
        """The test split of ``dataset`` (a comparison dataset or a shift target), read once."""
        if dataset not in self._tests:
            self._tests[dataset] = _TestSplit(*split_targets(self.store, dataset))
        return self._tests[dataset]

    def _val_split(self, dataset: str):
        """(target, known) of the validation split, read once; None where it cannot be read (then
        ``_temperatures`` reads it itself and says what is wrong)."""
        if dataset not in self._vals:
            try:
                self._vals[dataset] = split_targets(self.store, dataset, VAL)[:2]
            except MissingPredictions:
                return None
        return self._vals[dataset]

    def add_pair(self, dataset: str, encoder: str, read: dict | None = None) -> None:
        """The metrics of one pair; ``read``: {condition: Predictions} already read for it."""
        self._pairs += 1
        if self._missing is not None:
            return
        try:
            self._pair(dataset, encoder, dict(read or {}))
        except MissingPredictions as exc:
            self._missing = exc

    def _pair(self, dataset: str, encoder: str, read: dict) -> None:
        test = self.split(dataset)
        seeds = self._seeds.get((encoder, dataset), [])
        temps = _temperatures(self.store, dataset, encoder, test.task, self._val_split(dataset), self.kept)
        if temps is None:
            self._no_validation.append(f"{encoder}/{dataset}")
        for condition, fr in sorted(self._fractions.get((encoder, dataset), {}).items()):
            pred = read.get(condition) or Predictions(self.store, dataset, encoder, condition, self.kept)
            _condition_metrics(self, test, pred, condition, seeds, fr, temps, self._parts)

    @property
    def complete(self) -> bool:
        """Every pair was added (a reader that stopped early leaves the pass incomplete)."""
        return self._pairs == len(self.encoders) * len(self.datasets)

    def result(self) -> ProbeMetrics:
        if self._missing is not None:
            raise self._missing
        if not self.complete:
            raise RuntimeError(f"MetricsPass got {self._pairs} pairs of {len(self.encoders) * len(self.datasets)}")
        warnings = []
        if self._no_validation:
            warnings.append(
                f"no validation probabilities for {', '.join(self._no_validation)}: temperature-scaled "
                "metrics left out (re-run `crs probe` with a crs that writes them)"
            )
        return _assemble(self._parts, warnings)


def _grouped(cells: pl.DataFrame, keys: list[str], value: str):
    """((key values...), [values]) per group of ``keys``, in no particular order."""
    for row in cells.group_by(keys).agg(pl.col(value)).iter_rows():
        yield tuple(row[:-1]), row[-1]


class _TestSplit(NamedTuple):
    target: np.ndarray  # [image, class]
    known: np.ndarray  # [image, class]
    task: str
    attrs: dict

    @property
    def ordinal(self) -> bool:
        return bool(self.attrs.get("ordinal", False)) and check_task(self.task).exclusive


class _Parts(NamedTuple):
    """Collected per (dataset, encoder, condition), put together at the end (``_assemble``)."""

    metrics: list[dict]  # {column: values}, the columns of the metrics table in its order
    reliability: list[pl.DataFrame]
    per_class: list[pl.DataFrame]


def _temperatures(store: Store, dataset: str, encoder: str, task: str, val_split=None, kept: dict | None = None):
    """(validation Predictions, temperature [stored seed, stored fraction]), or None without them.

    Each distinct validation array is fitted once (``temperature.fit`` fits every array on its own,
    so the values are those of fitting them all). ``val_split``: (target, known) of the validation
    split where the caller has them."""
    try:
        val = Predictions(store, dataset, encoder, VALIDATION, kept)
        v_target, v_known = split_targets(store, dataset, VAL)[:2] if val_split is None else val_split
    except MissingPredictions:
        return None
    flat = val.probs.reshape(-1, *val.probs.shape[2:])
    where, distinct = _distinct(flat)
    t = ts.fit(flat[distinct], v_target, v_known, task)[where]
    return val, t.reshape(val.probs.shape[:2])


def _distinct(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where [array]: the index of each array's kind, distinct [kind]: the first array of each kind) of
    flat [array, ...], arrays of one kind having the same bytes (``resample.array_key``)."""
    first: dict[tuple, int] = {}
    where = np.array([first.setdefault(resample.array_key(a), len(first)) for a in flat], dtype=np.int64)
    return where, np.unique(where, return_index=True)[1]


def _full(fr: Sequence[float]) -> list[int]:
    return [i for i, f in enumerate(fr) if abs(f - 1.0) <= FRACTION_TOL]


def _condition_metrics(metrics_pass: MetricsPass, test: _TestSplit, pred: Predictions, condition, seeds, fr, temps,
                       parts: _Parts) -> None:
    """Every metric of one (dataset, encoder, condition) at its fractions, added to ``parts``.

    The values of ``metrics.all_metrics`` on the long table, computed by ``metrics.array_metrics``
    once per distinct array (``_distinct``: at fraction 1 every seed's probe is one probe)."""
    encoder, dataset = pred.encoder, pred.dataset
    kind = parse(condition).kind
    if kind != "clean":
        fr = [f for f in fr if abs(f - 1.0) <= FRACTION_TOL]
    if not fr:
        return
    split = metrics_pass.split(parse(condition).dataset) if kind == "shift" else test
    probs = pred.select(seeds, fr)  # [seed, fraction, image, class]
    if probs.shape[2:] != split.target.shape:
        raise MissingPredictions(
            f"{encoder}/{dataset}/{condition} holds probabilities for {probs.shape[2]} images x {probs.shape[3]} "
            f"classes, the split {split.target.shape[0]} x {split.target.shape[1]}; re-run {pred.repair}"
        )
    names = [*metrics.BASE, *(["kappa_quadratic"] if test.ordinal else [])]
    flat = probs.reshape(-1, *probs.shape[2:])  # [seed x fraction, image, class]
    kinds, distinct = _distinct(flat)
    values = _array_metrics(pred, flat, distinct, seeds, fr, split, test.task, names)
    n = flat.shape[0]
    cols = {"seed": np.repeat(np.asarray(seeds, dtype=np.int64), len(fr)),
            "fraction": np.tile(np.asarray(fr, dtype=np.float64), len(seeds)),
            **{k: v[kinds] for k, v in values.items()}}
    scaled = scaled_kinds = None
    if temps is not None:
        scaled, after, scaled_kinds = _scaled(flat, kinds, temps, seeds, fr, split, test.task)
        cols.update(after)
    else:
        cols.update({c: np.full(n, np.nan) for c in ("temperature", "ece_ts", "brier_ts", "nll_ts")})
    if not test.ordinal:
        cols["kappa_quadratic"] = np.full(n, np.nan)
    parts.metrics.append({**cols, "encoder": [encoder] * n, "dataset": [dataset] * n, "condition": [condition] * n})
    full = _full(fr)[:1]
    if kind in ("clean", "shift") and full:
        head = dict(encoder=pl.lit(encoder), dataset=pl.lit(dataset), condition=pl.lit(condition))
        labels = _labels_from(split.target, split.known, test.task)
        views = []  # (scaled, long table of the distinct seeds' arrays at fraction 1, seed -> its seed there)
        groups = [(False, probs, kinds)] + ([] if scaled is None else [(True, scaled, scaled_kinds)])
        ranked = pred.select(seeds, fr, scores=True)  # per-class AUROC's
        for is_scaled, arrays, kind_of in groups:
            at = np.asarray(kind_of).reshape(len(seeds), len(fr))[:, full[0]]
            rep = [int(np.flatnonzero(at == a)[0]) for a in at]  # the first seed with the same array
            mine = sorted(set(rep))
            table = metrics.long_table(arrays[mine][:, full], labels, test.task,
                                       {"seed": [seeds[i] for i in mine], "fraction": [fr[full[0]]]},
                                       scores=None if is_scaled else ranked[mine][:, full])
            views.append((is_scaled, table, [seeds[i] for i in rep]))
        _full_label_views(test, fr[full[0]], views, seeds, head, parts)


def _array_metrics(pred: Predictions, flat: np.ndarray, distinct: np.ndarray, seeds, fr, split, task: str,
                   names: list[str]) -> dict[str, np.ndarray]:
    """``metrics.array_metrics`` of the distinct arrays of flat [seed x fraction, image, class], in the order of
    ``names``; AUROC from the stored log-probabilities (they do not tie where probabilities saturate)."""
    if "auroc" not in names:
        return metrics.array_metrics(flat[distinct], split.target, split.known, task, names)
    values = metrics.array_metrics(flat[distinct], split.target, split.known, task, [n for n in names if n != "auroc"])
    ranked = pred.select(seeds, fr, scores=True).reshape(flat.shape)[distinct]
    values["auroc"] = metrics.array_metrics(ranked, split.target, split.known, task, ["auroc"])["auroc"]
    return {n: values[n] for n in names if n in values}


def _scaled(flat: np.ndarray, kinds: np.ndarray, temps, seeds, fr, split, task: str):
    """(scaled probabilities [seed, fraction, image, class], {temperature, ece_ts, brier_ts, nll_ts: [seed x
    fraction]}, kind [seed x fraction]) of flat [seed x fraction, image, class]; each distinct (array,
    temperature), one kind, is scaled once."""
    val, t_all = temps
    s_idx = find_index(val.seeds, seeds, "seeds", val.where)
    t = t_all[np.ix_(s_idx, find_index(val.fractions, fr, "fractions", val.where))].reshape(-1)
    pairs: dict[tuple, int] = {}
    which = np.array([pairs.setdefault((int(k), float(v)), len(pairs)) for k, v in zip(kinds, t, strict=True)])
    one = np.unique(which, return_index=True)[1]
    scaled = ts.scale(flat[one], t[one], task)
    after = metrics.array_metrics(scaled, split.target, split.known, task, ("ece", "brier", "nll"))
    columns = {"temperature": t, **{f"{k}_ts": v[which] for k, v in after.items()}}
    return scaled[which].reshape(len(seeds), len(fr), *flat.shape[1:]), columns, which


def _full_label_views(test: _TestSplit, full: float, views, seeds, head: dict, parts: _Parts) -> None:
    """Per-class AUROC and the reliability bins (unscaled, and scaled where fitted) at fraction 1.

    ``views``: (scaled, long table, rep) with the long table of the distinct seeds' arrays and
    rep[s] the seed whose array seed s shares; every seed gets the rows of its rep."""
    names = pl.DataFrame({"class": list(range(len(test.attrs["classes"]))),
                          "class_name": [str(c) for c in test.attrs["classes"]]},
                         schema={"class": pl.Int64, "class_name": pl.String})
    _, table, rep = views[0]
    at_full = table.filter(pl.col("fraction") == full)
    per_class = metrics.auroc_per_class(at_full, ["seed"]).join(names, on="class", how="left")
    parts.per_class.append(_for_every_seed(per_class, seeds, rep).with_columns(**head))
    for is_scaled, tab, rep in views:
        rel = metrics.reliability(tab.filter(pl.col("fraction") == full), ["seed"], test.task)
        parts.reliability.append(_for_every_seed(rel, seeds, rep).with_columns(**head, scaled=pl.lit(is_scaled)))


def _for_every_seed(table: pl.DataFrame, seeds, rep) -> pl.DataFrame:
    """``table``'s rows for every seed s, those of seed rep[s] relabelled (``table`` holds the rep seeds)."""
    if list(rep) == list(seeds):
        return table
    dtype = table.schema["seed"]
    return pl.concat([table.filter(pl.col("seed") == r).with_columns(pl.lit(s, dtype=dtype).alias("seed"))
                      for s, r in zip(seeds, rep, strict=True)])


def _assemble(parts: _Parts, warnings: list[str]) -> ProbeMetrics:
    if not parts.metrics:
        return ProbeMetrics(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), warnings)
    cols = ["encoder", "dataset", "seed", "fraction", "condition"]
    table = _metrics_frame(parts.metrics)
    table = table.select(*cols, pl.exclude(*cols)).sort(cols)
    rel = pl.concat(parts.reliability, how="diagonal_relaxed") if parts.reliability else pl.DataFrame()
    if rel.height:
        first = ["encoder", "dataset", "condition", "scaled", "seed"]
        rel = rel.select(*first, pl.exclude(*first)).sort(*first, *[c for c in ("class", "bin") if c in rel.columns])
    per_class = pl.concat(parts.per_class, how="diagonal_relaxed") if parts.per_class else pl.DataFrame()
    if per_class.height:
        first = ["encoder", "dataset", "condition", "seed", "class", "class_name"]
        per_class = per_class.select(*first, "auroc").sort(first[:5])
    return ProbeMetrics(table, rel, per_class, warnings)


def _metrics_frame(parts: list[dict]) -> pl.DataFrame:
    """One table of the parts' columns (every part has them all, the column order the first part's), NaN as null."""
    names = list(parts[0])
    text = {"encoder", "dataset", "condition"}
    columns = {c: ([v for p in parts for v in p[c]] if c in text else np.concatenate([p[c] for p in parts]))
               for c in names}
    schema = {c: pl.String if c in text else pl.Int64 if c == "seed" else pl.Float64 for c in names}
    return pl.DataFrame(columns, schema=schema).fill_nan(None)


def _labels_from(target: np.ndarray, known: np.ndarray, task: str) -> np.ndarray:
    """Stored-label form (class index, or int8 {1, 0, -1}) back from target and known."""
    if check_task(task).exclusive:
        return target.argmax(axis=1)
    return np.where(known, target, -1).astype(np.int8)
