"""The report of a real small pipeline run, opened in headless Chromium.

extract (three demo encoders, demo_cxr with its shift target, one severity) -> probe (two
seeds) -> score (--json) -> report, once per session; then Chromium loads the page from
disk and the test reads it as a reader would: the verdict opens the page and names the
leader, every figure has a caption and alt text, a table sorts when its header is
clicked, and the cost section draws its figure (or, for a store without cost records,
says so in its place). Screenshots are kept in the test's temporary folder and under
tests/artifacts/ (CRS_REPORT_SHOTS=DIR copies them there too).

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
SHOTS = os.environ.get("CRS_REPORT_SHOTS")  # an extra folder for the screenshots, to look at them
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


def _shot(browser, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    assert browser.save_screenshot(str(path))
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(SHOTS) / name)
    return path


def _column(browser, table: str, cls: str) -> list[str]:
    return browser.execute_script(
        f"return Array.from(document.querySelectorAll('{table} tbody tr')).map(r => "
        f"r.querySelector('td.{cls}').textContent);")


def test_report_in_a_browser(pipeline, browser, tmp_path):
    page, scored, summary = pipeline
    browser.set_window_size(WIDTH, 1000)
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

    # the verdict comes first and names the leader
    leader = scored["encoders"][0]["encoder"]
    first = browser.execute_script("return document.querySelector('h2').textContent")
    assert first == "Verdict"
    verdict = browser.find_element("id", "verdict").text
    assert leader in verdict, verdict
    if not scored.get("verdict"):  # the page's own reading of the tier
        opening = (f"{leader} ranks first in", f"{leader} has the highest CRS", f"{leader} (the reference) has")
        assert any(o in verdict for o in opening), verdict
    _shot(browser, tmp_path, "report_top.png")

    # every figure has a caption that says what to look at, and alt text
    figures = browser.execute_script(
        "return Array.from(document.querySelectorAll('figure')).map(f => [f.querySelector('img').alt, "
        "f.querySelector('figcaption') ? f.querySelector('figcaption').textContent : '']);")
    assert len(figures) == len(images)
    for alt, caption in figures:
        assert len(alt) > 40 and len(caption) > 60, (alt, caption)
        assert not caption.strip().endswith(".png"), caption

    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#leaderboard tbody tr')).map(r => "
        "[r.querySelector('td.encoder').textContent, r.querySelector('td.crs').getAttribute('data-sort')]);")
    assert [(e, float(c)) for e, c in rows] == [(e["encoder"], e["crs"]) for e in scored["encoders"]]

    # a click on a header sorts the table, a second click reverses it
    head = browser.find_element("css selector", "#leaderboard thead th:nth-child(2)")  # encoder
    head.click()
    assert _column(browser, "#leaderboard", "encoder") == sorted(e["encoder"] for e in scored["encoders"])
    assert head.get_attribute("aria-sort") == "ascending"
    auroc = browser.find_element("xpath", "//table[@id='leaderboard']//th[normalize-space()='AUROC']")
    auroc.click()
    auroc.click()
    by_auroc = sorted(scored["encoders"], key=lambda e: -e["auroc"])
    assert _column(browser, "#leaderboard", "encoder") == [e["encoder"] for e in by_auroc]
    browser.execute_script("document.getElementById('leaderboard').scrollIntoView()")
    _shot(browser, tmp_path, "report_sorted.png")

    # cost beside quality: the figure, or (a store extracted without cost records) why not
    browser.execute_script("document.getElementById('cost').scrollIntoView()")
    _shot(browser, tmp_path, "report_cost.png")
    cost_fig = browser.find_elements("id", "fig-cost_quality")
    has_cost = any(e.get("gflops") is not None or e.get("images_per_s") is not None for e in scored["encoders"])
    if has_cost:
        assert cost_fig and cost_fig[0].find_element("tag name", "figcaption").text
    else:
        assert not cost_fig
        cost = browser.execute_script("return document.getElementById('cost').nextElementSibling.nextElementSibling"
                                      ".textContent")
        assert "no cost data" in cost, cost

    # every section either draws its figures or says why not; none is silently empty
    text = browser.find_element("tag name", "body").text
    assert text.count("Not drawn") == (0 if has_cost else 1)
    for heading in ("Verdict", "Leaderboard", "Reading the scale", "Test-set sizes", "Settings",
                    "Cost beside quality", "Profiles on the four axes", "AUROC rank versus CRS rank",
                    "Pareto view", "Reliability diagrams", "Label efficiency", "Robustness",
                    "Rank uncertainty and weight sensitivity", "Methods", "Appendix"):
        assert heading in text, heading

    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, min(int(height) + 120, 16000))
    shot = _shot(browser, tmp_path, "report_desktop.png")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "report_desktop.png")
    print(f"screenshots of the report at {WIDTH} px: {tmp_path}")


PHONE = (390, 844)  # an iPhone 12-15's viewport in CSS pixels


def test_report_on_a_phone(pipeline, browser, tmp_path):
    """At 390 px nothing scrolls the page sideways (wide tables scroll in their boxes), every figure takes the
    width there is, and a tap shows it at its full size without widening the page."""
    page, _, _ = pipeline
    browser.set_window_size(*PHONE)
    browser.get(page.as_uri())
    inner = browser.execute_script("return window.innerWidth")
    if inner != PHONE[0]:  # some headless builds keep a minimum window width
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
        browser.get(page.as_uri())
    assert browser.execute_script("return window.innerWidth") == PHONE[0]
    wide = browser.execute_script("return document.documentElement.scrollWidth")
    culprits = browser.execute_script(
        "return Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > "
        "window.innerWidth + 1 && !e.closest('.scroll, .zoom')).slice(0, 8).map(e => e.tagName + '.' + e.className);")
    assert wide <= PHONE[0], f"the page is {wide} px wide at {PHONE[0]} px: {culprits}"
    sizes = browser.execute_script(
        "return Array.from(document.querySelectorAll('figure img')).map(i => [i.getBoundingClientRect().width, "
        "i.naturalWidth, i.closest('figure').getBoundingClientRect().width]);")
    assert sizes
    for shown, natural, room in sizes:
        assert shown >= min(natural, room) - 2, (shown, natural, room)  # the whole width there is
        assert room >= PHONE[0] - 40, room  # and that is nearly the screen's
    zoom = browser.find_element("css selector", "figure .zoom")
    browser.execute_script("arguments[0].scrollIntoView()", zoom)
    zoom.click()
    shown, natural = browser.execute_script("var i = document.querySelector('figure.full img'); "
                                            "return [i.getBoundingClientRect().width, i.naturalWidth];")
    assert natural > PHONE[0] and natural <= shown <= natural + 2  # its own size, and a 1 px border each side
    assert browser.execute_script("return document.documentElement.scrollWidth") <= PHONE[0]
    _shot(browser, tmp_path, "report_phone.png")
    zoom.click()
    assert not browser.find_elements("css selector", "figure.full")
