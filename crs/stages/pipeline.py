"""``crs run``: extract -> probe -> score -> report from one config, skipping what is current.

What counts as current:

* extract: the store knows which embedding chunks are complete; the extract stage
  resumes and writes only the missing ones (a complete pair costs no model load).
* probe: ``RESULTS/run_state.json`` keeps, per (encoder, dataset), a hash of the probe
  settings and of the content of what it read (``Store.content_digest`` of the dataset and
  its shift target with that encoder, and whether extract wrote to them in this run), and
  the digest of the files it wrote (run records, selection); the pair is fitted again when
  the hash differs or those files are gone or differ (a ``crs probe`` run by hand). The
  content digest leaves timestamps out, so an extract that writes no chunk of the pair
  leaves it as it was.
* score: a hash of the score settings, the store's content and the bytes of the run-record
  files scored, and the digest of the ``scores.json`` it wrote (a ``crs score`` run by hand
  changes it, and the scores are made again).
* report: the digest of the ``scores.json`` it was made from, and the digest of the HTML
  it wrote, which must still be there.

Every hash covers contents, never how a path is spelled: the same store or results folder
named by another path, moved or renamed, recomputes nothing.

The stage functions are the single-stage commands' own (``crs.stages.steps``), so ``crs run``
and the single-stage commands always compute the same thing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from crs.config import Config, ConfigError, locate, report_folder, settings_hash
from crs.errors import BadInput, UserError
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


def _file_digest(path: Path) -> str | None:
    """sha256 of the file's bytes (16 hex digits), or None where there is no such file."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return h.hexdigest()[:16]


def _where(text: str, source: str, path: tuple[str, ...]):
    return {"line": locate(text, path) if text else None, "source": source, "key": ".".join(path)}


def check_names(cfg: Config, *, text: str = "", source: str = "") -> dict:
    """The encoder records (with the config's encoder file's) after checking every name against the registries.

    An unknown name is a ConfigError naming the key and its line.
    """
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders loads this layer

    try:
        extra = steps.encoder_records(cfg.encoders.file)
    except BadInput as exc:
        raise ConfigError(str(exc), **_where(text, source, ("encoders", "file"))) from exc
    names = list(cfg.encoders.names)
    for key, check in ((("encoders", "names"), lambda: steps.check_encoders(names, extra) if names or not
                        cfg.encoders.set else None),
                       (("encoders", "set"), lambda: steps.with_sets(cfg)),
                       (("encoders", "revisions"), lambda: steps.encoder_specs(cfg, extra)),
                       (("datasets", "names"), lambda: steps.check_dataset_names(list(cfg.datasets.names))),
                       (("datasets", "shift_target"),
                        lambda: steps.check_shift_target(cfg.datasets.shift_target, list(cfg.datasets.names)))):
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


