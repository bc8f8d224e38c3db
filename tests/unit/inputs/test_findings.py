"""Findings are data (findings/findings.yaml, harness/inputs/findings.py): the project's own load and say what
`harness upstream` proves; a bad file is one line naming the file and the field, exit code 2."""

from __future__ import annotations

import pytest
import yaml

from harness.errors import UsageError
from harness.inputs.findings import load_findings, select_findings

pytestmark = pytest.mark.unit

GOOD = {
    "name": "a-defect",
    "title": "a defect",
    "kind": "branch",
    "cause": "one sentence.",
    "shows_on": ["release", "git:main"],
    "absent_on": ["release+fix"],
    "fails_with": ["wrong"],
    "fix": "findings/fixes/same-length-position-ids.diff",
    "test": {
        "template": "packages/test_left_right_2_no_padding_same_length_on_cpu.py.in",
        "file": "test_a_defect_on_cpu.py",
        "dest": "tests/workers",
    },
}


def _load(tmp_path, *items):
    path = tmp_path / "findings.yaml"
    path.write_text(yaml.safe_dump({"findings": list(items)}))
    return load_findings(path)


def test_the_projects_findings_are_at_least_four_packages_with_6659s_and_the_same_length_crash():
    findings = {f.name: f for f in load_findings()}
    assert len(findings) >= 4
    assert {"fsdp2-untied-lm-head", "same-length-position-ids", "qwen3-5-packed-rows"} <= set(findings)
    assert [f.pr for f in findings.values() if f.kind == "pr"]  # at least one open pull request's
    for f in findings.values():
        assert (f.fix is None) == (f.kind == "pr"), f.name  # a fix for a shipped branch, none for a PR
        assert f.report_name == ("REVIEW.md" if f.kind == "pr" else "REPORT.md")


def test_the_qwen3_5_packed_rows_finding_must_fail_on_the_release_and_main_and_pass_with_its_fix():
    finding = select_findings(load_findings(), ["qwen3-5-packed-rows"])[0]
    assert finding.expected() == {"release": False, "git:main": False, "release+fix": True}


def test_a_pull_requests_finding_passes_on_its_base():
    for f in load_findings():
        if f.kind == "pr":
            assert f.expected()[f"git:refs/pr/{f.pr}"] is False
            assert f.expected()[f"pr-base:refs/pr/{f.pr}"] is True


def test_a_good_finding_loads(tmp_path):
    (finding,) = _load(tmp_path, GOOD)
    assert finding.expected() == {"release": False, "git:main": False, "release+fix": True}


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"shows_on": ["released"]}, "findings.a-defect.shows_on", "unknown ref 'released'"),
        ({"absent_on": ["release"]}, "findings.a-defect", "both in shows_on and absent_on"),
        ({"kind": "pr", "pr": 1}, "findings.a-defect", "no fix for an open pull request"),
        (
            {"fix": None, "absent_on": ["git:main~1"], "shows_on": ["release"]},
            "findings.a-defect",
            "comes with its fix",
        ),
        ({"kind": "pr", "fix": None}, "findings.a-defect", "names its pr"),
        ({"fix": "findings/fixes/nothing.diff"}, "findings.a-defect.fix", "no such diff"),
        ({"name": "A defect"}, "findings.A defect.name", "lower-case words"),
        ({"test": {**GOOD["test"], "template": "nothing.py.in"}}, "findings.a-defect.test.template", ""),
        ({"test": {**GOOD["test"], "file": "test_a.py"}}, "findings.a-defect.test.file", "_on_cpu.py"),
        ({"test": {**GOOD["test"], "dest": "workers"}}, "findings.a-defect.test.dest", "validate_structure"),
        ({"test": {**GOOD["test"], "dest": "tests/special_e2e"}}, "findings.a-defect.test.dest", "<verl package>"),
        ({"cause": None}, "findings.a-defect.cause", ""),
        ({"extra": 1}, "findings.a-defect.extra", ""),
    ],
)
def test_a_bad_finding_is_one_line_naming_the_file_and_field(tmp_path, change, field, words):
    with pytest.raises(UsageError) as info:
        _load(tmp_path, {**GOOD, **change})
    line = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in line
    assert line.startswith(f"{tmp_path / 'findings.yaml'}: field '{field}'") and words in line, line


def test_a_name_given_twice_and_an_unknown_name_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="name 'a-defect' given twice"):
        _load(tmp_path, GOOD, GOOD)
    with pytest.raises(UsageError, match="no finding 'nothing'; known: a-defect"):
        select_findings(_load(tmp_path, GOOD), ["nothing"])
    assert select_findings(_load(tmp_path, GOOD), []) == _load(tmp_path, GOOD)


def test_a_file_without_a_findings_list_is_a_usage_error(tmp_path):
    path = tmp_path / "findings.yaml"
    path.write_text("findings: 3\n")
    with pytest.raises(UsageError, match="field 'findings': a list"):
        load_findings(path)
