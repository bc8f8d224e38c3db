"""One package's proof on verl's real repository (HARNESS_VERL_REPO; skipped without it, as in CI): the test
`harness upstream` writes for verl PR #7471 fails on the pull request's head (AttributeError: the causal-conv1d
kernel present on the layer but None, on this stack without the package) and passes on its base and on the
installed release. The whole set of packages is proven by `make upstream`, not here (minutes, and CI has no verl
repository)."""

from __future__ import annotations

import pytest

from harness.inputs.findings import load_findings, select_findings
from harness.upstream.packages import write_package
from harness.upstream.prove import prove

pytestmark = pytest.mark.verl_repo


def test_pr_7471s_package_fails_on_its_head_and_passes_on_its_base(verl_repo, tmp_path):
    finding = select_findings(load_findings(), ["pr-7471-missing-conv-kernel"])[0]
    written = write_package(finding, tmp_path / finding.name)
    proofs = prove(finding, written["test"], verl_repo, tmp_path / "runs")
    assert [p.ref for p in proofs] == ["git:refs/pr/7471", "pr-base:refs/pr/7471", "release"]
    assert all(p.holds(finding) for p in proofs), [(p.ref, p.verdict(finding), p.failure_messages()) for p in proofs]
