"""``report``: the score tables -> one self-contained HTML page, its figures as PNG, its tables as CSV and Parquet.

Reads what ``crs score`` wrote (RESULTS/scores/*.parquet and scores.json); recomputes
nothing the score has, except reliability bins from the store when the score was run
without one and ``store`` is given here, and, from the run records beside the scores, the
test-set sizes and seed-bootstrap intervals of the robustness retentions (the score's own
seed draw, so they pair with the CRS intervals). The page opens with the verdict, embeds
every figure as a base64 PNG with a caption and alt text, and carries one small inline
script that sorts tables on a header click; without it the page reads the same, offline,
as one file. A figure whose input is absent becomes a sentence in its section saying
what is missing and how to get it.

One module a job: ``inputs`` (files -> Inputs -> tables), ``sections`` (Inputs -> figures),
``boards`` (tables -> HTML tables), ``page`` (-> the page, filled into templates/report.html
with templates/report.css and templates/report.js), ``markup`` (escaping and number
formats), ``render`` (figures -> PNG files, on two processes where that pays); ``write`` is
the thin edge that writes them.
"""

from crs.scoring.leaderboard import board as leaderboard  # the report's tables/leaderboard.*
from crs.scoring.report.boards import (
    board_html,
    diagnostics_html,
    no_tier_note,
    per_dataset_html,
    q_html,
    test_sets_html,
)
from crs.scoring.report.inputs import (
    Inputs,
    add_from_records,
    add_reliability_from_store,
    load,
    per_dataset_board,
    retention_intervals,
    tables,
    test_sets,
)
from crs.scoring.report.page import (
    GENERATION_META,
    HTML_NAME,
    html,
    page_generation,
    verdict_sentences,
)
from crs.scoring.report.sections import Section, flat_intervals, flat_note, sections
from crs.scoring.report.write import FIGURES_DIR, TABLES_DIR, remove_stale_temporaries, write_report

__all__ = [
    "FIGURES_DIR", "GENERATION_META", "HTML_NAME", "TABLES_DIR", "Inputs", "Section", "add_from_records",
    "add_reliability_from_store", "board_html", "diagnostics_html", "flat_intervals",
    "flat_note", "html", "leaderboard", "load", "no_tier_note", "page_generation", "per_dataset_board",
    "per_dataset_html", "q_html", "remove_stale_temporaries", "retention_intervals", "sections", "tables", "test_sets",
    "test_sets_html", "verdict_sentences", "write_report",
]