def check_datasets(cfg: Config, *, text: str = "", source: str = "") -> list[str]:
    """The names of the config's datasets and their shift targets, each opened as extraction will open it
    (the CSV read, the folder indexed, no image decoded). One that cannot be opened is a ConfigError
    naming the key: ``datasets.names`` for a dataset, ``datasets.shift_target`` (where the config sets
    it, else ``datasets.names``) for a target; so is one none of whose images is where its rows say.
    A dataset some of whose images are missing passes: extraction records those as failures."""
    from crs.extract import real  # noqa: PLC0415 -- polars, PIL: crs encoders loads this layer
    try:
        named = steps.named_datasets(cfg)
    except UserError as exc:
        raise ConfigError(str(exc), **_where(text, source, ("datasets", "names"))) from None
    target_key = ("datasets", "shift_target") if cfg.datasets.shift_target else ("datasets", "names")
    try:
        every = steps._datasets_with_shift_targets(cfg, named)
    except UserError as exc:
        raise ConfigError(f"the shift target of {', '.join(d.name for d in named)} cannot be opened: {exc}",
                          **_where(text, source, target_key)) from None
    for d in every:
        try:
            real.require_measurable(d)
        except UserError as exc:
            named_one = any(d is n for n in named)
            raise ConfigError(str(exc), **_where(text, source, ("datasets", "names") if named_one else target_key)) \
                from None
        found, rows = real.files_found(d)
        if rows and not found:  # extraction would record every image as a failure, and the probe refuse
            role = "dataset" if any(d is n for n in named) else "shift target"
            raise ConfigError(f"none of the {rows} images of {role} {d.name} is where its rows say (under "
                              f"{d.root}); name the folder that holds them (datasets.roots, or datasets.image_root "
                              "for a csv: dataset) or fix the paths; `crs datasets check` lists each missing file",
                              **_where(text, source, ("datasets", "names") if role == "dataset" else target_key))
    return [d.name for d in every]


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
        store_hint: str = "", quiet: bool = True, say: Callable[[str], None] | None = None) -> RunResult:
    """Run every stage of ``cfg`` in order; ``force`` recomputes probe, score and report.

    ``cfg`` paths are used as given (``crs.config.resolve`` makes them relative to the file). ``quiet``: the
    report names no figure file as it writes it. ``say``: called with one line as each stage starts and one
    as it ends (``stage_lines``), where the command shows them.
    """
    t_start = time.perf_counter()
    extra = check_names(cfg, text=text, source=source)
    cfg = steps.with_sets(cfg)  # the set's encoders named: what every stage below extracts and scores
    if cfg.report.enabled and not report_available():
        raise BadInput(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation lacks; "
                       "set `enabled = false` under [report] (crs demo: --no-report) to run the other stages")
    state = State(Path(cfg.results), force)
    stages: dict[str, Stage] = {}
    say = say or (lambda line: None)
    with stage_lines("extract", stages, say):
        stages["extract"], (store, summaries) = _extract(cfg, progress, extra, store_hint)
    wanted = _probed_pairs(cfg, store, summaries)
    with stage_lines("probe", stages, say):
        stages["probe"], probed = _probe(cfg, progress, state, store, summaries, wanted)
    with stage_lines("score", stages, say):
        stages["score"], scores, scores_json, scores_digest = _score(cfg, progress, state, wanted)
    with stage_lines("report", stages, say, enabled=cfg.report.enabled):
        stages["report"], html = _report(cfg, state, scores_digest, quiet)
    return RunResult(store=cfg.store, results=str(cfg.results), stages=stages, scores=scores,
                     scores_json=scores_json, probe_summaries=probed, report_html=html,
                     seconds=time.perf_counter() - t_start)


@contextlib.contextmanager
def stage_lines(name: str, stages: dict[str, Stage], say: Callable[[str], None], enabled: bool = True):
    """One line as stage ``name`` starts and one as it ends (what it did and its time, from ``stages[name]``,
    which the body fills); nothing for a stage the config disables, no end line for one that failed."""
    if not enabled:
        yield
        return
    say(f"{name}: started")
    yield
    st = stages[name]
    what = ", ".join(x for x in (f"{len(st.done)} done" if st.done else "",
                                 f"{len(st.skipped)} already complete" if st.skipped else "") if x)
    say(f"{name}: finished in {st.seconds:.1f} s" + (f" ({what})" if what else ""))


def _extract(cfg: Config, progress: Progress, extra: dict, store_hint: str):
    from crs.store import StoreError  # noqa: PLC0415 -- zarr: crs encoders loads this layer

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
    from crs.extract import datasets as dsreg  # noqa: PLC0415 -- polars, PIL: crs encoders loads this layer
    from crs.probe.run import pairs_in_store  # noqa: PLC0415 -- polars, zarr: crs encoders loads this layer

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
           "tol": pr.tol}
    if pr.head != "linear":  # a linear probe's hash names no head: the same settings, the same hash, with or without it
        out.update(head=pr.head, hidden=pr.hidden)
    return out


