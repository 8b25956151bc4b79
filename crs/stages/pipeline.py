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

The stage functions are the single-stage commands' own (``crs.stages.steps``), so ``crs run``
and the single-stage commands always compute the same thing.
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
from crs.errors import BadInput
from crs.files import atomic_write
from crs.progress import NO_PROGRESS, Progress
from crs.stages import steps
from crs.stages.steps import REPORT_MODULE

STATE_FILE = "run_state.json"


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
    """The encoder records (with the config's encoder file's) after checking every name against the registries.

    An unknown name is a ConfigError naming the key and its line.
    """
    from crs.extract import datasets as dsreg

    try:
        extra = steps.encoder_records(cfg.encoders.file)
    except BadInput as exc:
        raise ConfigError(str(exc), **_where(text, source, ("encoders", "file"))) from exc
    for key, check in ((("encoders", "names"), lambda: steps.check_encoders(list(cfg.encoders.names), extra)),
                       (("datasets", "names"), lambda: steps.check_dataset_names(list(cfg.datasets.names)))):
        try:
            check()
        except BadInput as exc:
            raise ConfigError(str(exc), **_where(text, source, key)) from None
    for name in cfg.datasets.roots:
        if name not in dsreg.REAL:
            raise ConfigError(f"{name!r} is not a dataset read from a folder; roots name one of "
                              f"{', '.join(dsreg.REAL)}", **_where(text, source, ("datasets", "roots", name)))
    missing = [d for d in cfg.datasets.names if d in dsreg.REAL and d not in cfg.datasets.roots]
    if missing:
        raise ConfigError(f"{', '.join(missing)} need their folder: add [datasets.roots] {missing[0]} = \"DIR\"",
                          **_where(text, source, ("datasets", "names")))
    return extra


class State:
    """RESULTS/run_state.json: what each stage last computed, read at the start and written after each step."""

    def __init__(self, results: Path, force: bool):
        self.results = results
        self.old = {} if force else read_state(results)
        self.new = {"probe": dict(self.old.get("probe", {}))}

    def set(self, key: str, value) -> None:
        self.new[key] = value
        write_state(self.results, {**self.old, **self.new})


def run(cfg: Config, progress: Progress = NO_PROGRESS, *, text: str = "", source: str = "", force: bool = False,
        store_hint: str = "", quiet: bool = True) -> RunResult:
    """Run every stage of ``cfg`` in order; ``force`` recomputes probe, score and report.

    ``cfg`` paths are used as given (``crs.config.resolve`` makes them relative to the file).
    """
    t_start = time.perf_counter()
    extra = check_names(cfg, text=text, source=source)
    if cfg.report.enabled and not report_available():
        raise BadInput(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation lacks; "
                       "set `enabled = false` under [report] (crs demo: --no-report) to run the other stages")
    state = State(Path(cfg.results), force)
    stages: dict[str, Stage] = {}
    stages["extract"], (store, summaries) = _extract(cfg, progress, extra, store_hint)
    wanted = _probed_pairs(cfg, store, summaries)
    stages["probe"], probed = _probe(cfg, progress, state, store, summaries, wanted)
    stages["score"], scores, scores_json, score_hash = _score(cfg, progress, state, wanted)
    stages["report"], html = _report(cfg, state, score_hash, quiet)
    return RunResult(store=cfg.store, results=str(cfg.results), stages=stages, scores=scores,
                     scores_json=scores_json, probe_summaries=probed, report_html=html,
                     seconds=time.perf_counter() - t_start)


def _extract(cfg: Config, progress: Progress, extra: dict, store_hint: str):
    from crs.store import StoreError

    st = Stage("extract", out=cfg.store)
    t0 = time.perf_counter()
    try:
        extracted = steps.extract(cfg, progress, extra_encoders=extra)
    except StoreError as exc:
        if store_hint:
            raise BadInput(f"{exc}\n({store_hint})") from exc
        raise
    summaries = extracted.summaries
    for s in summaries:
        (st.done if s.chunks_written else st.skipped).append(f"{s.encoder} × {s.dataset}")
    st.detail = {"chunks_written": sum(s.chunks_written for s in summaries),
                 "chunks_skipped": sum(s.chunks_skipped for s in summaries),
                 "failures": {s.dataset: s.failures for s in summaries if s.failures}}
    st.seconds = time.perf_counter() - t0
    return st, extracted


def _probed_pairs(cfg: Config, store, summaries) -> list[tuple[str, str]]:
    """The (encoder, dataset) pairs with a training split that were extracted; BadInput where one lacks embeddings."""
    from crs.extract import datasets as dsreg
    from crs.probe.run import pairs_in_store

    trained = {dsreg.store_name(d) for d in cfg.datasets.names}
    wanted = sorted({(s.encoder, s.dataset) for s in summaries if s.dataset in trained})
    available = set(pairs_in_store(store))
    lacking = [p for p in wanted if p not in available]
    if lacking:
        raise BadInput("no complete clean embeddings with a training split for "
                       + ", ".join(f"{e} × {d}" for e, d in lacking)
                       + f" in {cfg.store}; a dataset without a training split is probed as the shift target "
                       "of the dataset that names it, not on its own")
    return wanted


