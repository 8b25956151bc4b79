"""README's demo block and docs/report.png, from a real `crs demo` run.

    python tools/readme_demo.py crs-demo            # after `crs demo` (its --out folder)
    python tools/readme_demo.py --rewrite           # the block again from the pinned scores (new wording)
    python tools/readme_demo.py --check             # README's block is what the pinned demo scores give

From the demo folder it reads ``results/scores/scores.json`` (the leaderboard and the verdict are printed
from it, as `crs demo` prints them), pins it as ``tests/golden/demo.json`` (without what records when, where
and by which commit), rewrites the block between the marker comments in README.md and, where headless
Chromium is installed (Debian's ``chromium`` and ``chromium-driver``, and selenium), takes
``docs/report.png`` from ``results/report/report.html`` at 1400 px. tests/test_readme.py renders the block from
``tests/golden/demo.json`` and fails when README's numbers differ from it; re-run this tool after a change
that moves the demo's numbers, and say so in the commit.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GOLDEN = ROOT / "tests" / "golden" / "demo.json"
SHOT = ROOT / "docs" / "report.png"
BEGIN = "<!-- demo output: written by tools/readme_demo.py from tests/golden/demo.json -->"
END = "<!-- end of demo output -->"
VOLATILE = ("generation", "provenance", "digest", "tables")  # when, where, by which commit: not the numbers
WIDTH = 120  # the columns a pipe gets (crs.commands.console)


def pinned(doc: dict) -> dict:
    """scores.json as tests/golden/demo.json keeps it."""
    return {k: v for k, v in doc.items() if k not in VOLATILE}


def render(doc: dict) -> str:
    """The README block: the leaderboard and the verdict as `crs demo` prints them from ``doc`` (scores.json)."""
    import polars as pl
    from rich.console import Console

    from crs.commands.tables import leaderboard_table, verdict_lines
    from crs.scoring import leaderboard

    board = leaderboard.board(pl.DataFrame(doc["encoders"], infer_schema_length=None))
    console = Console(file=io.StringIO(), width=WIDTH, record=True, color_system=None)
    console.print(leaderboard_table(board, doc["settings"].get("reference")))
    table = "\n".join(line.rstrip() for line in console.export_text().splitlines()[1:])  # no title line
    verdict = textwrap.fill("Verdict: " + " ".join(verdict_lines(doc)), width=96, break_on_hyphens=False)
    return f"{BEGIN}\n```text\n{table.strip(chr(10))}\n\n{verdict}\n```\n{END}"


def block(text: str) -> str | None:
    """README's block between the markers, markers included; None where it has none."""
    if BEGIN not in text or END not in text:
        return None
    return text[text.index(BEGIN): text.index(END) + len(END)]


def write_readme(doc: dict) -> None:
    text = README.read_text(encoding="utf-8")
    old = block(text)
    if old is None:
        sys.exit(f"README.md has no demo block: put the lines {BEGIN!r} and {END!r} round it")
    README.write_text(text.replace(old, render(doc)), encoding="utf-8")


def screenshot(page: Path, out: Path = SHOT) -> str:
    """docs/report.png from the demo's page in headless Chromium; what is missing where it cannot. A page that
    is not there is refused before the browser starts (a screenshot of the browser's error page is no figure)."""
    if not page.is_file():
        raise SystemExit(f"no report at {page}: run `crs demo --out FOLDER` and pass FOLDER")
    chromium = os.environ.get("CRS_CHROMIUM", "/usr/bin/chromium")
    driver_path = os.environ.get("CRS_CHROMEDRIVER", "/usr/bin/chromedriver")
    if not (Path(chromium).exists() and Path(driver_path).exists()):
        return (f"docs/report.png left as it was: no {chromium} or {driver_path} "
                "(apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return "docs/report.png left as it was: selenium is not installed (pip install -e '.[test]')"
    profile = tempfile.mkdtemp(prefix="crs-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                 "--disable-background-networking", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    browser = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        browser.get(page.resolve().as_uri())
        browser.set_window_size(1400, 1500)  # the verdict, the leaderboard and the first figures
        browser.save_screenshot(str(out))
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return f"wrote {out.relative_to(ROOT)}"


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        want = render(json.loads(GOLDEN.read_text(encoding="utf-8")))
        same = block(README.read_text(encoding="utf-8")) == want
        print("README's demo block is current" if same else "README's demo block differs: run "
              "`python tools/readme_demo.py crs-demo` after `crs demo`")
        return 0 if same else 1
    if argv == ["--rewrite"]:
        write_readme(json.loads(GOLDEN.read_text(encoding="utf-8")))
        print("rewrote README.md's demo block from tests/golden/demo.json")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__)
        return 2
    folder = Path(argv[0])
    scores = folder / "results" / "scores" / "scores.json"
    if not scores.is_file():
        print(f"no {scores}: run `crs demo --out {folder}` first")
        return 2
    page = folder / "results" / "report" / "report.html"
    if not page.is_file():
        print(f"no {page}: run `crs demo --out {folder}` first (its report is part of what this writes)")
        return 2
    doc = pinned(json.loads(scores.read_text(encoding="utf-8")))
    GOLDEN.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    write_readme(doc)
    print(f"wrote {GOLDEN.relative_to(ROOT)} and README.md's demo block")
    print(screenshot(page))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
