"""The project's first invariant, checked on the source: the oracle never touches verl. Every module of the oracle's
room (harness/rank/oracle/) imports neither verl nor anything of the rooms that drive or measure verl
(harness/rank/verl_side/, harness/rank/measures/), at module level or inside a function; it imports only modules of
its own room, so nothing reaches verl indirectly either. (rank/oracle/reference.py and rank/oracle/update.py also
assert at run time that verl is not imported yet; this test needs no run.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

RANK = ROOT / "harness" / "rank"
ORACLE_ROOM = RANK / "oracle"
# The modules every room may import: the standard library's, torch's, transformers' and pydantic-free harness
# modules outside the rank package (harness.paths: where the model configs are; harness.inputs.models: a config
# file's fields with a scenario's overrides, plain JSON).
HARNESS_OUTSIDE_RANK = {"harness.paths", "harness.inputs.models"}


def _imports(path: Path) -> set[str]:
    """Every module name an import statement anywhere in the file names (function bodies included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module if node.level == 0 else f"harness.rank.oracle.{node.module}")
    return names


def _oracle_modules() -> list[Path]:
    return sorted(ORACLE_ROOM.glob("*.py"))


def test_the_rooms_are_there_and_the_oracle_room_holds_the_oracle():
    assert {p.name for p in RANK.iterdir() if p.is_dir() and (p / "__init__.py").exists()} >= {
        "oracle",
        "verl_side",
        "measures",
    }
    stems = {p.stem for p in _oracle_modules()}
    assert {"reference", "update", "loss", "model", "batch"} <= stems, stems
    assert not list(RANK.glob("oracle*.py")), "an oracle module outside the oracle's room"


@pytest.mark.parametrize("path", _oracle_modules(), ids=lambda p: p.name)
def test_an_oracle_module_imports_no_verl_and_nothing_outside_its_room(path):
    imported = _imports(path)
    assert not {name for name in imported if name == "verl" or name.startswith("verl.")}, imported
    harness = {name for name in imported if name == "harness" or name.startswith("harness.")}
    outside = {name for name in harness if not name.startswith("harness.rank.oracle")} - HARNESS_OUTSIDE_RANK
    assert not outside, f"{path.name} imports {sorted(outside)}: the oracle imports only its own room"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    from verl.utils import tensordict_utils\n    import verl\n")
    assert {"verl.utils", "verl"} <= _imports(sneaky)
