"""No function of harness/ is over MAX_LINES lines (docs/CONTRIBUTING.md): read with ast, from its `def` (decorators
left out) to its last line, docstring and comments included; nested functions count inside their parent too."""

from __future__ import annotations

import ast

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

MAX_LINES = 70


def long_functions(source: str, where: str) -> list[str]:
    """'FILE:LINE name (N lines)' for every function of the source over MAX_LINES lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_of_harness_is_over_the_limit():
    found = [
        line
        for path in sorted((ROOT / "harness").rglob("*.py"))
        for line in long_functions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, f"functions over {MAX_LINES} lines:\n" + "\n".join(found)


def test_the_check_finds_a_long_function_and_a_long_method_and_passes_one_at_the_limit():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    at_limit = f"def fits():\n{body}"
    over = f"class C:\n    def grown(self):\n    {body.replace(chr(10), chr(10) + '    ').rstrip()}\n        y = 1\n"
    assert long_functions(at_limit, "a.py") == []
    assert long_functions(over, "b.py") == [f"b.py:2 grown ({MAX_LINES + 1} lines)"]
