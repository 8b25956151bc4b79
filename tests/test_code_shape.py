"""The shape the code keeps for the next reader (CONTRIBUTING.md): short functions and signatures, files of
one job.

Settings travel as frozen option records, so no product function takes more than 8 parameters; the
typer command functions (``*_cmd`` in crs/commands) are the exception, as each parameter is a CLI
option. A product file holds one job, and stays under about 600 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("crs", "extract", "probe", "scoring", "store")
MAX_PARAMETERS = 8
MAX_LINES = 600
MAX_FUNCTION_LINES = 60


def _files():
    return [f for d in PRODUCT for f in sorted((ROOT / d).rglob("*.py"))]


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional and keyword-only parameters, ``self``/``cls`` and ``*args``/``**kwargs`` not counted."""
    a = node.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    first = (a.posonlyargs + a.args)[:1]
    return n - (1 if first and first[0].arg in ("self", "cls") else 0)


def _is_command(path: Path, name: str) -> bool:
    return path.parent.name == "commands" and name.endswith("_cmd")


def test_no_product_function_takes_more_than_eight_parameters():
    long = []
    for f in _files():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_command(f, node.name):
                if parameters(node) > MAX_PARAMETERS:
                    long.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}: {parameters(node)}")
    assert long == [], "take a frozen options record instead: " + "; ".join(long)


def test_no_product_file_is_over_600_lines():
    big = [f"{f.relative_to(ROOT)}: {n}" for f in _files() if (n := len(f.read_text().splitlines())) > MAX_LINES]
    assert big == [], "split by job: " + "; ".join(big)


def test_no_product_function_is_over_60_lines():
    long = [f"{f.relative_to(ROOT)}:{node.lineno} {node.name}: {n}" for f in _files()
            for node in ast.walk(ast.parse(f.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES]
    assert long == [], "a function fits on a screen: " + "; ".join(long)


def test_the_parameter_count_counts_what_a_caller_passes():
    tree = ast.parse("def f(self, a, b=1, *args, c, d=2, **kw): pass\ndef g(x, /, y): pass")
    f, g = tree.body
    assert parameters(f) == 4 and parameters(g) == 2
