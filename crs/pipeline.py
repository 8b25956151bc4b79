"""``crs run``: extract -> probe -> score -> report from one config, skipping what is current.

What counts as current:

* extract: the store knows which embedding chunks are complete; the extract stage
  resumes and writes only the missing ones (a complete pair costs no model load).
* probe: ``RESULTS/run_state.json`` keeps, per (encoder, dataset), a hash of the probe
  settings and of the embeddings it read (their conditions, and whether extract wrote to
  them in this run); the pair is fitted again when the hash differs or its run records
  are gone.
* score: a hash of the score settings and of the bytes of the run-record files scored.
* report: a hash of the score hash and the report settings, and the HTML must exist.

The stage functions are the command line's own (``crs.cli.run_extract`` and friends), so
``crs run`` and the single-stage commands always compute the same thing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from crs.config import Config, ConfigError, locate, settings_hash
from crs.files import atomic_write

STATE_FILE = "run_state.json"
REPORT_MODULE = "crs.scoring.report"


@dataclass
class Stage:
    """What one stage did: items computed, items found current, its output and time."""

    name: str
    out: str = ""
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    enabled: bool = True
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["seconds"] = round(self.seconds, 2)
        return d


@dataclass
class RunResult:
    store: str
    results: str
    stages: dict[str, Stage]
    scores: object  # crs.scoring.run.Scores, or a stand-in read from scores.json when scoring was current
    scores_json: dict
    probe_summaries: list
    report_html: str | None
    seconds: float

    def timings(self) -> dict[str, float]:
        return {k: round(s.seconds, 1) for k, s in self.stages.items() if s.enabled}

    def as_json(self, source: str = "") -> dict:
        """The scores' JSON (as ``crs score --json``) plus what the run did, where and how long."""
        return {**self.scores_json, "config": source, "store": self.store, "results": self.results,
                "report": self.report_html, "timings_s": self.timings(), "seconds": round(self.seconds, 1),
                "stages": {k: s.as_dict() for k, s in self.stages.items()}}


def report_available() -> bool:
    return importlib.util.find_spec(REPORT_MODULE) is not None