def _probe_settings(cfg: Config) -> dict:
    pr = cfg.probe
    out = {"seeds": pr.seeds, "fractions": list(pr.fractions), "l2": list(pr.l2), "select_by": pr.select_by,
           "tol": pr.tol, "store": cfg.store}
    if pr.head != "linear":  # the linear probe's hash stays what it was before heads were settings
        out.update(head=pr.head, hidden=pr.hidden)
    return out


def _pair_hash(store, settings: dict, e: str, d: str) -> str:
    """The probe settings and the conditions of the embeddings the pair reads (its own and its shift target's)."""
    target = store.dataset(d).attrs.get("shift_target")
    conds = sorted((dd, c, bool(ok)) for dd in ([d, target] if target else [d]) if store.has_dataset(dd)
                   for _, enc, c, ok in store.embeddings(dd) if enc == e)
    return settings_hash(settings, conds)


def _probe(cfg: Config, progress: Progress, state: State, store, summaries, wanted):
    from crs.probe.run import head_name, records_path

    results = Path(cfg.results)
    sp = Stage("probe", out=str(results / "run_records"))
    t0 = time.perf_counter()
    written = {(s.encoder, s.dataset) for s in summaries if s.chunks_written}
    settings = _probe_settings(cfg)
    hashes = {p: _pair_hash(store, settings, *p) for p in wanted}
    todo = []
    for e, d in wanted:
        target = store.dataset(d).attrs.get("shift_target")
        fresh = (e, d) in written or (target is not None and (e, target) in written)
        current = (not fresh and state.old.get("probe", {}).get(f"{e}__{d}") == hashes[(e, d)]
                   and records_path(results, head_name(e, cfg.probe.head), d).exists())
        (sp.skipped if current else todo).append(f"{e} × {d}" if current else (e, d))
    pending = iter(todo)

    def done_one(summary):  # pairs are probed in order: the summary is the next pending pair's
        e, d = next(pending)
        state.new["probe"][f"{e}__{d}"] = hashes[(e, d)]
        state.set("probe", state.new["probe"])

    probed = []
    if todo:
        probed = steps.probe(cfg.store, results, todo, settings=cfg.probe, progress=progress, on_done=done_one)
        sp.done = [f"{s.encoder} × {s.dataset}" for s in probed]
        sp.detail = {"probes": sum(s.probes for s in probed), "not_converged": sum(s.not_converged for s in probed)}
    sp.seconds = time.perf_counter() - t0
    return sp, probed


def _score(cfg: Config, progress: Progress, state: State, wanted):
    from crs.probe.run import head_name, records_path

    results = Path(cfg.results)
    sc = Stage("score", out=str(results / "scores"))
    t0 = time.perf_counter()
    s_ = cfg.score
    scored = [(head_name(e, cfg.probe.head), d) for e, d in wanted]
    score_settings = {"reference": s_.reference, "weights": list(s_.weights), "bootstrap": s_.bootstrap,
                      "bootstrap_unit": s_.bootstrap_unit, "seed": s_.seed, "store": cfg.store}
    score_hash = settings_hash(score_settings, sorted(
        (e, d, _file_digest(records_path(results, e, d))) for e, d in scored))
    scores_json_path = results / "scores" / "scores.json"
    if state.old.get("score") == score_hash and scores_json_path.exists():
        sc.skipped = ["scores"]
        scores_json = json.loads(scores_json_path.read_text(encoding="utf-8"))
        scores = stand_in(scores_json)
    else:
        scores = steps.score(results, s_, store=cfg.store, pairs=scored, progress=progress)
        scores_json = scores.to_json()
        sc.done = ["scores"]
    state.set("score", score_hash)
    sc.seconds = time.perf_counter() - t0
    return sc, scores, scores_json, score_hash


def _report(cfg: Config, state: State, score_hash: str, quiet: bool):
    rp = Stage("report", enabled=cfg.report.enabled)
    if not cfg.report.enabled:
        return rp, None
    t0 = time.perf_counter()
    results = Path(cfg.results)
    out = Path(cfg.report.out) if cfg.report.out is not None else results / "report"
    rp.out = str(out)
    report_hash = settings_hash(score_hash, str(out))
    previous = state.old.get("report", {}) if isinstance(state.old.get("report"), dict) else {}
    if previous.get("hash") == report_hash and previous.get("html") and Path(previous["html"]).exists():
        rp.skipped = ["report"]
        html = previous["html"]
    else:
        written_report = steps.report(results, out, store=cfg.store, quiet=quiet)
        html = str(written_report["html"])
        rp.done = ["report"]
        rp.detail = json.loads(json.dumps({k: written_report.get(k) for k in ("figures", "tables")}, default=str))
    state.set("report", {"hash": report_hash, "html": html})
    rp.seconds = time.perf_counter() - t0
    return rp, html


def stand_in(scores_json: dict):
    """An object with the parts of ``Scores`` the terminal printers use, rebuilt from scores.json."""
    import polars as pl
    from types import SimpleNamespace

    return SimpleNamespace(settings=scores_json["settings"], rank_comparison=scores_json["rank_comparison"],
                           encoders=pl.DataFrame(scores_json["encoders"]),
                           weight_leaders=pl.DataFrame(scores_json.get("weight_sensitivity", [])),
                           to_json=lambda: scores_json)
