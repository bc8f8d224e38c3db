"""The CPU-CI stack's lines of REPORT.md (harness/upstream/ci_stack.py) where none can run, and how a run is said;
the runs themselves need verl's repository and a venv of verl's CI pins (docs/UPSTREAM.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.inputs.findings import load_findings
from harness.upstream.ci_stack import CI_PYTHON_ENV, _said, ci_stack_lines
from harness.upstream.run_generated import GeneratedRun

pytestmark = pytest.mark.unit

FINDING = load_findings()[0]


def test_without_a_ci_python_or_a_repository_the_line_says_not_run_and_why(monkeypatch, tmp_path):
    monkeypatch.delenv(CI_PYTHON_ENV, raising=False)
    (line,) = ci_stack_lines(FINDING, tmp_path / "t.py", None, Path("/nowhere"), tmp_path)
    assert "not run here" in line and CI_PYTHON_ENV in line
    monkeypatch.setenv(CI_PYTHON_ENV, "python3")
    assert ci_stack_lines(FINDING, tmp_path / "t.py", None, None, tmp_path) == [
        "- verl's CPU-CI stack: not run (no verl repository)"
    ]


def test_a_run_is_said_by_its_counts_and_its_first_failure():
    run = GeneratedRun("x", 1, 3.0, {"a": "passed", "b": "failed"}, {"a": "", "b": "AssertionError: off"}, None)
    assert _said(run) == "1 failed, 1 passed: `AssertionError: off`"
    assert _said(GeneratedRun("x", 4, 1.0, {}, {}, None)) == "no test ran (exit 4)"