def _read_by(store, d: str) -> list[str]:
    """The datasets a probe of ``d`` reads: ``d`` and its shift target, where the store holds them."""
    target = store.dataset(d).attrs.get("shift_target")
    return [dd for dd in ([d, target] if target else [d]) if store.has_dataset(dd)]


def _pair_hash(digest, store, settings: dict, e: str, d: str) -> str:
    """The probe settings and the content of what the pair reads: its dataset's and its shift
    target's tables and ``e``'s embeddings of them (``digest(dataset, encoder)``, a
    ``Store.content_digest``, which covers the store's identity but not its path)."""
    return settings_hash(settings, [(dd, digest(dd, e)) for dd in _read_by(store, d)])


def _probe_outputs(results: Path, model: str, d: str) -> str | None:
    """A digest of the files ``crs probe`` writes for one pair under RESULTS (None: its run records are gone)."""
    from crs.probe.run import SELECTION_DIR, records_path  # noqa: PLC0415 -- polars, zarr: crs encoders loads this layer

    path = records_path(results, model, d)
    records = _file_digest(path)
    if records is None:
        return None
    return settings_hash(records, _file_digest(results / SELECTION_DIR / path.name))


def _probe(cfg: Config, progress: Progress, state: State, store, summaries, wanted):
    from crs.probe.run import head_name  # noqa: PLC0415 -- polars, zarr: crs encoders loads this layer

    results = Path(cfg.results)
    sp = Stage("probe", out=str(results / "run_records"))
    t0 = time.perf_counter()
    written = {(s.encoder, s.dataset) for s in summaries if s.chunks_written}
    settings = _probe_settings(cfg)
    hashes = {p: _pair_hash(store.content_digest, store, settings, *p) for p in wanted}  # as the probe reads it
    todo = []
    for e, d in wanted:
        fresh = any((e, dd) in written for dd in _read_by(store, d))
        recorded = state.old.get("probe", {}).get(f"{e}__{d}")
        outputs = _probe_outputs(results, head_name(e, cfg.probe.head), d)
        # the content digests leave out timestamps, so an extract that wrote nothing leaves them as they were
        current = (not fresh and isinstance(recorded, dict) and recorded.get("inputs") == hashes[(e, d)]
                   and outputs is not None and recorded.get("outputs") == outputs)
        if current:  # as the store holds it now, for the next run to compare with
            sp.skipped.append(f"{e} × {d}")
            state.new["probe"][f"{e}__{d}"] = {"inputs": hashes[(e, d)], "outputs": outputs}
        else:
            todo.append((e, d))
    state.set("probe", state.new["probe"])
    pending = iter(todo)

    def done_one(summary):  # pairs are probed in order: the summary is the next pending pair's
        e, d = next(pending)
        state.new["probe"][f"{e}__{d}"] = {"inputs": hashes[(e, d)],
                                           "outputs": _probe_outputs(results, head_name(e, cfg.probe.head), d)}
        state.set("probe", state.new["probe"])

    probed = []
    if todo:
        probed = steps.probe(cfg.store, results, todo, settings=cfg.probe, progress=progress, on_done=done_one)
        sp.done = [f"{s.encoder} × {s.dataset}" for s in probed]
        sp.detail = {"probes": sum(s.probes for s in probed), "not_converged": sum(s.not_converged for s in probed)}
    sp.seconds = time.perf_counter() - t0
    return sp, probed


