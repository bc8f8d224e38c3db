"""make repro prints what README shows: the same scenarios x arms, README's columns among the printed ones, and a
closing line that says whether every cell is as scenarios/expectations.yaml expects."""

from __future__ import annotations

import re

import pytest
from record_builder import make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

from harness.commands.run import REPRO_ARMS, expectation_line
from harness.inputs.expectations import load_expectations
from harness.inputs.release_plan import load_release_plan
from harness.inputs.scenario import load_all
from harness.paths import ROOT
from harness.render.tables import COLUMNS

pytestmark = pytest.mark.unit


def _headline() -> tuple[list[str], list[list[str]]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The headline table", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line)
    ]
    return rows[0], rows[1:]


def test_readme_headline_is_the_repro_plan():
    head, rows = _headline()
    repro = sorted(s.name for s in load_all() if "repro" in s.tags)
    arms = [*REPRO_ARMS, load_release_plan().candidate]
    cells = {(r[head.index("scenario")], r[head.index("arm")]) for r in rows}
    assert len(rows) == len(repro) * len(arms) == 12
    assert cells == {(s, a) for s in repro for a in arms}
    assert set(head) <= set(COLUMNS), set(head) - set(COLUMNS)


def test_the_closing_line_counts_cells_as_expected():
    records = [
        make_record("fsdp2-1gpu", "upstream", "pass", bare=True),
        make_record("fsdp2-1gpu", "fsdp2-lmhead-forward", "pass", bare=True),
    ]
    assert expectation_line(records, load_expectations()) == "as expected: 2/2 (scenarios/expectations.yaml)"


def test_the_closing_line_names_drift_and_cells_without_an_expectation():
    records = [
        make_record("fsdp2-1gpu", "upstream", "error", bare=True, error={"type": "X", "message": "boom"}),
        make_record("fsdp2-1gpu", "fsdp2-lmhead-forward", "pass", bare=True),
        make_record("fsdp2-1gpu", "mine", "pass", bare=True),
    ]
    line = expectation_line(records, load_expectations())
    assert line.startswith("DRIFT: 1/3 as expected (scenarios/expectations.yaml)")
    assert "drift: fsdp2-1gpu x upstream: outcome error (expected pass" in line
    assert "no expectation: fsdp2-1gpu x mine" in line


def test_the_stub_lists_only_cells_without_an_expectation_and_marks_a_known_scenario():
    from harness.inputs.expectations import stub_yaml

    expected = load_expectations()
    records = [
        make_record("fsdp2-1gpu", "upstream", "pass", bare=True),  # has an entry: not in the stub
        make_record("fsdp2-1gpu", "mine", "pass", bare=True),
        make_record("fsdp2-1gpu", "skipped-one", "skipped", bare=True, skipped_reason="no GPU"),  # nothing observed
    ]
    assert stub_yaml(records, expected) == (
        "fsdp2-1gpu:  # add under the existing entry\n  mine:\n    outcome: pass\n    reason: TODO\n"
    )
    assert stub_yaml(records[:1], expected) == ""
