"""A module's tests are found from the module (docs/CONTRIBUTING.md, "Where a test goes"): tests/unit/ mirrors
harness/ by room, so the tests of harness/<room>/<module>.py are tests/unit/<room>/test_<module>[_<what>].py
(harness/rank/measures/parity.py: tests/unit/rank/measures/test_parity_shards.py). tests/unit/ itself holds the
tests of the floor and the CLI (harness/<module>.py) and the few that test the house (its documents, its imports,
its tools). A file named after a topic or an issue, or in another room than its module's, fails here, named."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

# The tests of the house, not of one module: its documents and layout, the rules of its imports and function
# sizes, pytest's vocabulary, the oracle's independence from verl (a rule over a room), the tools under tools/.
HOUSE = {
    "docs",
    "readme",
    "layout",
    "import_graph",
    "function_length",
    "pytest_vocabulary",
    "oracle_independence",
    "tooling",
    "timings_table",
    "test_names",
    "workflows",  # the GitHub workflows, .github/ and docs/workflows/: linted, audited, hardened
}
UNIT = ROOT / "tests" / "unit"


def modules_by_room() -> dict[str, set[str]]:
    """room (its path under harness/, "" for the floor and the CLI) -> the stems of its own modules."""
    rooms: dict[str, set[str]] = {}
    for path in (ROOT / "harness").rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            rooms.setdefault(path.parent.relative_to(ROOT / "harness").as_posix().replace(".", ""), set()).add(
                path.stem
            )
    return rooms


def misplaced(test_files: list[str], rooms: dict[str, set[str]]) -> list[str]:
    """The test files (paths relative to tests/unit/) whose name is neither test_<module> nor test_<module>_<what>
    of a module of the room they stand in, nor, at the top, a test of the house."""
    out = []
    for rel in test_files:
        path = Path(rel)
        room = path.parent.as_posix().replace(".", "")
        name = path.stem.removeprefix("test_")
        if room == "" and name in HOUSE:
            continue
        if any(name == m or name.startswith(f"{m}_") for m in rooms.get(room, ())):
            continue
        out.append(rel)
    return out


def test_every_unit_test_file_stands_in_its_modules_room_named_after_it():
    files = sorted(p.relative_to(UNIT).as_posix() for p in UNIT.rglob("test_*.py"))
    assert misplaced(files, modules_by_room()) == []


def test_a_file_named_after_a_topic_an_issue_or_in_another_room_is_named_here():
    rooms = {"judge_cell": {"update_verdict"}, "rank/measures": {"collectives"}, "": {"cli"}}
    good = [
        "judge_cell/test_update_verdict_spec.py",
        "rank/measures/test_collectives.py",
        "test_docs.py",
        "test_cli.py",
    ]
    assert misplaced(good, rooms) == []
    bad = [
        "judge_cell/test_verdict_closing_issue_51.py",
        "test_comm.py",
        "judge_cell/test_collectives.py",
        "test_update_verdict.py",
    ]
    assert misplaced(bad, rooms) == bad


def test_no_two_test_files_share_a_name():
    """pytest imports each test file by its name (rootdir-relative, no packages): two files of one name in two
    folders fail its collection ("import file mismatch")."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
