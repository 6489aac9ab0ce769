"""Who may import whom, read from the modules' own import statements (ast, nothing run).

* the analysis package imports neither torch, lightning nor submitit, and none of the job's
  torch-side modules for its formulas: those live in ``scalescope.allreduce_model``, which
  both sides import and which itself imports nothing beyond the standard library and numpy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from analysis_helpers import REPO

FORBIDDEN_IN_ANALYSIS = ("torch", "lightning", "submitit", "scalescope.job.allreduce")


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved in its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1]).removeprefix("src.")
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
    return found


@pytest.mark.parametrize("path", sorted((REPO / "analysis").glob("*.py")), ids=lambda p: p.name)
def test_the_analysis_imports_nothing_of_the_training_side(path: Path) -> None:
    bad = {
        m
        for m in imports_of(path)
        for f in FORBIDDEN_IN_ANALYSIS
        if m == f or m.startswith(f + ".")
    }
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_shared_formulas_import_no_framework() -> None:
    path = REPO / "src" / "scalescope" / "allreduce_model.py"
    assert imports_of(path) <= {"__future__", "math", "collections.abc", "typing", "numpy"}


def _module_graph() -> dict[str, set[str]]:
    """analysis.<name> -> the analysis modules it imports (at any depth of its code)."""
    mods = {f"analysis.{p.stem}": p for p in (REPO / "analysis").glob("*.py")}
    graph = {}
    for name, path in mods.items():
        graph[name] = {
            m for m in imports_of(path) if m in mods and m != name and m != "analysis.__init__"
        }
    return graph


def test_the_analysis_modules_import_each_other_in_no_circle() -> None:
    """Reading -> computing -> presenting -> commands: a module that one of its own imports
    imports back is a circle (metrics and diagnosis were one)."""
    graph = _module_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not circles, f"import circles: {[' -> '.join(c) for c in circles][:5]}"
