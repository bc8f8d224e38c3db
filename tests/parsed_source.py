"""A Python file of the checkout as an ast tree, parsed once per test process. The house-rule tests
(test_import_graph.py, test_function_length.py, test_layout.py, test_python_ast.py, test_oracle_independence.py)
each walk every module of harness/: one parse of the 180 modules is 0.4 s of CPU on the 2-core host, and they made
five. Keyed by the file's path, size and modification time (a file rewritten is parsed again). The tree is shared:
a test reads it and never changes it. tests/ is on sys.path (its conftest)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """ast.parse of the file's text, the tree shared with every other test of this process that reads the file."""
    stat = Path(path).stat()
    return _parsed(Path(path), stat.st_size, stat.st_mtime_ns)


@cache
def _parsed(path: Path, size: int, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text())
