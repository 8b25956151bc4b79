"""The report of a real small pipeline run, opened in headless Chromium.

extract (three demo encoders, demo_cxr with its shift target, one severity) -> probe (two
seeds) -> score (--json) -> report, once per session; then Chromium loads the page from
disk and the test checks the console, every image and the leaderboard against the
score's JSON. A screenshot at desktop width is kept under tests/artifacts/.

Needs Debian's chromium and chromium-driver (.ci/run installs them) and selenium (the
test extra); skipped with the reason when either is missing. selenium is given the
driver's path, so selenium-manager never tries to download one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crs.cli import app

CHROMIUM = os.environ.get("CRS_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CRS_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WIDTH = 1400

pytestmark = [
    pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
                       reason=f"no headless browser: {CHROMIUM} or {CHROMEDRIVER} missing "
                              "(apt-get install chromium chromium-driver; .ci/run does)"),
    pytest.mark.slow,
]


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory):
    """(report folder, the `crs score --json` object) of a small real run."""
    root = tmp_path_factory.mktemp("pipeline")
    store, results = root / "store.zarr", root / "results"
    invoke("extract", "-e", "demo-stats", "-e", "demo-resnet", "-e", "demo-vit", "-d", "demo_cxr",
           "--size", "0.1", "--severities", "4", "--chunk", "64", "--store", store, "--quiet")
    invoke("probe", "--all", "--store", store, "--results", results, "--seeds", "2",
           "--fractions", "0.1,0.5,1", "--l2", "1e-2,1", "--quiet")
    scored = json.loads(invoke("score", "--results", results, "--store", store, "--bootstrap", "50",
                               "--json").stdout)
    summary = json.loads(invoke("report", "--results", results, "--out", root / "report", "--json").stdout)
    return Path(summary["html"]), scored, summary


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[test]')")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="crs-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={WIDTH},1000"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_report_in_a_browser(pipeline, browser):
    page, scored, summary = pipeline
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    assert browser.title.startswith("CRS-Bench report")

    severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe

    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight]);")
    assert len(images) == len(summary["figures"]) >= 8
    for alt, complete, w, h in images:
        assert complete and w > 0 and h > 0, f"image {alt!r} did not decode"

    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#leaderboard tbody tr')).map(r => "
        "[r.querySelector('td.encoder').textContent, r.querySelector('td.crs').textContent]);")
    assert rows == [[e["encoder"], f"{e['crs']:.1f}"] for e in scored["encoders"]]

    # every section either draws its figures or says why not; none is silently empty
    text = browser.find_element("tag name", "body").text
    assert "Not drawn" not in text
    for heading in ("Leaderboard", "Settings", "Profiles on the four axes", "AUROC rank versus CRS rank",
                    "Pareto view", "Reliability diagrams", "Label efficiency", "Robustness",
                    "Rank uncertainty and weight sensitivity", "Methods"):
        assert heading in text, heading

    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, min(int(height) + 120, 16000))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report_desktop.png"
    assert browser.save_screenshot(str(shot))
    print(f"screenshot of the report at {WIDTH} px: {shot}")
