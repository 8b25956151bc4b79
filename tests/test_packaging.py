"""What a wheel ships: every package of the repository, installed without the repository on the path.

The other tests run on an editable install, which sees every folder of the checkout whether the
wheel would ship it or not: crs/stages (the layer every command goes through) and the report's templates,
for two. This builds the wheel, installs it into a fresh virtual environment whose only other path is
this environment's site-packages (for the dependencies), and runs the command line and the report's
page from there."""

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"crs": "crs", "extract": "crs/extract", "store": "crs/store", "probe": "crs/probe", "scoring": "crs/scoring"}


def _repo_packages() -> set[str]:
    """Every package folder of the product, as the wheel must name it (crs/stages, crs/extract, ...)."""
    out = set()
    for folder, installed in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).as_posix()
            out.add(installed if rel == "." else f"{installed}/{rel}")
    return out


def test_the_wheel_ships_every_package_and_its_cli_runs_without_the_repository(tmp_path):
    run = lambda *a, **k: subprocess.run(a, capture_output=True, text=True, timeout=300, **k)  # noqa: E731
    src = tmp_path / "src"  # a clean copy: a build/ folder left in the checkout would ship stale packages
    for f in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / f, src / f) if src.exists() else (src.mkdir(), shutil.copy2(ROOT / f, src / f))
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                str(tmp_path / "dist"), str(src))
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("crs_bench-*.whl"))
    shipped = {n.rsplit("/", 1)[0] for n in zipfile.ZipFile(wheel).namelist() if n.endswith("/__init__.py")}
    assert _repo_packages() <= shipped and "crs/stages" in shipped, sorted(_repo_packages() - shipped)
    env = tmp_path / "fresh"
    assert run(sys.executable, "-m", "venv", "--without-pip", str(env)).returncode == 0
    python = env / "bin" / "python"
    site = run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # not the repository
    installed = run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr[-2000:]
    where = run(str(python), "-c", "import crs.stages, crs.cli; print(crs.stages.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith(site), where.stdout + where.stderr[-2000:]
    version = run(str(env / "bin" / "crs"), "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("crs-bench "), version.stderr[-2000:]
    table = run(str(env / "bin" / "crs"), "perturbations", "--table", cwd=tmp_path)
    assert table.returncode == 0 and "gaussian_noise" in table.stdout, table.stderr[-2000:]
    data = ({f"crs/scoring/report/templates/report.{x}" for x in ("html", "css", "js")}
            | {"crs/foundations/config/example.toml"})
    assert data <= set(zipfile.ZipFile(wheel).namelist()), sorted(data - set(zipfile.ZipFile(wheel).namelist()))
    example = run(str(env / "bin" / "crs"), "run", "--print-default", cwd=tmp_path)
    assert example.returncode == 0, example.stderr[-2000:]
    assert example.stdout == (ROOT / "examples" / "crs-run.toml").read_text(encoding="utf-8")
    page = run(str(python), "-c", RENDER, cwd=tmp_path)
    assert page.returncode == 0 and page.stdout.startswith(site), page.stdout + page.stderr[-2000:]


# The installed report fills its page from the templates shipped in the wheel (an empty leaderboard: no scores
# are needed to check the page's frame, style and script).
RENDER = """
import polars as pl
from crs.scoring.report import Inputs, html, page
enc = pl.DataFrame(schema={"encoder": pl.String, "crs": pl.Float64})
text = html(Inputs(settings={"crs_version": "1"}, rank_comparison={}, tables={"encoders": enc}), enc, pl.DataFrame(),
            [], {})
assert text.startswith("<!DOCTYPE html>") and text.endswith("</script></body></html>\\n"), text[-200:]
assert page.template("report.css") in text and page.template("report.js") in text
print(page.__file__)
"""
