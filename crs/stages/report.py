"""The report stage: RESULTS' scores as one HTML page with its figures and tables (``run``), and ``crs
run``'s step, which writes it again only when it is not current (``is_current``)."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from crs.foundations.config import Config, record_hash, report_folder
from crs.stages.state import Stage, State, file_digest

REPORT_MODULE = "crs.scoring.report"


def available() -> bool:
    return importlib.util.find_spec(REPORT_MODULE) is not None


def run(results: Path, out: Path | None = None, *, store: str | None = None, quiet: bool = True) -> dict:
    """Write RESULTS' scores as one HTML page with its figures and tables (``out``: default RESULTS/report)."""
    try:
        from crs.scoring.report import write_report  # polars: crs encoders lists the registry without it
    except ModuleNotFoundError as exc:
        if exc.name != REPORT_MODULE:
            raise
        raise RuntimeError(f"the report stage needs {REPORT_MODULE} (`crs report`), which this installation "
                           "lacks; set `enabled = false` under [report]") from exc
    target = Path(report_folder(str(results), None if out is None else str(out)))
    return write_report(Path(results), target, store=store, quiet=quiet)


def is_current(recorded: dict, scores_digest: str | None, settings: str, html: Path | None) -> bool:
    """Whether the report's state entry ``recorded`` was made from the scores.json there is now
    (``scores_digest``) under the report settings there are now (``settings``, their hash), and its HTML
    (``html``) is still the file written then."""
    made = recorded.get("html_digest")
    return (scores_digest is not None and recorded.get("scores_json") == scores_digest
            and recorded.get("settings") == settings
            and html is not None and made is not None and file_digest(html) == made)


def step(cfg: Config, state: State, scores_digest: str | None, quiet: bool):
    """``crs run``'s report stage: ``run`` unless the report is current (``is_current``); (what it did, the
    HTML's path or None where the config disables the report). The HTML's name is kept relative to the
    report folder, so a moved results folder keeps its report."""
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
    settings = record_hash(cfg.report)
    if is_current(previous, scores_digest, settings, html):
        rp.skipped = ["report"]
    else:
        written_report = run(results, out, store=cfg.store, quiet=quiet)
        html = Path(written_report["html"])
        rp.done = ["report"]
        rp.detail = json.loads(json.dumps({k: written_report.get(k) for k in ("figures", "tables")}, default=str))
    state.set("report", {"scores_json": scores_digest, "settings": settings, "html_name": html.name,
                         "html_digest": file_digest(html)})
    rp.seconds = time.perf_counter() - t0
    return rp, str(html)
