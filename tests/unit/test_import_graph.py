"""No import cycle anywhere in the operator's packages.

A cycle (handlers -> tuning_loop -> handlers, hidden behind a function-level import) means
two modules that cannot be read, tested or changed apart. The graph is read from the source
with `ast`: every `import` and `from ... import` naming a module of the package counts,
at module level or inside a function alike, since a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"


def modules(root: Path) -> dict[str, Path]:
    """Every module of every package under `root`: dotted name -> file."""
    found: dict[str, Path] = {}
    for package in sorted(p.parent for p in root.glob("*/__init__.py")):
        for path in package.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same tree it imports."""
    mods = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    target = f"{base}.{alias.name}"  # `from pkg import submodule`
                    if target in mods:
                        graph[name].add(target)
                    elif base in mods:
                        graph[name].add(base)
        graph[name].discard(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
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
                    found.append(sorted(component))
    return found


def test_the_operator_packages_have_no_import_cycle() -> None:
    graph = import_graph(OPERATOR)
    assert "batchop.controller.handlers" in graph, "the operator's modules were not found"
    assert cycles(graph) == []


def test_the_handlers_and_the_tuning_loop_share_state_not_each_other() -> None:
    graph = import_graph(OPERATOR)
    handlers, loop = "batchop.controller.handlers", "batchop.controller.tuning_loop"
    assert "batchop.controller.state" in graph[handlers] & graph[loop]
    assert handlers not in graph[loop]


def test_the_metrics_module_does_not_import_the_controller() -> None:
    """metrics sits below the controller (the handlers and the loop record into it): an
    import back up the layers makes the two impossible to load or test apart."""
    graph = import_graph(OPERATOR)
    assert "batchop.metrics" in graph, "the metrics module was not found"
    upward = sorted(m for m in graph["batchop.metrics"] if m.startswith("batchop.controller"))
    assert upward == []


@pytest.mark.parametrize("lazy", [False, True])
def test_a_cycle_is_found_even_through_a_function_level_import(tmp_path: Path, lazy: bool) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    back = "def f():\n    from .. import a\n" if lazy else "import pkg.a\n"
    (pkg / "sub" / "b.py").write_text(back)
    (pkg / "c.py").write_text("from pkg import a\n")  # depends on the cycle, not in it
    assert cycles(import_graph(tmp_path)) == [["pkg.a", "pkg.sub.b"]]
