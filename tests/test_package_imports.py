"""The package's import graph: no cycles (lazy imports included), and layers that import one way.

The agent (`exporter/`) is the base: the boards read its catalog, the dashboard module its
model and the boards' query selectors; the demo wires everything together. Nothing below
imports what sits above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("exporter", "dashboard_module", "grafana", "demo")
# What each source root may import from the others.
MAY_IMPORT = {
    "exporter": set(),
    "dashboard_module": {"exporter", "grafana"},
    "grafana": {"exporter"},
    "demo": {"exporter", "dashboard_module", "grafana"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["ray_accel", *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(path): path
            for root in SOURCE_ROOTS for path in sorted((ROOT / root).rglob("*.py"))}


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")[: None if is_package else -1]
            base = base[: len(base) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        names = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                 for alias in node.names]
    return {name for name in names if name in modules and name != module}


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every ray_accel module `module` imports, at module level or in a function.

    Imports under `if TYPE_CHECKING:` are left out: they never run.
    """
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(module, path.name == "__init__.py", node, modules))
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit([n for n in inner if isinstance(n, (ast.stmt, ast.excepthandler))])

    visit(ast.parse(path.read_text()).body)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _root(module: str) -> str:
    return module.split(".")[1]


def test_the_graph_sees_imports_of_every_kind():
    graph = _graph()
    # module level, relative; inside a function; a sibling package
    assert "ray_accel.exporter.catalog" in graph["ray_accel.exporter.node_view"]
    assert "ray_accel.exporter.catalog_doc" in graph["ray_accel.exporter.cli"]
    assert "ray_accel.exporter.node_view" in graph["ray_accel.dashboard_module.collector"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others():
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("root", SOURCE_ROOTS)
def test_layers_import_one_way(root):
    graph = _graph()
    crossing = sorted(
        f"{module} -> {target}" for module, targets in graph.items() if _root(module) == root
        for target in targets if _root(target) != root and _root(target) not in MAY_IMPORT[root]
    )
    assert crossing == []
