"""Small modules and functions, read from the code (ast, nothing run): no module of src/ or
analysis/ over 600 lines, no function over 80 lines unless a comment at its top says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from analysis_helpers import REPO

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
CODE = sorted([*(REPO / "src").rglob("*.py"), *(REPO / "analysis").rglob("*.py")])


def long_functions(text: str) -> list[str]:
    """Functions over the bound without a comment between their ``def`` and their body's
    first statement (after the docstring, if any): name and length."""
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        first = body[0].lineno if body else node.body[0].lineno
        head = lines[node.lineno : first - 1]
        if not any(line.strip().startswith("#") for line in head):
            found.append(f"{node.name} ({length} lines)")
    return found


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(REPO)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES, "split the module where the flow says"
    assert not long_functions(text), "split it, or say at its top why it stays whole"


def test_a_long_function_passes_only_with_a_comment_at_its_top() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    plain = f"def f():\n    '''Doc.'''\n{body}"
    assert long_functions(plain) == [f"f ({MAX_FUNCTION_LINES + 2} lines)"]
    said = f"def f():\n    '''Doc.'''\n    # one table of cases: split, it reads worse\n{body}"
    assert long_functions(said) == []
