"""The storage package stays small rooms with one-way imports (issue 16 "Layout", issue 24 item 5)."""

from __future__ import annotations

import ast
from pathlib import Path

import computer.storage

PACKAGE = Path(computer.storage.__file__).parent
MAX_LINES = 500


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module)
                else:
                    deps.update(alias.name for alias in node.names)
        graph[path.stem] = deps
    return graph


def test_no_module_is_over_500_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_no_import_circle() -> None:
    graph = _imports()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, " -> ".join([*path, module])
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])


def test_the_rooms_never_reach_back_into_the_public_class() -> None:
    graph = _imports()
    assert sorted(m for m, deps in graph.items() if "filesystem" in deps) == ["__init__"]
