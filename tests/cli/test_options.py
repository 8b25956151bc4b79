"""One schema: every option of a stage command is a config key and every key an option;
the JSON Schema is valid and agrees with the parser; the stages layer never imports the CLI."""

import ast
import json
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crs.cli import app
from crs.commands import options
from crs.foundations import config as C

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    """(command name, its option flags) for every command of `crs`, sub-commands included."""
    def walk(cmd, prefix):  # typer ships its own click: groups and options are told by their attributes
        group = hasattr(cmd, "commands")
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{prefix} {name}".strip())
        if not group or cmd.callback is not None:
            yield prefix, [o for p in cmd.params if p.param_type_name == "option" for o in p.opts if o.startswith("--")]
    return list(walk(typer.main.get_command(app), ""))


def test_every_option_is_a_config_key_and_every_key_an_option():
    from crs.cli import STAGE_OPTIONS

    seen = set()
    for name, flags in _commands():
        if name.split(" ")[0] in options.TOOLS:
            continue
        mine = {options.flag(p): p for p in STAGE_OPTIONS.get(name, [])}
        for flag in flags:
            if flag in options.EXEMPT or f"{name} {flag}" in options.EXEMPT:
                continue
            assert flag in mine, f"crs {name} {flag} has no config key and is not exempt"
            seen.add(mine[flag])
    missing = [".".join(p) for p, _, _ in C.settings() if p not in seen]
    assert not missing, f"config keys without a command-line option: {missing}"
    assert set(STAGE_OPTIONS) == {"extract", "probe", "score", "report", "demo"}


def test_every_exemption_names_an_option_that_exists():
    flags = {f for _, fl in _commands() for f in fl} | {f"{n} {f}" for n, fl in _commands() for f in fl}
    assert set(options.EXEMPT) <= flags


def test_a_default_shown_in_help_is_the_default():
    base = C.Config()
    for path, f, _ in C.settings():
        shown = options._default_text(f, path, base)
        if f.metadata["text"] and shown:
            value = getattr(getattr(base, path[0]), path[1])
            assert f.metadata["text"](shown) == value, path


def test_the_schema_checks_flags_like_keys():
    with pytest.raises(C.ConfigError) as e:
        C.parse("[probe]\nhidden = 64\n", "b.toml")
    assert e.value.key == "probe.hidden" and e.value.line == 2 and "probe.head mlp" in str(e.value)
    r = CliRunner().invoke(app, ["probe", "--all", "--hidden", "64"])
    assert r.exit_code == 2 and "--hidden 64 applies to --head mlp only" in r.output
    assert C.parse("[probe]\nhead = \"mlp\"\nhidden = 64\n").probe.hidden == 64


def test_json_schema_is_valid_and_the_example_validates():
    jsonschema = pytest.importorskip("jsonschema")
    r = CliRunner().invoke(app, ["run", "--schema"])
    assert r.exit_code == 0
    schema = json.loads(r.stdout)
    assert schema == C.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(tomllib.loads(C.EXAMPLE))
    validator.validate(tomllib.loads((ROOT / "examples" / "crs-run.toml").read_text()))
    validator.validate(tomllib.loads(C.to_toml(C.Config())))
    for bad in ("[probe]\nseeds = 0\n", "[probe]\nfractions = [0.5]\n", "[extract]\ndtype = \"float64\"\n",
                "[probe]\nseedz = 1\n", "[score]\nweights = [1, 2]\n", "[extract]\nseverities = [0]\n"):
        with pytest.raises(C.ConfigError):
            C.parse(bad)
        assert not validator.is_valid(tomllib.loads(bad)), bad


def test_the_stages_layer_never_imports_the_command_line():
    for path in (ROOT / "crs" / "stages").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n in ("crs.cli", "crs.commands.options") or n.startswith("crs.cli.") for n in names), path


def test_progress_protocol_fits_rich_and_the_no_op():
    from rich.progress import Progress as RichProgress

    from crs.foundations.progress import NO_PROGRESS, Progress

    assert isinstance(NO_PROGRESS, Progress) and isinstance(RichProgress(disable=True), Progress)
    task = NO_PROGRESS.add_task("x", total=3)
    NO_PROGRESS.update(task, description="y")
    NO_PROGRESS.advance(task, 2)
