"""The driver parses Python one thread at a time (harness/python_ast.py): every ast.parse in harness/ goes through
parse() or holds PARSE_LOCK, verify's background matplotlib import holds it, and a parse waits for the holder."""

from __future__ import annotations

import ast
import threading

import pytest

from harness.paths import ROOT
from harness.python_ast import PARSE_LOCK, parse

pytestmark = pytest.mark.unit


def _unlocked_parses(path) -> list[int]:
    """Lines of `ast.parse(...)` calls in the file outside a `with PARSE_LOCK:` block."""
    tree = ast.parse(path.read_text())
    locked: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any("PARSE_LOCK" in ast.unparse(item.context_expr) for item in node.items):
            locked |= {n.lineno for n in ast.walk(node) if hasattr(n, "lineno")}
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "parse"
        and ast.unparse(n.func.value) == "ast"
        and n.lineno not in locked
    ]


def test_every_parse_of_the_harness_holds_the_lock():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in sorted((ROOT / "harness").rglob("*.py"))
        if p.name != "python_ast.py" and (lines := _unlocked_parses(p))
    }
    assert found == {}


def test_the_check_finds_an_unlocked_parse(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("import ast\nwith PARSE_LOCK:\n    ast.parse('1')\nast.parse('2')\n")
    assert _unlocked_parses(planted) == [4]


def test_the_background_matplotlib_import_holds_the_lock(monkeypatch):
    from harness.render import pictures

    seen = []
    monkeypatch.setattr(pictures, "pyplot", lambda: seen.append(PARSE_LOCK.locked()))
    pictures.import_in_background()
    for t in [t for t in threading.enumerate() if t.name == "import matplotlib"]:
        t.join(timeout=30)
    assert seen == [True]
    assert not PARSE_LOCK.locked()


def test_a_parse_waits_while_another_thread_holds_the_lock():
    done = []
    with PARSE_LOCK:
        worker = threading.Thread(target=lambda: done.append(parse("x = 1")))
        worker.start()
        worker.join(timeout=0.2)
        assert worker.is_alive() and not done  # still waiting for the holder
    worker.join(timeout=30)
    assert [type(t).__name__ for t in done] == ["Module"]