def _score(cfg: Config, progress: Progress, state: State, wanted):
    from crs.probe.run import head_name, records_path  # noqa: PLC0415 -- polars, zarr: crs encoders loads this layer
    from crs.scoring.crs import constants  # noqa: PLC0415 -- numpy: crs encoders loads this layer

    results = Path(cfg.results)
    sc = Stage("score", out=str(results / "scores"))
    t0 = time.perf_counter()
    s_ = cfg.score
    scored = [(head_name(e, cfg.probe.head), d) for e, d in wanted]
    # the definition too: another version, or v2 with other constants, must score again
    score_settings = {"reference": s_.reference, "weights": list(s_.weights), "bootstrap": s_.bootstrap,
                      "bootstrap_unit": s_.bootstrap_unit, "seed": s_.seed, "crs_version": s_.crs_version,
                      "min_difference": s_.min_difference, "crs_constants": constants(s_.crs_version)}
    score_hash = settings_hash(score_settings, _store_content(cfg.store, sorted({d for _, d in scored})), sorted(
        (e, d, _file_digest(records_path(results, e, d))) for e, d in scored))
    scores_json_path = results / "scores" / "scores.json"
    before = state.old.get("score")
    digest = _file_digest(scores_json_path)
    if (isinstance(before, dict) and before.get("inputs") == score_hash and digest is not None
            and before.get("scores_json") == digest):
        sc.skipped = ["scores"]
        scores_json = json.loads(scores_json_path.read_text(encoding="utf-8"))
        scores = stand_in(scores_json)
    else:
        scores = steps.score(results, s_, store=cfg.store, pairs=scored, progress=progress)
        scores_json = scores.to_json()
        digest = _file_digest(scores_json_path)
        sc.done = ["scores"]
    state.set("score", {"inputs": score_hash, "scores_json": digest})
    sc.seconds = time.perf_counter() - t0
    return sc, scores, scores_json, digest


def _store_content(store_path: str, datasets: list[str]) -> list:
    """What scoring reads from the store (its identity and the datasets' tables), not its path;
    empty where the store cannot be opened (scoring then works from the run records alone)."""
    from crs.store import Store, StoreError  # noqa: PLC0415 -- zarr: crs encoders loads this layer

    try:
        store = Store(str(store_path), mode="r")
    except StoreError:
        return []
    return [store.store_id] + [(d, store.content_digest(d)) for d in datasets if store.has_dataset(d)]


def _report(cfg: Config, state: State, scores_digest: str | None, quiet: bool):
    """The report is current when it was made from the ``scores.json`` there is now (its digest) and
    its HTML is still the one written then; names are kept relative to the report folder, so a
    moved results folder keeps its report."""
    rp = Stage("report", enabled=cfg.report.enabled)
    if not cfg.report.enabled:
        return rp, None
    t0 = time.perf_counter()
    results = Path(cfg.results)
    out = Path(report_folder(cfg.results, cfg.report.out))
    rp.out = str(out)
    previous = state.old.get("report", {}) if isinstance(state.old.get("report"), dict) else {}
    name = previous.get("html_name")
    html = out / name if isinstance(name, str) and name and Path(name).name == name else None
    made = previous.get("html_digest")
    current = (scores_digest is not None and previous.get("scores_json") == scores_digest
               and html is not None and made is not None and _file_digest(html) == made)
    if current:
        rp.skipped = ["report"]
    else:
        written_report = steps.report(results, out, store=cfg.store, quiet=quiet)
        html = Path(written_report["html"])
        rp.done = ["report"]
        rp.detail = json.loads(json.dumps({k: written_report.get(k) for k in ("figures", "tables")}, default=str))
    state.set("report", {"scores_json": scores_digest, "html_name": html.name, "html_digest": _file_digest(html)})
    rp.seconds = time.perf_counter() - t0
    return rp, str(html)


def stand_in(scores_json: dict):
    """An object with the parts of ``Scores`` the terminal printers use, rebuilt from scores.json."""
    import polars as pl  # noqa: PLC0415 -- polars: crs encoders loads this layer

    return SimpleNamespace(settings=scores_json["settings"], rank_comparison=scores_json["rank_comparison"],
                           encoders=pl.DataFrame(scores_json["encoders"]),
                           weight_leaders=pl.DataFrame(scores_json["weight_sensitivity"]),
                           diagnostics=pl.DataFrame(scores_json["diagnostics"]),
                           to_json=lambda: scores_json)
