"""A malicious pull request's arm, run as a real cell (issue 71): its diff appends tests/fixtures/sandbox_attacks.py
to verl/__init__.py, so that each rank tries every attack at `import verl`, inside the cell's OS sandbox
(harness/processes/sandbox.py; docs/SANDBOX.md), and writes what got through into its run directory. One cell,
1 rank, on CPU: forked through the cell's own parent where the preloaded parent is up (make test's), else fresh."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest
from sandbox_checks import FIXTURE, SECRETS, assert_contained, attack_params, outside_world  # tests/ on sys.path

from harness.paths import ROOT
from harness.processes import sandbox

pytestmark = pytest.mark.skipif(bool(sandbox.available()), reason=f"no sandbox here: {sandbox.available()}")

# Appended to verl/__init__.py after the fixture's code: the rank (its argv ends with its launch.json) reports.
RUN = """
if os.path.basename(sys.argv[-1]) == "launch.json":
    report({params}, os.path.join(os.path.dirname(sys.argv[-1]), "attacks.json"))
"""


def malicious_diff(tmp_path: Path, params: dict) -> Path:
    """A diff of the installed verl whose verl/__init__.py runs the attacks."""
    from harness.plan.arms import installed_verl_dir

    init = (installed_verl_dir() / "__init__.py").read_text()
    evil = init + "\n" + FIXTURE.read_text().split('if __name__ == "__main__":')[0] + RUN.format(params=repr(params))
    lines = difflib.unified_diff(
        init.splitlines(keepends=True), evil.splitlines(keepends=True), "a/verl/__init__.py", "b/verl/__init__.py"
    )
    path = tmp_path / "evil-pr.diff"
    path.write_text("".join(lines))
    return path


@pytest.fixture
def outside(tmp_path):
    with outside_world(tmp_path) as world:
        yield world


def test_a_malicious_prs_cell_is_contained(tmp_path, monkeypatch, run_cell, scenario, outside):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    # Where the cell's run directory will be is known only once it runs: the daemon writes beside its report.
    params = attack_params(outside, Path(os.environ.get("HARNESS_RESULTS_DIR") or tmp_path), tmp_path / "results")
    params["daemon_file"] = "DAEMON"
    diff = malicious_diff(tmp_path, params)
    diff.write_text(diff.read_text().replace("'DAEMON'", 'os.path.join(os.path.dirname(sys.argv[-1]), "daemon")'))
    record = run_cell(scenario("direct-1gpu", device="cpu"), str(diff))
    run_dir = ROOT / record.run_dir  # shown relative to the checkout where it lies inside it
    assert record.sandbox == "sandboxed" and "sandboxed" in record.rank_start
    found = json.loads((run_dir / "attacks.json").read_text())
    params["daemon_file"] = str(run_dir / "daemon")
    assert_contained(found, params, outside)