def read_state(results: Path) -> dict:
    try:
        state = json.loads((Path(results) / STATE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(results: Path, state: dict) -> None:
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"
    atomic_write(Path(results) / STATE_FILE, lambda p: p.write_text(text, encoding="utf-8"))


def _file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _where(text: str, source: str, path: tuple[str, ...]):
    return {"line": locate(text, path) if text else None, "source": source, "key": ".".join(path)}


def check_names(cfg: Config, *, text: str = "", source: str = "") -> dict:
    """The encoder records (with --encoder-file's) after checking every name against the registries.

    An unknown name is a ConfigError naming the key and its line.
    """
    from crs.cli import BadInput, _check_dataset_names, _check_names
    from crs.extract import datasets as dsreg
    from crs.extract import encoders as encreg

    extra = {}
    if cfg.encoders.file is not None:
        try:
            extra = {s.name: s for s in encreg.from_toml(str(cfg.encoders.file))}
        except (ValueError, TypeError, OSError) as exc:
            raise ConfigError(str(exc), **_where(text, source, ("encoders", "file"))) from exc
    try:
        for e in cfg.encoders.names:
            if e.startswith(("timm:", "hf:")):
                try:
                    encreg.from_id(e)
                except ValueError as exc:
                    raise BadInput(str(exc)) from exc
        named = [e for e in cfg.encoders.names if not e.startswith(("timm:", "hf:"))]
        if named:
            _check_names(named, encreg.names() + list(extra), "encoder")
    except BadInput as exc:
        raise ConfigError(str(exc), **_where(text, source, ("encoders", "names"))) from None
    try:
        _check_dataset_names(list(cfg.datasets.names))
    except BadInput as exc:
        raise ConfigError(str(exc), **_where(text, source, ("datasets", "names"))) from None
    for name in cfg.datasets.roots:
        if name not in dsreg.REAL:
            raise ConfigError(f"{name!r} is not a dataset read from a folder; roots name one of "
                              f"{', '.join(dsreg.REAL)}", **_where(text, source, ("datasets", "roots", name)))
    missing = [d for d in cfg.datasets.names if d in dsreg.REAL and d not in cfg.datasets.roots]
    if missing:
        raise ConfigError(f"{', '.join(missing)} need their folder: add [datasets.roots] {missing[0]} = \"DIR\"",
                          **_where(text, source, ("datasets", "names")))
    return extra


def run(cfg: Config, *, quiet: bool = False, text: str = "", source: str = "", force: bool = False,
        store_hint: str = "") -> RunResult:
    """Run every stage of ``cfg`` in order; ``force`` recomputes probe, score and report.

    ``cfg`` paths are used as given (``crs.config.resolve`` makes them relative to the file).
    """
    from crs.cli import BadInput, run_extract, run_probe, run_score
    from crs.store import StoreError

    t_start = time.perf_counter()
    extra = check_names(cfg, text=text, source=source)
    if cfg.report.enabled and not report_available():
        raise BadInput(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation lacks; "
                       "set `enabled = false` under [report] (crs demo: --no-report) to run the other stages")
    results = Path(cfg.results)
    state = {} if force else read_state(results)
    new_state = {"probe": dict(state.get("probe", {}))}
    stages: dict[str, Stage] = {}

    # ---------------------------------------------------------------- extract
    from crs.extract import datasets as dsreg

    st = Stage("extract", out=cfg.store)
    t0 = time.perf_counter()
    ds = cfg.datasets
    options = {"roots": dict(ds.roots), "image_root": ds.image_root, "uncertain": ds.uncertain,
               "modality": ds.modality, "shift_target": ds.shift_target, "seed": ds.split_seed,
               "findings": ds.findings}
    ex = cfg.extract
    try:
        store, summaries = run_extract(
            cfg.store, list(cfg.encoders.names), list(ds.names), size=ds.size, chunk=ex.chunk, batch=ex.batch,
            device=None if ex.device == "auto" else ex.device, dtype=ex.dtype, perturbations=ex.perturb,
            quiet=quiet, dataset_options=options, extra_encoders=extra,
            trust_remote_code=cfg.encoders.trust_remote_code, workers=ex.workers, strict=ex.strict,
            severities=ex.severities, precision=ex.precision)
    except StoreError as exc:
        if store_hint:
            raise BadInput(f"{exc}\n({store_hint})") from exc
        raise
    written = set()
    for s in summaries:
        item = f"{s.encoder} × {s.dataset}"
        (st.done if s.chunks_written else st.skipped).append(item)
        if s.chunks_written:
            written.add((s.encoder, s.dataset))
    st.detail = {"chunks_written": sum(s.chunks_written for s in summaries),
                 "chunks_skipped": sum(s.chunks_skipped for s in summaries),
                 "failures": {s.dataset: s.failures for s in summaries if s.failures}}
    st.seconds = time.perf_counter() - t0
    stages["extract"] = st

    # ------------------------------------------------------------------ probe
    from crs.probe.run import pairs_in_store, records_path

    sp = Stage("probe", out=str(results / "run_records"))
    t0 = time.perf_counter()
    trained = {dsreg.store_name(d) for d in ds.names}
    wanted = sorted({(s.encoder, s.dataset) for s in summaries if s.dataset in trained})
    available = set(pairs_in_store(store))
    lacking = [p for p in wanted if p not in available]
    if lacking:
        raise BadInput("no complete clean embeddings with a training split for "
                       + ", ".join(f"{e} × {d}" for e, d in lacking)
                       + f" in {cfg.store}; a dataset without a training split is probed as the shift target "
                       "of the dataset that names it, not on its own")
    pr = cfg.probe
    probe_settings = {"seeds": pr.seeds, "fractions": list(pr.fractions), "l2": list(pr.l2),
                      "select_by": pr.select_by, "tol": pr.tol, "store": cfg.store}

    def pair_hash(e: str, d: str) -> str:
        target = store.dataset(d).attrs.get("shift_target")
        conds = sorted((dd, c, bool(ok)) for dd in ([d, target] if target else [d]) if store.has_dataset(dd)
                       for _, enc, c, ok in store.embeddings(dd) if enc == e)
        return settings_hash(probe_settings, conds)

    hashes = {p: pair_hash(*p) for p in wanted}
    todo = []
    for e, d in wanted:
        target = store.dataset(d).attrs.get("shift_target")
        fresh = (e, d) in written or (target is not None and (e, target) in written)
        current = (not fresh and state.get("probe", {}).get(f"{e}__{d}") == hashes[(e, d)]
                   and records_path(results, e, d).exists())
        (sp.skipped if current else todo).append(f"{e} × {d}" if current else (e, d))

    def done_one(summary):
        new_state["probe"][f"{summary.encoder}__{summary.dataset}"] = hashes[(summary.encoder, summary.dataset)]
        write_state(results, {**state, **new_state})

    probed = []
    if todo:
        probed = run_probe(cfg.store, results, todo, seeds=tuple(range(pr.seeds)), fractions=pr.fractions,
                           l2=pr.l2, quiet=quiet, select_by=pr.select_by, tol=pr.tol, on_done=done_one)
        sp.done = [f"{s.encoder} × {s.dataset}" for s in probed]
        sp.detail = {"probes": sum(s.probes for s in probed), "not_converged": sum(s.not_converged for s in probed)}
    sp.seconds = time.perf_counter() - t0
    stages["probe"] = sp

    # ------------------------------------------------------------------ score
    sc = Stage("score", out=str(results / "scores"))
    t0 = time.perf_counter()
    s_ = cfg.score
    score_settings = {"reference": s_.reference, "weights": list(s_.weights), "bootstrap": s_.bootstrap,
                      "bootstrap_unit": s_.bootstrap_unit, "seed": s_.seed, "store": cfg.store}
    score_hash = settings_hash(score_settings, sorted(
        (e, d, _file_digest(records_path(results, e, d))) for e, d in wanted))
    scores_json_path = results / "scores" / "scores.json"
    if state.get("score") == score_hash and scores_json_path.exists():
        sc.skipped = ["scores"]
        scores_json = json.loads(scores_json_path.read_text(encoding="utf-8"))
        scores = stand_in(scores_json)
    else:
        scores = run_score(results, reference=s_.reference, weights=s_.weights, n_bootstrap=s_.bootstrap,
                           seed=s_.seed, store=cfg.store, bootstrap_unit=s_.bootstrap_unit, pairs=wanted,
                           quiet=quiet)
        scores_json = scores.to_json()
        sc.done = ["scores"]
    new_state["score"] = score_hash
    write_state(results, {**state, **new_state})
    sc.seconds = time.perf_counter() - t0
    stages["score"] = sc

    # ----------------------------------------------------------------- report
    rp = Stage("report", enabled=cfg.report.enabled)
    html = None
    if cfg.report.enabled:
        t0 = time.perf_counter()
        out = Path(cfg.report.out) if cfg.report.out is not None else results / "report"
        rp.out = str(out)
        report_hash = settings_hash(score_hash, str(out))
        previous = state.get("report", {}) if isinstance(state.get("report"), dict) else {}
        if previous.get("hash") == report_hash and previous.get("html") and Path(previous["html"]).exists():
            rp.skipped = ["report"]
            html = previous["html"]
        else:
            written_report = write_report_stage(results, out, store=cfg.store, quiet=quiet)
            html = str(written_report["html"])
            rp.done = ["report"]
            rp.detail = json.loads(json.dumps({k: written_report.get(k) for k in ("figures", "tables")}, default=str))
        new_state["report"] = {"hash": report_hash, "html": html}
        write_state(results, {**state, **new_state})
        rp.seconds = time.perf_counter() - t0
    stages["report"] = rp
    return RunResult(store=cfg.store, results=str(results), stages=stages, scores=scores, scores_json=scores_json,
                     probe_summaries=probed, report_html=html, seconds=time.perf_counter() - t_start)


def write_report_stage(results: Path, out: Path, *, store: str, quiet: bool) -> dict:
    """``crs.scoring.report.write_report``; a clear error where that module is missing."""
    try:
        from crs.scoring.report import write_report
    except ModuleNotFoundError as exc:
        if exc.name != REPORT_MODULE:
            raise
        raise RuntimeError(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation "
                           "lacks; set `enabled = false` under [report]") from exc
    return write_report(Path(results), Path(out), store=store, quiet=quiet)


def stand_in(scores_json: dict):
    """An object with the parts of ``Scores`` the terminal printers use, rebuilt from scores.json."""
    import polars as pl
    from types import SimpleNamespace

    return SimpleNamespace(settings=scores_json["settings"], rank_comparison=scores_json["rank_comparison"],
                           encoders=pl.DataFrame(scores_json["encoders"]),
                           weight_leaders=pl.DataFrame(scores_json.get("weight_sensitivity", [])),
                           to_json=lambda: scores_json)
