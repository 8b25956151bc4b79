"""The four stages as library functions: extract, probe, score, report.

Each takes the typed settings of ``crs.config`` (trusted: they passed the schema's
checks), a ``crs.progress.Progress`` and returns what it made. The name checks against
the registries live here too, so that the command line and ``crs run`` give the same
answer. Heavy libraries are imported inside the stage that needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from crs.config import Config, Probe, Score
from crs.errors import BadInput
from crs.progress import NO_PROGRESS, Progress

HUB_PREFIXES = ("timm:", "hf:")


# ------------------------------------------------------------------ names
def check_names(given: list[str], valid: list[str], what: str) -> list[str]:
    """``given`` once each, in order; BadInput listing the valid names for an unknown one."""
    if not given:
        raise BadInput(f"no {what} given; pass --{what} NAME (valid: {', '.join(valid)}) or --all")
    for name in given:
        if name not in valid:
            raise BadInput(f"unknown {what} {name!r}; valid {what}s: {', '.join(valid)}")
    return list(dict.fromkeys(given))


def check_dataset_names(given: list[str]) -> list[str]:
    from crs.extract import datasets as dsreg

    if not given:
        raise BadInput(f"no dataset given; pass --dataset NAME (valid: {', '.join(dsreg.all_names())}) or --all")
    for name in given:
        if not dsreg.is_known(name):
            raise BadInput(f"unknown dataset {name!r}; valid datasets: {', '.join(dsreg.all_names())}")
    return list(dict.fromkeys(given))


def encoder_records(file: str | None) -> dict:
    """The extra encoder records of an --encoder-file (name -> record); BadInput for a bad file."""
    from crs.extract import encoders as encreg

    if file is None:
        return {}
    try:
        return {s.name: s for s in encreg.from_toml(str(file))}
    except (ValueError, TypeError, OSError) as exc:
        raise BadInput(str(exc)) from exc


def check_encoders(names: list[str], extra: dict) -> list[str]:
    """Registry names, names of ``extra`` records and well-formed timm:/hf: ids, once each."""
    from crs.extract import encoders as encreg

    for e in names:
        if e.startswith(HUB_PREFIXES):
            try:
                encreg.from_id(e)
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
    named = [e for e in names if not e.startswith(HUB_PREFIXES)]
    if named or not names:
        check_names(named, encreg.names() + list(extra), "encoder")
    return list(dict.fromkeys(names))


def parse_roots(values: list[str] | None, datasets: list[str]) -> dict[str, str]:
    """--root NAME=DIR binds a folder to a real dataset; a bare --root DIR goes to the one real dataset given."""
    from crs.extract import datasets as dsreg

    roots, bare = {}, []
    for v in values or []:
        name, sep, path = v.partition("=")
        if sep and name in dsreg.REAL:
            roots[name] = path
        else:
            bare.append(v)
    unbound = [d for d in datasets if d in dsreg.REAL and d not in roots]
    if bare:
        if len(bare) > 1 or len(unbound) != 1:
            raise BadInput(f"--root {bare[0]!r} names no dataset and the datasets needing a folder are "
                           f"{unbound or 'none'}; pass --root NAME=DIR for each of {', '.join(dsreg.REAL)}")
        roots[unbound[0]] = bare[0]
    return roots


# ------------------------------------------------------------------ extract
class Extracted(NamedTuple):
    store: object  # crs.store.Store, opened for appending
    summaries: list  # crs.extract.run.ExtractSummary, one per (encoder, dataset)


def dataset_options(cfg: Config) -> dict:
    ds = cfg.datasets
    return {"roots": dict(ds.roots), "image_root": ds.image_root, "uncertain": ds.uncertain,
            "modality": ds.modality, "shift_target": ds.shift_target, "findings": ds.findings,
            # image paths outside the root: read only when the config says so (crs.extract.datasets.get)
            "allow_absolute_paths": ds.allow_absolute_paths}


def _datasets_with_shift_targets(cfg: Config) -> list:
    """The config's datasets, each followed by its shift target: probing evaluates the shift on it."""
    from crs.extract import datasets as dsreg

    opts, ds = dataset_options(cfg), cfg.datasets
    todo = {}
    for d in ds.names:
        dataset = dsreg.get(d, size=ds.size, seed=0 if d in dsreg.BUILTIN else ds.split_seed, **opts)
        for x in (dataset, dsreg.shift_target_of(dataset, **{**opts, "shift_target": None})):
            if x is not None and x.name not in todo:
                todo[x.name] = x
    return list(todo.values())


