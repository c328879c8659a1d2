"""kvplan's import layering, read from the source (an AST walk, nothing is imported).

The domains form a partial order (:data:`BUILDS_ON`, each package's direct foundations; a package
may import its own subpackage and everything below it, transitively): models and hardware ->
memory -> the serve flags and workload -> traffic -> sim and bench (siblings: neither imports the
other) -> tune (a client of sim) -> report, ops, preflight; cli and the page (ui) are twin front
ends over library functions: cli may start the page (``kvplan ui``), the page never imports cli.
errors, quantiles, _json (the one JSON writer), slo, flags, limits (the caps on one run), _ray and
_native (which build of the simulator runs) are the shared base every package may use. An import goes down the order, never up or sideways, at module level or inside a
function (a lazy import keeps start-up fast but is as much a dependency). Imports under
``if TYPE_CHECKING:`` are exempt: they name the data a function reads (a renderer's result type)
without loading its producer.

No import cycles between modules at module level (TYPE_CHECKING blocks and function-level imports
excluded: those run after both modules have loaded, so they cannot leave one half-initialised).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "kvplan"

#: the shared base: every package may import these (they import only errors)
BASE = {"errors", "quantiles", "_json", "slo", "flags", "limits", "_ray", "_native"}

#: each package's direct foundations; the order is their transitive closure
BUILDS_ON: dict[str, set[str]] = {
    **{b: set() for b in BASE},
    "models": set(), "hardware": set(),
    "memory": {"models", "hardware"},
    "serve_flags": {"memory"},  # vLLM's serve flags, one table, and the rules that make a plan request
    "workload": {"memory"},  # request logs -> token lengths -> recommendations
    "traffic": {"workload", "serve_flags"},  # what sim and bench send: arrivals, lengths, vLLM bench's draws, traces
    "runs": set(),  # a run's files (and the sections sim and bench share), below both
    "simulate_flags": set(),  # kvplan simulate's own flags (light: the CLI declares them at start-up)
    "sim": {"traffic", "runs", "simulate_flags"},
    "bench": {"traffic", "runs"},
    "tune": {"sim"},  # a client of sim: simulates every configuration of a search space
    "report": {"sim", "bench", "tune"},  # renders their results
    "ops": {"bench"},
    "preflight": {"ops", "report", "sim", "bench"},
    "ui": {"sim", "tune"},  # the web page: a front end over the library, as cli is (its sizing view is tune's)
    "cli": {"preflight", "tune", "ui"},  # `kvplan ui` starts the page; the page never imports cli
    "": {"memory"},  # kvplan/__init__.py: the public API, re-exported from the packages below; cli reads its __version__
}
BUILDS_ON["cli"].add("")


@lru_cache(maxsize=None)
def below(package: str) -> frozenset:
    """Every package ``package`` may import (its foundations, transitively, and the base)."""
    out = set(BASE)
    for dep in BUILDS_ON[package]:
        out |= {dep} | below(dep)
    return frozenset(out - {package})


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(node, module: str, is_package: bool) -> list[str]:
    """The kvplan modules an import statement loads (``from x import name``: x.name when that
    is a module, else x)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level:
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
    return [n for n in dict.fromkeys(names) if n == "kvplan" or n.startswith("kvplan.")]


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(module: str) -> list[tuple[str, int, str]]:
    """(imported module, line, "module" | "function") for every import outside TYPE_CHECKING."""
    path = MODULES[module]
    out: list[tuple[str, int, str]] = []

    def visit(node, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt, where)
                continue
            visit_one(child, where)

    def visit_one(child, where: str) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            out.extend((t, child.lineno, where) for t in _targets(child, module, path.name == "__init__.py"))
            return
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            where = "function"
        visit(child, where)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module")
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_subpackage_has_a_place_in_the_order():
    assert {_layer(m) for m in MODULES} <= set(BUILDS_ON), "add the new subpackage to BUILDS_ON"


def test_the_order_has_no_cycle():
    assert all(p not in below(p) for p in BUILDS_ON)


def test_no_package_imports_one_not_below_it():
    wrong = []
    for module in MODULES:
        src = _layer(module)
        for target, line, where in _imports(module):
            dst = _layer(target)
            if dst != src and dst not in below(src):
                wrong.append(f"{MODULES[module].relative_to(SRC)}:{line}: {src or 'kvplan'} imports "
                             f"{target} ({dst or 'kvplan'}, not below it; {where} level)")
    assert not wrong, "\n".join(wrong)


def test_sim_and_bench_are_siblings_and_the_page_never_imports_the_cli():
    assert "bench" not in below("sim") and "sim" not in below("bench")
    assert "cli" not in below("ui")


def test_no_import_cycles_at_module_level():
    graph = {m: sorted({t for t, _, where in _imports(m) if where == "module" and t != m}) for m in MODULES}
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_walk_sees_what_it_checks():
    """The checks above are only as good as the walk: it must find the imports it is meant to."""
    sim = dict((t, where) for t, _, where in _imports("kvplan.sim.simulate"))
    assert sim.get("kvplan.sim.engine") == "module"
    assert sim.get("kvplan.memory") == "function"  # plan(): imported lazily
    cli = {t for t, _, _ in _imports("kvplan.cli.main")}
    assert "kvplan.cli.options" in cli and "kvplan.errors" in cli
