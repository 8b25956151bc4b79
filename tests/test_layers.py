"""The import graph of the product code: no cycles, and imports flow one way.

``crs.cli -> crs stages -> extract | probe | scoring -> store``: the command line is a leaf
that nothing imports; the three workers never import each other; the store imports no
stage; shared modules of ``crs/`` import no stage. Every ``import`` statement counts, also
those inside functions (a cycle through a lazy import is still a cycle). And what modules share is public: no
module takes another's underscore names, and an import is deferred one way only, inside the function.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"crs": "crs", "crs.extract": "extract", "crs.store": "store", "crs.probe": "probe",
            "crs.scoring": "scoring"}
WORKERS = ("crs.extract", "crs.probe", "crs.scoring")


def _modules() -> dict[str, Path]:
    """Every product module, subpackages included (crs/stages): the stage folders' own, not the other
    stages' folders nested in crs/ by name only."""
    mods = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = f.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join((pkg, *parts))] = f
    return mods


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The product modules ``module`` imports (``from crs.x import y``: y when y is a module, else crs.x)."""
    out = set()
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            # `from pkg import module` depends on that module; on the package only for other names
            names = subs + ([base] if any(n not in known for n in subs) else [])
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and n != module:
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(f, m, set(mods)) for m, f in mods.items()}


def _layer(module: str) -> str:
    for pkg in ("crs.extract", "crs.store", "crs.probe", "crs.scoring"):
        if module == pkg or module.startswith(pkg + "."):
            return pkg
    return module


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_product_code_has_no_import_cycle():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]



# What a module shares is public; an underscore name is its own. An exception would be listed (file, name) below;
# one that does not occur fails the test, so the lists only shrink.
PRIVATE_USES_ALLOWED: set[tuple[str, str]] = set()
# One way to defer an import: a plain ``import`` inside the function that needs it. Not importlib.import_module,
# __import__ or importlib.util.LazyLoader, and no module ``__getattr__`` (PEP 562) or proxy object.
LAZY_IMPORTS_ALLOWED: set[tuple[str, str]] = set()
SCANNED = {**PACKAGES, "benchmarks": "benchmarks", "tools": "tools"}  # benchmarks import each other by plain name


def _scanned() -> dict[str, Path]:
    mods = {}
    for pkg, folder in SCANNED.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = f.relative_to(ROOT / folder).with_suffix("").parts
            mods[".".join((pkg, *parts[: -1 if parts[-1] == "__init__" else None]))] = f
    return mods


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(tree: ast.Module, module: str, package: str, known: set[str]) -> set[str]:
    """The underscore names ``module`` takes from another scanned module: ``from m import _x``, ``import m._x``,
    and ``m._x`` where ``m`` is bound to a module by an import (as ``m._x``, the name)."""

    def resolve(name: str) -> str | None:
        return name if name in known else ("benchmarks." + name if "benchmarks." + name in known else None)

    bound, out = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                if sub := resolve(f"{base}.{a.name}"):
                    bound[a.asname or a.name] = sub
                if (m := resolve(base)) and m != module and _private(a.name):
                    out.add(f"{m}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if any(_private(p) for p in a.name.split(".")):
                    out.add(a.name)
                if a.asname and resolve(a.name):
                    bound[a.asname] = resolve(a.name)
                elif not a.asname:
                    bound[a.name.split(".")[0]] = a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, v = [], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in bound:
                m = resolve(".".join([bound[v.id], *reversed(chain)]))
                if m and m != module:
                    out.add(f"{m}.{node.attr}")
    return out


def lazy_imports(tree: ast.Module) -> set[str]:
    """The ways ``tree`` defers an import other than a function-local ``import`` statement."""
    out = {"module __getattr__" for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__", "LazyLoader"):
                out.add(name)
    return out


def _scan() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    mods = _scanned()
    privates, lazies = set(), set()
    for m, f in mods.items():
        tree = ast.parse(f.read_text())
        rel = f.relative_to(ROOT).as_posix()
        package = m if f.stem == "__init__" else m.rpartition(".")[0]
        privates |= {(rel, name) for name in private_uses(tree, m, package, set(mods))}
        lazies |= {(rel, way) for way in lazy_imports(tree)}
    return privates, lazies


def test_no_module_takes_another_modules_private_names_or_defers_an_import_another_way():
    privates, lazies = _scan()
    assert sorted(privates - PRIVATE_USES_ALLOWED) == [], "make the name public (no underscore), or move it to its user"
    assert sorted(lazies - LAZY_IMPORTS_ALLOWED) == [], "defer an import by importing inside the function that needs it"
    stale = sorted((PRIVATE_USES_ALLOWED - privates) | (LAZY_IMPORTS_ALLOWED - lazies))
    assert stale == [], "these allowed uses are gone: delete them from the allow-lists in tests/test_layers.py"


def test_the_private_and_lazy_import_scan_finds_each_form():
    source = """
