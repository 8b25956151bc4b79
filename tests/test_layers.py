"""The import graph of the product code: no cycles, and imports flow one way.

``crs.cli -> crs stages -> extract | probe | scoring -> store``: the command line is a leaf
that nothing imports; the three workers never import each other; the store imports no
stage; shared modules of ``crs/`` import no stage. Every ``import`` statement counts, also
those inside functions (a cycle through a lazy import is still a cycle).
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


# what the command line may import: the stages layer, the foundations every layer shares, and the presentation
# (typer options made from the schema, progress); everything else it reaches through crs.stages
COMMAND_LINE_MAY_IMPORT = ("crs.stages", "crs.commands", "crs.names", "crs.errors", "crs.config", "crs.records",
                           "crs.options", "crs.progress")


def test_the_command_line_reaches_the_workers_and_the_store_only_through_the_stages():
    bad = sorted(f"{m} imports {d}" for m, deps in graph().items() if m.startswith("crs.commands")
                 for d in deps if not any(d == a or d.startswith(a + ".") for a in COMMAND_LINE_MAY_IMPORT))
    assert bad == []
    source = "\n".join(f.read_text() for f in (ROOT / "crs" / "commands").rglob("*.py"))
    assert "import_module" not in source and "__import__" not in source  # no import the graph cannot see
