"""``crs run``: extract -> probe -> score -> report from one config, skipping what is current.

What counts as current:

* extract: the store knows which embedding chunks are complete; the extract stage
  resumes and writes only the missing ones (a complete pair costs no model load).
* probe: ``RESULTS/run_state.json`` keeps, per (encoder, dataset), a hash of the probe's
  options record and of the content of what it read (``Store.content_digest`` of the dataset and
  its shift target with that encoder, and whether extract wrote to them in this run), and
  the digest of the files it wrote (run records, selection); the pair is fitted again when
  the hash differs or those files are gone or differ (a ``crs probe`` run by hand). The
  content digest leaves timestamps out, so an extract that writes no chunk of the pair
  leaves it as it was.
* score: a hash of the score's options record and its definition's constants, the store's
  content and the bytes of the run-record files scored, and the digest of the ``scores.json``
  it wrote (a ``crs score`` run by hand changes it, and the scores are made again).
* report: the digest of the ``scores.json`` it was made from, a hash of the report settings,
  and the digest of the HTML it wrote, which must still be there.

Every hash covers contents, never how a path is spelled: the same store or results folder
named by another path, moved or renamed, recomputes nothing.

Each stage's module (``crs.stages.extract``, ``probe``, ``score``, ``report``) holds both its
``is_current`` and its ``run``; ``run`` is the single-stage command's own, so ``crs run`` and the
single-stage commands always compute the same thing. This module only puts the stages in order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crs.foundations.config import Config
from crs.foundations.errors import BadInput
from crs.foundations.progress import NO_PROGRESS, Progress
from crs.stages import extract, names, probe, report, score
from crs.stages.state import Stage, State


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


def run(cfg: Config, progress: Progress = NO_PROGRESS, *, text: str = "", source: str = "", force: bool = False,
        store_hint: str = "", quiet: bool = True, say: Callable[[str], None] | None = None) -> RunResult:
    """Run every stage of ``cfg`` in order; ``force`` recomputes probe, score and report.

    ``cfg`` paths are used as given (``crs.foundations.config.resolve`` makes them relative to the file). ``quiet``: the
    report names no figure file as it writes it. ``say``: called with one line as each stage starts and one
    as it ends (``stage_lines``), where the command shows them.
    """
    t_start = time.perf_counter()
    extra = names.check_names(cfg, text=text, source=source)
    cfg = names.with_sets(cfg)  # the set's encoders named: what every stage below extracts and scores
    if cfg.report.enabled and not report.available():
        raise BadInput(f"the report stage needs {report.REPORT_MODULE} (`crs report`), which this installation lacks; "
                       "set `enabled = false` under [report] (crs demo: --no-report) to run the other stages")
    state = State(Path(cfg.results), force)
    stages: dict[str, Stage] = {}
    say = say or (lambda line: None)
    with stage_lines("extract", stages, say):
        stages["extract"], (store, summaries) = extract.step(cfg, progress, extra, store_hint)
    wanted = probe.wanted_pairs(cfg, store, summaries)
    with stage_lines("probe", stages, say):
        stages["probe"], probed = probe.step(cfg, progress, state, store, summaries, wanted)
    with stage_lines("score", stages, say):
        stages["score"], scores, scores_json, scores_digest = score.step(cfg, progress, state, wanted)
    with stage_lines("report", stages, say, enabled=cfg.report.enabled):
        stages["report"], html = report.step(cfg, state, scores_digest, quiet)
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