import importlib
import crs.probe.core
import crs.probe.core as core
from crs.scoring import crs as score_defs
from crs.scoring.crs import _q, public
from . import _sibling
from crs.extract.models import hub

def __getattr__(name):
    return importlib.import_module(name)

class Proxy:
    def __getattr__(self, attr):
        return getattr(__import__(self.name), attr)

def f():
    return core._solve(), score_defs._g, crs.probe.core._step, hub.cache._x, _own(), self._mine, public._attr
"""
    known = {"crs.probe.core", "crs.scoring.crs", "crs.scoring._sibling", "crs.scoring", "crs.extract.models.hub"}
    tree = ast.parse(source)
    assert private_uses(tree, "crs.scoring.x", "crs.scoring", known) == {
        "crs.probe.core._solve", "crs.scoring.crs._g", "crs.scoring.crs._q", "crs.scoring._sibling",
        "crs.probe.core._step"}
    assert lazy_imports(tree) == {"module __getattr__", "import_module", "__import__"}


def test_imports_flow_one_way():
    g = graph()
    bad = []
    for m, deps in g.items():
        for d in deps:
            lm, ld = _layer(m), _layer(d)
            if d == "crs.cli":
                bad.append(f"{m} imports the command line {d}")
            elif lm in WORKERS and ld in WORKERS and lm != ld:
                bad.append(f"worker {m} imports worker {d}")
            elif lm == "crs.store" and ld != "crs.store" and ld in WORKERS:
                bad.append(f"store module {m} imports stage {d}")
    assert bad == []


def test_every_package_is_in_the_graph():
    assert {"crs.stages", "crs.stages.probe", "crs.stages.pipeline", "crs.scoring.diagnostics"} <= set(_modules())


# what the command line may import: the stages layer, the ground floor every layer shares (crs/foundations) and its
# own presentation (crs/commands: typer options made from the schema); everything else it reaches through crs.stages
COMMAND_LINE_MAY_IMPORT = ("crs.stages", "crs.commands", "crs.foundations")


def test_the_folders_of_crs_show_the_layers():
    """crs/ holds the roof (cli.py and commands/), the stages layer (stages/) and the ground floor (foundations/),
    and nothing else; the ground floor imports only itself."""
    stage_folders = set(PACKAGES) - {"crs"}
    top = {m for m in _modules() if m.count(".") == 1 and m not in stage_folders}
    assert top == {"crs.cli", "crs.commands", "crs.stages", "crs.foundations"}
    up = sorted(f"{m} imports {d}" for m, deps in graph().items() if m.startswith("crs.foundations")
                for d in deps if d != "crs" and not d.startswith("crs.foundations"))
    assert up == []


def test_the_command_line_reaches_the_workers_and_the_store_only_through_the_stages():
    bad = sorted(f"{m} imports {d}" for m, deps in graph().items() if m.startswith("crs.commands")
                 for d in deps if not any(d == a or d.startswith(a + ".") for a in COMMAND_LINE_MAY_IMPORT))
    assert bad == []
    source = "\n".join(f.read_text() for f in (ROOT / "crs" / "commands").rglob("*.py"))
    assert "import_module" not in source and "__import__" not in source  # no import the graph cannot see