def extract(cfg: Config, progress: Progress = NO_PROGRESS, *, extra_encoders: dict | None = None) -> Extracted:
    """Embed every dataset of ``cfg`` (and its shift target) with every encoder into ``cfg.store``."""
    from crs.extract import encoders as encreg
    from crs.extract.run import extract as extract_pair
    from crs.store import Store

    enc, ex = cfg.encoders, cfg.extract
    if enc.weights is not None and len(enc.names) != 1:
        raise BadInput(f"--weights names one checkpoint; pass exactly one --encoder (got {len(enc.names)})")
    extra = encoder_records(enc.file) if extra_encoders is None else extra_encoders
    datasets = _datasets_with_shift_targets(cfg)
    store = Store(cfg.store, mode="a")
    specs = [encreg.resolve(e, extra) for e in enc.names]
    ray_options = {"address": ex.address, "actors": ex.actors} if ex.executor == "ray" else None
    summaries = [
        extract_pair(store, spec, d, size=cfg.datasets.size, chunk=ex.chunk, batch=ex.batch,
                     device=None if ex.device == "auto" else ex.device, dtype=ex.dtype, perturbations=ex.perturb,
                     progress=progress, weights=enc.weights, trust_remote_code=enc.trust_remote_code,
                     workers=ex.workers, strict=ex.strict, severities=tuple(ex.severities), precision=ex.precision,
                     executor=ex.executor, ray_options=ray_options)
        for spec in specs for d in datasets]
    return Extracted(store, summaries)


# ------------------------------------------------------------------ probe
def probe_pairs(store_path: str, encoders: list[str], datasets: list[str], *, every: bool) -> list[tuple[str, str]]:
    """The (encoder, dataset) pairs to probe: the ones named, or with ``every`` all in the store (filtered
    by any names given); BadInput naming what the store holds when a pair lacks embeddings."""
    from crs.extract import datasets as dsreg
    from crs.extract import encoders as encreg
    from crs.probe.run import pairs_in_store
    from crs.store import Store

    datasets = [dsreg.store_name(d) for d in datasets]  # csv:PATH -> its store name
    st = Store(store_path, mode="r")
    available = pairs_in_store(st)
    if encoders:
        check_names(encoders, sorted(set(encreg.names()) | {e for e, _ in available}), "encoder")
    if datasets:
        check_names(datasets, sorted(set(dsreg.names()) | set(dsreg.REAL) | set(st.datasets())), "dataset")
    for d in datasets:
        if st.has_dataset(d) and not (st.dataset(d).split == 0).any():
            raise BadInput(f"dataset {d!r} has no training split (an external test set); it is evaluated "
                           "as the shift target of the dataset that names it, not probed itself")
    held = ", ".join(f"{e} × {d}" for e, d in available) or "nothing yet"
    if every:
        pairs = [(e, d) for e, d in available if (not encoders or e in encoders) and (not datasets or d in datasets)]
        if not pairs:
            raise BadInput(f"nothing to probe in {store_path!r} for that selection (it holds: {held}); "
                           "run `crs extract` first")
        return pairs
    if not encoders or not datasets:
        raise BadInput("pass --encoder and --dataset, or --all")
    pairs = [(e, d) for e in encoders for d in datasets]
    for e, d in pairs:
        if (e, d) not in available:
            raise BadInput(f"no complete clean embeddings of {d!r} by {e!r} in {store_path!r} (it holds: "
                           f"{held}); run `crs extract --encoder {e} --dataset {d} --store {store_path}`")
    return pairs


