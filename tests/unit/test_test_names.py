"""A module's tests are found by its name (docs/CONTRIBUTING.md, "Where a test goes"): every file of tests/unit/ is
test_<module>[_<what>].py after the harness module whose behaviour it tests, or one of the few that test the house
itself (its documents, its imports, its tools). A file named after a topic or an issue fails here, named."""

from __future__ import annotations

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
}


def module_names() -> set[str]:
    """Every module of harness/ by its file stem (a stem two rooms share, causes.py say, names both)."""
    return {p.stem for p in (ROOT / "harness").rglob("*.py") if p.stem not in ("__init__", "__main__")}


def misnamed(test_stems: list[str], modules: set[str]) -> list[str]:
    """The test files whose name is neither test_<module> nor test_<module>_<what>, nor a test of the house."""
    out = []
    for stem in test_stems:
        name = stem.removeprefix("test_")
        if name in HOUSE or any(name == m or name.startswith(f"{m}_") for m in modules):
            continue
        out.append(f"{stem}.py")
    return out


def test_every_unit_test_file_is_named_after_the_module_it_tests():
    stems = sorted(p.stem for p in (ROOT / "tests" / "unit").glob("test_*.py"))
    assert misnamed(stems, module_names()) == []


def test_a_file_named_after_a_topic_or_an_issue_is_named_here():
    modules = {"update_verdict", "collectives"}
    assert misnamed(["test_update_verdict_spec", "test_collectives", "test_docs"], modules) == []
    assert misnamed(["test_verdict_closing_issue_51", "test_comm"], modules) == [
        "test_verdict_closing_issue_51.py",
        "test_comm.py",
    ]
