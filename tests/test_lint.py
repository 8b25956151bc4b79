"""`ruff check .` is clean: the rules (pyproject.toml [tool.ruff]) hold for every file, so CI enforces them."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert exe, "ruff is in the test extra: pip install -e '.[test]'"
    r = subprocess.run([exe, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"ruff check . found:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"
