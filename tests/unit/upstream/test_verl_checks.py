"""Every package's test, placed where it belongs in a checkout of the ref it targets (verl's main, or the pull
request's head), passes verl's own pre-commit checks there: its check_license.py, validate_structure.py, the naming
hook, compileall's rule, and ruff check / ruff format at the version verl's .pre-commit-config.yaml pins, with
verl's pyproject.toml (where a ruff of that version is given: $HARNESS_VERL_RUFF or PATH; else those two are "not
run" and this test says so). Needs verl's repository ($HARNESS_VERL_REPO); skipped without it."""

from __future__ import annotations

import pytest

from harness.inputs.findings import load_findings
from harness.upstream.packages import write_package
from harness.upstream.verl_checks import check_package

pytestmark = [pytest.mark.unit, pytest.mark.verl_repo]

FINDINGS = load_findings()


@pytest.mark.parametrize("finding", FINDINGS, ids=[f.name for f in FINDINGS])
def test_the_package_test_passes_verls_own_checks_at_its_ref(verl_repo, finding, tmp_path):
    test = write_package(finding, tmp_path)["test"]
    result = check_package(verl_repo, finding, test)
    ran = {c.name: c for c in result.checks}
    assert not [c.line() for c in result.checks if c.passed is False], result.checks
    for hook in ("check-license", "validate-structure", "check-naming-conventions", "compileall"):
        assert ran[hook].passed is True, ran.get(hook)
    assert result.path == f"{finding.test.dest}/{finding.test.file}"
    if ran["ruff check"].passed is None:
        pytest.skip(f"ruff at verl's pin not found: {ran['ruff check'].output}")
    assert ran["ruff check"].passed and ran["ruff format"].passed and result.passed
