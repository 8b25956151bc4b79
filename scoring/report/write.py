"""The report's edge: OUT/report.html, OUT/figures/*.png and OUT/tables/*.{csv,parquet}, each file whole,
under the report folder's writer lock."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from crs.foundations.files import atomic_write, put, write_frame
from crs.scoring.report.inputs import add_from_records, add_reliability_from_store, load, tables
from crs.scoring.report.page import HTML_NAME, html
from crs.scoring.report.render import render_figures
from crs.scoring.report.sections import sections
from crs.scoring.scoreset import GENERATION_KEY, writer_lock

FIGURES_DIR = "figures"
TABLES_DIR = "tables"

def remove_stale_temporaries(out: Path) -> list[Path]:
    """Delete the temporary files (``crs.foundations.files.atomic_write``'s ``.NAME.*.tmp``) a killed report left in
    OUT, OUT/figures and OUT/tables; called under the report's writer lock, so none is another run's."""
    gone = []
    for folder in (out, out / FIGURES_DIR, out / TABLES_DIR):
        for f in folder.glob(".*.tmp") if folder.is_dir() else ():
            f.unlink(missing_ok=True)
            gone.append(f)
    return gone


def _write_figures(out: Path, secs: list, quiet: bool) -> tuple[dict, list[str]]:
    """Render and write every figure, each file whole (two processes where that pays, see render.py):
    (PNG bytes by stem, paths)."""
    folder = out / FIGURES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    figures = [(stem, fig) for sec in secs for stem, fig, *_ in sec.figures]
    def path_of(stem: str) -> Path:
        return folder / f"{stem}.png"

    images = render_figures(figures, path_of)
    paths = [str(path_of(stem)) for stem, _ in figures]
    if not quiet:
        for path in paths:
            print(f"figure {path}", file=sys.stderr)
    return images, paths


def _write_tables(out: Path, tabs: dict, generation: str | None) -> list[str]:
    """Every table as Parquet (marked with the scores' generation) and CSV, each file whole."""
    (out / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    paths = []
    for name, table in tabs.items():
        mark = {GENERATION_KEY: generation or ""}
        for ext in ("parquet", "csv"):
            path = out / TABLES_DIR / f"{name}.{ext}"
            write_frame(path, table, ext, mark if ext == "parquet" else None)
            paths.append(str(path))
    return paths


def write_report(results: Path, out: Path, *, store: str | None = None, quiet: bool = False) -> dict:
    """Write OUT/report.html (self-contained), OUT/figures/*.png and OUT/tables/*.{csv,parquet}.

    Returns {"html", "figures" (PNG paths), "tables" (paths), "absent" (sections' reasons),
    "seconds"}. Raises MissingScores (a UserError: exit 2 at the CLI) when RESULTS holds no scores.
    """
    t0 = time.perf_counter()
    results, out = Path(results), Path(out)
    inputs = load(results)
    if store is not None:
        add_reliability_from_store(inputs, results, store)
    add_from_records(inputs, results)
    tabs = tables(inputs)
    secs = sections(inputs)
    out.mkdir(parents=True, exist_ok=True)
    with writer_lock(out):  # two reports into one folder write one after the other
        remove_stale_temporaries(out)
        images, figure_paths = _write_figures(out, secs, quiet)
        table_paths = _write_tables(out, tabs, inputs.generation)
        text = html(inputs, tabs["leaderboard"], tabs["leaderboard_per_dataset"], secs, images,
                    inputs.table("test_sets"))
        page = out / HTML_NAME
        atomic_write(page, lambda p: put(p, text.encode("utf-8")))
    return {
        "html": str(page),
        "figures": figure_paths,
        "tables": table_paths,
        "absent": {sec.key: sec.absent for sec in secs if sec.absent},
        "notes": inputs.notes,
        "scores_generation": inputs.generation,
        "seconds": round(time.perf_counter() - t0, 2),
    }
