"""What a newcomer's `crs demo` needs and prints: it runs with the package's own dependencies (none of the
test extras: the README's first line installs without them), its stderr is a line as each stage starts and
ends plus the progress (no line per figure file, no scoring line left open through the report), and its
report lands where `crs run` on the demo's config and `crs report` put it."""

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from crs.commands import run
from crs.foundations import config as cfgmod
from crs.foundations.progress import status_line

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("extract", "probe", "score", "report")


def _requirement_name(req: str) -> str:
    return re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _test_extras() -> list[str]:
    """The top-level modules of the test extras that no base dependency also brings (from pyproject.toml)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {_requirement_name(r) for r in project["dependencies"]}
    extras = {_requirement_name(r) for r in project["optional-dependencies"]["test"]} - base
    by_module = importlib.metadata.packages_distributions()
    return sorted(m for m, dists in by_module.items()
                  if {d.lower().replace("_", "-") for d in dists} & extras and not m.startswith("_"))


# The demo in a process where the test extras cannot be imported, as in an environment without them: a None in
# sys.modules makes `import NAME` fail and importlib.util.find_spec(NAME) say absent, as a missing package does.
WITHOUT_EXTRAS = """
import sys
sys.modules.update(dict.fromkeys(sys.argv[1].split(",")))
from crs.cli import main
sys.argv = ["crs", *sys.argv[2:]]
main()
"""


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "crs-demo"
    blocked = _test_extras()
    assert {"pytest", "selenium", "ray", "moto"} <= set(blocked)  # the finder sees the extras' modules
    # two probe seeds: the demo's five cost this test 40 s of CPU in its probes, and its checks hold for any number
    args = ["demo", "--out", str(out), "--size", "0.05", "--severities", "2", "--seeds", "2", "--bootstrap", "20",
            "--log-interval", "3600"]
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, ",".join(blocked), *args], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"crs demo without the test extras:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out, done.stderr.splitlines()


@pytest.mark.slow
def test_the_demo_runs_without_the_test_extras_and_writes_its_report_where_crs_run_would(tiny_demo):
    out, _ = tiny_demo
    assert (out / "results" / "report" / "report.html").is_file()
    assert not (out / "report").exists()


def _kind(line: str) -> str:
    if m := re.fullmatch(r"(\w+): started", line):
        return f"start {m[1]}"
    if m := re.fullmatch(r"(\w+): finished in \d+\.\d s( \(.*\))?", line):
        return f"end {m[1]}"
    if line.startswith("warning: "):
        return "warning"
    # a progress line as crs.foundations.progress.status_line writes it: a counted task ended, or a step without a count
    if re.fullmatch(r".+: \d+/\d+ .+ \(100%\), .+ average, \d+:\d\d:\d\d elapsed", line) or \
            re.fullmatch(r".+: done, \d+:\d\d:\d\d elapsed", line):
        return "progress " + line.split(":")[0]
    return "other"


@pytest.mark.slow
def test_the_demo_stderr_is_stage_lines_and_progress(tiny_demo):
    _, lines = tiny_demo
    kinds = [_kind(ln) for ln in lines]
    assert "other" not in kinds, [ln for ln, k in zip(lines, kinds) if k == "other"]
    assert [k for k in kinds if k.startswith(("start", "end"))] == [f"{w} {s}" for s in STAGES for w in
                                                                    ("start", "end")]
    # the score step's line is written when scoring ends, before the report starts
    score_line = next(i for i, k in enumerate(kinds) if k.startswith("progress score"))
    assert kinds.index("start score") < score_line < kinds.index("end score")
    # (this tiny run's 8 test images tie most predictions: its warnings say so, after the stages)
    assert all(k == "warning" for k in kinds[kinds.index("end report") + 1:])
    # with one line per interval at most, a run shorter than the interval writes one progress line per task:
    # each encoder x stored dataset in extract (3 x 4), the probes, the score
    assert sum(k.startswith("progress") for k in kinds) == 3 * 4 + 2, lines


def test_a_status_line_is_what_the_shape_check_reads():
    assert _kind(status_line("demo-vit × demo_cxr", 31, 31, 12.0, "chunks", finished=True)).startswith("progress")
    line = status_line("score (3 encoders)", 0, None, 2.0, "steps", finished=True)
    assert _kind(line) == "progress score (3 encoders)"
    assert _kind("figure /tmp/x.png") == "other"


def test_one_report_folder_for_the_demo_crs_run_on_its_config_and_crs_report(tmp_path):
    demo = run.demo_config(Path("crs-demo"))
    example = cfgmod.resolve(cfgmod.parse(cfgmod.EXAMPLE, "example"), Path("."))
    assert Path(cfgmod.report_folder(demo.results, demo.report.out)) == Path("crs-demo/results/report")
    assert Path(cfgmod.report_folder(example.results, example.report.out)) == Path("crs-demo/results/report")
    assert "crs-demo/results/report" in run.demo_next(Path("crs-demo")) and "--out" not in run.demo_next(
        Path("crs-demo"))
