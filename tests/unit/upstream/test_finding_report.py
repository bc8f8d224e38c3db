"""A finding's report (harness/upstream/finding_report.py): REPORT.md for a branch, a review comment's body for a
pull request; its outcomes and numbers are the proof's runs, and a ref that did not run says so and why."""

from __future__ import annotations

import pytest

from harness.inputs.findings import load_findings
from harness.upstream.finding_report import numbers_text, render_finding_report
from harness.upstream.prove import Proof, RefEnv
from harness.upstream.run_generated import GeneratedRun

pytestmark = pytest.mark.unit

FINDINGS = {f.name: f for f in load_findings()}


def _proof(ref, must_pass, returncode, message="", numbers=None):
    outcomes = {"test_x": "failed" if message else "passed"}
    run = GeneratedRun(ref, returncode, 12.3, outcomes, {"test_x": message}, numbers, "")
    return Proof(ref, must_pass, RefEnv(ref, "python", None, f"verl of {ref}"), run)


def test_a_branchs_report_has_the_reproduce_line_the_refs_and_this_invocations_numbers():
    f = FINDINGS["qwen3-5-packed-rows"]
    proofs = [
        _proof("release", False, 1, f"AssertionError: {f.fails_with[0]}", {"output_max_abs": [6.5e-7, 0.000490158]}),
        _proof("release+fix", True, 0, numbers={"output_max_abs": [6.5e-7, 2.7e-7]}),
        Proof("git:main", False, None, None, "no verl repository: give --verl-repo PATH"),
    ]
    text = render_finding_report(f, proofs, fix_check="`git apply --check` passes.", out_dir="out")
    assert text.startswith(f"# {f.title}") and f"    pytest {f.test.dest}/{f.test.file}" in text and f.cause in text
    assert "| release     | verl of release     | fail | fails (1 of 1) | 12 | yes" in text
    assert "| git:main    | -                   | fail | not run" in text
    assert "`git:main`: not run: no verl repository" in text
    assert "output_max_abs: [6.5e-07, 0.00049]" in text  # 3 significant digits
    assert "## The fix" in text and "passes." in text


def test_a_pull_requests_review_has_no_fix_and_says_where_it_fails():
    f = FINDINGS["pr-7370-dense-response-mask"]
    proofs = [
        _proof(f"git:refs/pr/{f.pr}", False, 1, f"AssertionError: {f.fails_with[0]}"),
        _proof(f"pr-base:refs/pr/{f.pr}", True, 0),
    ]
    text = render_finding_report(f, proofs, fix_check=None, out_dir="out")
    assert text.startswith(f"**{f.title}**") and "fails on this pull request's head and passes on its base" in text
    assert "## The fix" not in text and "(the test wrote no numbers)" in text


def test_numbers_are_cut_where_long_and_say_so():
    text = numbers_text({"grad_rel": {f"p{i}": 0.1 * i for i in range(400)}}, limit=100)
    assert len(text.splitlines()[0]) == 100 and "more characters" in text
