"""README.md and the pages of docs/ cannot drift from the code: every `crs` command in their command
blocks is parsed by the command line as typed (an unknown option or a bad value fails), and the ones
that can run in a second are run: `crs extract` with --plan, `crs run` with --check (the blocks in order, redirections
written to files), `crs datasets check` against the README's folders (absent here, so refused with
the folder named). Every option named in running text (`crs score --bootstrap-unit ...`) must exist.
"""

import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crs.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {"README.md": README, **{f"docs/{p.name}": p.read_text(encoding="utf-8")
                                 for p in sorted((ROOT / "docs").glob("*.md"))}}
CLI = typer.main.get_command(app)


def command_lines(block: str) -> list[str]:
    """The `crs ...` commands of a fenced block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line.startswith("crs "):
            out.append(line)
    return out


def shell_blocks(text: str) -> list[str]:
    """The bodies of fenced blocks with no language or a shell one (```text holds output, not commands)."""
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
            if lang in ("", "sh", "bash", "console")]


BLOCKS = [(page, lines) for page, text in PAGES.items()
          for lines in (command_lines(b) for b in shell_blocks(text)) if lines]


def resolve(words: list[str]):
    """(the click command, its name path, the arguments after it) of `crs WORDS...`."""
    cmd, path, rest = CLI, [], list(words)
    while rest and rest[0] in getattr(cmd, "commands", {}):  # typer ships its own click: told by attributes
        path.append(rest[0])
        cmd = cmd.commands[rest.pop(0)]
    return cmd, path, rest


def parse(line: str) -> None:
    """What the shell would pass: parsed and converted by the command's own options (no callback runs)."""
    words = shlex.split(line)[1:]
    if ">" in words:
        words = words[: words.index(">")]
    cmd, path, rest = resolve(words)
    assert path, f"README: {line!r} names no crs command"
    try:
        cmd.make_context(" ".join(["crs", *path]), rest)
    except Exception as exc:  # typer's click.UsageError: an unknown option, a bad value, a missing argument
        if not hasattr(exc, "format_message"):
            raise
        pytest.fail(f"README command {line!r} does not parse: {exc.format_message()}")


def execute(line: str, tmp_path: Path):
    """Run what can run in a second; None where the command is parsed only (it would run a whole stage)."""
    words = shlex.split(line)[1:]
    target = None
    if ">" in words:
        i = words.index(">")
        words, target = words[:i], words[i + 1]
    cmd, path, rest = resolve(words)
    runner = CliRunner()
    if path == ["extract"]:
        args = [*words, *(["--plan"] if "--plan" not in words else []), "--json"]
        r = runner.invoke(app, args)
        assert r.exit_code in (0, 2), f"{line!r} --plan: exit {r.exit_code}\n{r.output}"
        plan = json.loads(r.stdout)
        real = "--root" in words
        assert (r.exit_code == 0) == plan["complete"] and (real or plan["complete"]), (line, plan["missing"])
        assert plan["pairs"], line
        return r
    if path == ["run"]:
        args = words if any(w in words for w in ("--check", "--print-default", "--schema")) else [*words, "--check"]
        config = next((w for w in rest if not w.startswith("-")), None)
        if config and not (tmp_path / config).exists():  # a block that names a config it does not write
            (tmp_path / config).write_text(runner.invoke(app, ["run", "--print-default"]).stdout, encoding="utf-8")
        r = runner.invoke(app, args)
        assert r.exit_code == 0, f"{line!r}: exit {r.exit_code}\n{r.output}"
        if target:
            (tmp_path / target).write_text(r.stdout, encoding="utf-8")
        return r
    if path == ["datasets", "check"]:
        r = runner.invoke(app, words)
        root = next(w for w in rest if w.startswith("/"))
        assert r.exit_code == 2 and root in r.output, f"{line!r}: exit {r.exit_code}\n{r.output}"
        return r
    return None


def test_the_title_and_the_two_set_up_commands_come_first():
    lines = [ln for ln in README.splitlines()[:5] if ln.strip()]
    assert lines[0].startswith("# CRS-Bench")
    demo, tests = (ln.strip() for ln in lines[1:3])
    venv = "python3 -m venv .venv && .venv/bin/pip install -q -e "
    # the demo needs the package alone (the test extras are minutes and gigabytes more); the tests need the extras
    assert demo == venv + ". && .venv/bin/crs demo"
    assert tests == venv + "'.[test]' && .venv/bin/python -m pytest -q"
    assert tests in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI runs the README's test command
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "test" in project["optional-dependencies"] and project["scripts"]["crs"] == "crs.cli:entry"
    parse("crs demo")


def test_the_readme_stays_short_and_its_pages_have_command_blocks_to_check():
    assert len(README.splitlines()) <= 150, "README.md is for a newcomer: reference material goes in docs/"
    commands = [c for _, b in BLOCKS for c in b]
    assert len(commands) >= 15, commands
    assert any(c.startswith("crs extract --pretrained") and "--plan" in c for c in commands)
    assert {"crs probe --all", "crs score --bootstrap 1000"} <= {c for page, b in BLOCKS for c in b
                                                                if page == "README.md"}


@pytest.mark.parametrize("page,block", BLOCKS, ids=[f"{p}:{b[0][:40]}" for p, b in BLOCKS])
def test_every_command_block_parses_and_runs_where_it_can(page, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what a block writes (bench.toml, a schema) lands here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for line in block:
        parse(line)
        execute(line, tmp_path)


@pytest.mark.parametrize("page", list(PAGES))
def test_every_option_named_in_the_text_exists(page):
    spans = re.findall(r"`(crs [^`]+)`", PAGES[page])
    for span in spans:
        cmd, path, rest = resolve(span.split()[1:])
        known = {o for p in cmd.params for o in p.opts + p.secondary_opts}
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", " ".join(rest)):
            assert flag in known, f"{page}: `{span}`: crs {' '.join(path)} has no option {flag}"


def test_the_generated_pages_are_current():
    """docs/cli.md and docs/configuration.md are what `python tools/docgen.py` writes from the code."""
    spec = importlib.util.spec_from_file_location("docgen", ROOT / "tools" / "docgen.py")
    docgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docgen)
    assert docgen.main(["--check"]) == 0, "run `python tools/docgen.py` and commit docs/cli.md, docs/configuration.md"


def _readme_demo():
    spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "tools" / "readme_demo.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_readme_shows_the_pinned_demo_output():
    """README's leaderboard and verdict are what `crs demo` prints from the pinned demo scores (the numbers and
    today's wording), and the pinned scores come from the demo's current settings."""
    tool = _readme_demo()
    assert tool.GOLDEN.is_file(), ("tests/golden/demo.json is missing: run `crs demo` and then "
                                   "`python tools/readme_demo.py crs-demo`")
    doc = json.loads(tool.GOLDEN.read_text(encoding="utf-8"))
    shown = tool.block(README)
    assert shown is not None, "README.md lost the marker comments round its demo block"
    assert shown == tool.render(doc), ("README's demo block differs from what tests/golden/demo.json gives: "
                                       "`python tools/readme_demo.py --rewrite` (wording) or "
                                       "`python tools/readme_demo.py crs-demo` after `crs demo` (numbers)")
    from crs.commands.run import DEMO

    s = doc["settings"]
    now = {"datasets": sorted(DEMO.datasets.names), "bootstrap": DEMO.score.bootstrap,
           "crs_version": str(DEMO.score.crs_version), "seeds": DEMO.probe.seeds}
    pinned = {"datasets": sorted(s["datasets"]), "bootstrap": s["bootstrap"]["n"], "crs_version": str(s["crs_version"]),
              "seeds": len(s["seeds"])}
    assert pinned == now, (f"tests/golden/demo.json was made with other demo settings ({pinned}, now {now}): run "
                           "`crs demo` and `python tools/readme_demo.py crs-demo`")


def test_the_demo_block_is_rendered_from_the_scores_not_copied():
    """The check can fail: another CRS in the pinned scores gives another block."""
    tool = _readme_demo()
    if not tool.GOLDEN.is_file():
        pytest.skip("no tests/golden/demo.json (test_the_readme_shows_the_pinned_demo_output says how to make it)")
    doc = json.loads(tool.GOLDEN.read_text(encoding="utf-8"))
    moved = json.loads(json.dumps(doc))
    moved["encoders"][0]["crs"] += 1.0
    assert tool.render(moved) != tool.render(doc)


def test_output_blocks_are_not_read_as_commands():
    text = "```text\ncrs printed output\n```\n\n```\ncrs probe --all\n```\n"
    assert [command_lines(b) for b in shell_blocks(text)] == [["crs probe --all"]]
