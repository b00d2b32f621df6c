"""No import cycle within runpod_emulator: every intra-package import (module level, inside functions and under
TYPE_CHECKING alike) read from the source, and the graph they make checked to be acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

import runpod_emulator

PACKAGE = Path(runpod_emulator.__file__).resolve().parent
NAME = runpod_emulator.__name__


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (path, is a package's __init__) for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = [NAME, *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def imports_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        base = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                anchor = base[: len(base) - node.level + 1] if node.level else []
                module = ".".join(anchor + ([node.module] if node.module else []))
                targets.add(module)
                targets.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {target for target in targets if target in known and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_holds_the_package():
    graph = imports_graph()
    assert f"{NAME}.models" in graph and f"{NAME}.models" in graph[f"{NAME}.pricing"]
    assert f"{NAME}.backends.base" in graph[f"{NAME}.backends.podman"]


def test_no_import_cycle_within_the_package():
    cycle = find_cycle(imports_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