def probe(store_path: str, results: Path, pairs: list[tuple[str, str]], settings: Probe,
          progress: Progress = NO_PROGRESS, on_done: Callable | None = None) -> list:
    """Fit and evaluate ``settings``' probes on each pair; ``on_done(summary)`` after each pair is written."""
    from crs.probe.run import head_name
    from crs.probe.run import probe as probe_pair
    from crs.store import Store

    store = Store(store_path, mode="a")
    summaries = []
    task = progress.add_task("probes", total=len(pairs), unit="pairs")
    for enc, d in pairs:
        progress.update(task, description=f"probes {head_name(enc, settings.head)} × {d}")
        summaries.append(probe_pair(store, enc, d, results=Path(results), seeds=tuple(range(settings.seeds)),
                                    fractions=settings.fractions, l2_grid=settings.l2, select_by=settings.select_by,
                                    tol=settings.tol, head=settings.head, hidden=settings.hidden))
        progress.advance(task)
        if on_done is not None:
            on_done(summaries[-1])
    return summaries


# ------------------------------------------------------------------ score
def score(results: Path, settings: Score, store: str | None = None, pairs: list[tuple[str, str]] | None = None,
          progress: Progress = NO_PROGRESS):
    """Score the run records under ``results`` (only ``pairs`` if given) and write RESULTS/scores."""
    from crs import records
    from crs.extract.encoders import default_reference
    from crs.scoring.run import METRIC_TABLE
    from crs.scoring.run import score as score_table

    table = records.read(results)
    if pairs is not None:  # crs run scores the (encoder, dataset) pairs its config names, not older leftovers
        import polars as pl

        keep = pl.DataFrame({"encoder": [e for e, _ in pairs], "dataset": [d for _, d in pairs]})
        table = table.join(keep, on=["encoder", "dataset"], how="semi")
    encoders = sorted(table["encoder"].unique().to_list())
    ref = default_reference(encoders) if settings.reference == "auto" else settings.reference
    opened, note = _open_for_scoring(store)
    # the bootstrap is vectorised, so there is nothing to count: the bar shows the elapsed time
    progress.add_task(f"score ({table['encoder'].n_unique()} encoders, {settings.bootstrap_unit} bootstrap "
                      f"B={settings.bootstrap})", total=None)
    # the scoring code raises BadInput for records or options that do not allow a score; any
    # other ValueError is a bug in it and must surface as one (exit 1), not as the user's fault
    scores = score_table(table, reference=ref, weights=settings.weights, n_bootstrap=settings.bootstrap,
                         seed=settings.seed, bootstrap_unit=settings.bootstrap_unit, store=opened,
                         results=Path(results))
    if note:
        scores.settings["warnings"].insert(0, note)
    scores.write(Path(results) / "scores", metric_table=Path(results) / METRIC_TABLE)
    return scores


def _open_for_scoring(store: str | None):
    """(the store or None, a note): the run records still allow a score without the store."""
    from crs.store import Store, StoreError

    if store is None:
        return None, None
    try:
        return Store(str(store), mode="r"), None
    except StoreError as exc:
        return None, f"{exc}; scoring from the run records alone"


# ------------------------------------------------------------------ report
REPORT_MODULE = "crs.scoring.report"


def report(results: Path, out: Path | None = None, *, store: str | None = None, quiet: bool = True) -> dict:
    """Write RESULTS' scores as one HTML page with its figures and tables (``out``: default RESULTS/report)."""
    try:
        from crs.scoring.report import write_report
    except ModuleNotFoundError as exc:
        if exc.name != REPORT_MODULE:
            raise
        raise RuntimeError(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation "
                           "lacks; set `enabled = false` under [report]") from exc
    target = Path(out) if out is not None else Path(results) / "report"
    return write_report(Path(results), target, store=store, quiet=quiet)
