"""The workflows for verl's repository that post `harness pr`'s comment body (docs/workflows/, docs/PR.md,
docs/SECURITY.md): the job that runs the pull request's code has no secret and a read-only token, the harness at a
commit, its packages by hash, and the verdict written where no cell can write; the job that posts is a separate
workflow_run job that can only write pull-request comments, runs nothing of the PR's, trusts the run only by its path
and repository, and edits only its own bot's comment. tests/unit/test_workflows.py lints and audits both."""

from __future__ import annotations

import json
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


def test_the_harness_at_a_commit_its_packages_by_hash_the_sandbox_possible():
    (job,) = load(RUNS)["jobs"].values()
    steps = job["steps"]
    scripts = [s.get("run", "") for s in steps]
    harness = next(s for s in steps if s.get("with", {}).get("path") == "fsdp2-harness")
    assert harness["with"]["ref"] == "${{ vars.FSDP2_HARNESS_REF }}"  # never a branch: checked to be a SHA first
    check = next(i for i, s in enumerate(scripts) if "[0-9a-f]{40}" in s and "HARNESS_REF" in s)
    assert check < steps.index(harness) and job["env"]["HARNESS_REF"] == "${{ vars.FSDP2_HARNESS_REF }}"
    # Ubuntu 24.04's AppArmor forbids the unprivileged user namespaces the sandbox is made of: lifted first
    userns = next(i for i, s in enumerate(scripts) if "kernel.apparmor_restrict_unprivileged_userns=0" in s)
    assert userns < min(i for i, s in enumerate(scripts) if "make " in s)
    assert job["env"]["LOCK"] == "requirements-ci.lock"  # for make venv and make pr alike (Makefile: LOCK ?=)
    assert any(s.strip() == "make venv" for s in scripts)
    assert "unsafe-best-match" not in RUNS.read_text() and "EXTRA_INDEX_URL" not in RUNS.read_text()
    assert (ROOT / "requirements-ci.lock").is_file()


def test_what_the_comment_job_checks_the_body_against_is_written_after_the_prs_cells_from_the_event():
    (job,) = load(RUNS)["jobs"].values()
    steps = job["steps"]
    make_pr = next(i for i, s in enumerate(steps) if "make pr" in s.get("run", ""))
    numbers = next(i for i, s in enumerate(steps) if "pr-number" in s.get("run", ""))
    upload = next(i for i, s in enumerate(steps) if "upload-artifact" in s.get("uses", ""))
    assert make_pr < numbers < upload and "pr-number" not in steps[make_pr]["run"]
    assert job["env"]["PR_NUMBER"] == "${{ github.event.pull_request.number }}"
    assert job["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"


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


def test_the_run_is_trusted_by_its_path_and_repository_never_its_name():
    """A pull request can add a workflow named "pr verdict" anywhere: the read job runs only for a pull_request run
    of this repository's .github/workflows/pr-verdict.yml that ended with a verdict (success or failure)."""
    condition = " ".join(load(POSTS)["jobs"]["read"]["if"].split())
    for term in (
        "github.event.workflow_run.event == 'pull_request'",
        "github.event.workflow_run.path == '.github/workflows/pr-verdict.yml'",
        "github.event.workflow_run.repository.full_name == github.repository",
        "github.event.workflow_run.conclusion == 'success'",
        "github.event.workflow_run.conclusion == 'failure'",
    ):
        assert term in condition, term
    assert "github.event.workflow." not in POSTS.read_text()  # the name the run claims for itself: not evidence


def test_the_post_checks_the_pr_through_the_api_and_edits_only_its_own_bots_comment():
    post = load(POSTS)["jobs"]["post"]
    (step,) = post["steps"]
    script, env = step["run"], step["env"]
    assert env["RUN_HEAD"] == "${{ github.event.workflow_run.head_sha }}"
    assert env["RUN_HEAD_REPO"] == "${{ github.event.workflow_run.head_repository.full_name }}"
    for fact in ('[ "$state" != open ]', '[ "$head_sha" != "$RUN_HEAD" ]', '[ "$head_repo" != "$RUN_HEAD_REPO" ]'):
        assert fact in script, fact
    assert '[ "$base_repo" != "$REPO" ]' in script
    assert 'startswith(".github/")' in script  # a PR that edits the workflows ran its own copy of them
    assert '.user.login == \\"github-actions[bot]\\"' in script and '.user.type == \\"Bot\\"' in script
    read = load(POSTS)["jobs"]["read"]["steps"][-1]["run"]
    assert "head -n 1" in read and "60000" in read and "RUN_HEAD" in read  # the body's shape, refused whole


# ---------------------------------------------------------------- the comment job's scripts, run here

FAKE_GH = """#!{python}
# gh api as the post step calls it, answered from the JSON files of $FAKE_GH; writes are logged, not made.
import json, os, subprocess, sys
args = sys.argv[2:]
method = args[args.index("-X") + 1] if "-X" in args else "GET"
path = next(a for a in args if a.startswith("repos/"))
where = os.environ["FAKE_GH"]
if method != "GET":
    body = next(a for a in args if a.startswith("body="))[5:]
    with open(os.path.join(where, "calls.json"), "a") as out:
        out.write(json.dumps([method, path, body]) + "\\n")
    sys.exit(0)
name = "files" if path.endswith("/files") else "comments" if path.endswith("/comments") else "pull"
data = open(os.path.join(where, name + ".json")).read()
jq = args[args.index("--jq") + 1]
sys.exit(subprocess.run(["jq", "-r", jq], input=data, text=True).returncode)
"""
HEAD = "a" * 40
BOT = {"login": "github-actions[bot]", "type": "Bot"}


def run_script(script: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", script],
        env={"PATH": f"{cwd}:/usr/bin:/bin", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def fake_gh(tmp_path):
    if not shutil.which("jq"):
        pytest.skip("no jq (GitHub's runners have it; gh --jq is jq)")
    gh = tmp_path / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(0o755)
    return tmp_path


def post(fake_gh: Path, pull: dict, files: list, comments: list, body: str = f"{MARKER}\nverdict") -> list:
    (fake_gh / "pull.json").write_text(json.dumps(pull))
    (fake_gh / "files.json").write_text(json.dumps([{"filename": f} for f in files]))
    (fake_gh / "comments.json").write_text(json.dumps(comments))
    (step,) = load(POSTS)["jobs"]["post"]["steps"]
    env = {"FAKE_GH": str(fake_gh), "REPO": "volcengine/verl", "PR": "7", "BODY": body}
    env |= {"RUN_HEAD": HEAD, "RUN_HEAD_REPO": "someone/verl"}
    done = run_script(step["run"], env, fake_gh)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = fake_gh / "calls.json"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def a_pull(**change) -> dict:
    pull = {"state": "open", "changed_files": 2, "base": {"repo": {"full_name": "volcengine/verl"}}}
    pull |= {"head": {"sha": HEAD, "repo": {"full_name": "someone/verl"}}}
    return pull | change


def test_the_post_goes_only_to_the_open_pr_at_the_judged_head_from_the_runs_head_repository(fake_gh):
    assert post(fake_gh, a_pull(), ["verl/x.py"], []) == [
        ["POST", "repos/volcengine/verl/issues/7/comments", f"{MARKER}\nverdict"]
    ]
    for changed in (
        {"state": "closed"},
        {"head": {"sha": "b" * 40, "repo": {"full_name": "someone/verl"}}},
        {"head": {"sha": HEAD, "repo": {"full_name": "other/verl"}}},
        {"base": {"repo": {"full_name": "fork/verl"}}},
    ):
        (fake_gh / "calls.json").unlink(missing_ok=True)
        assert post(fake_gh, a_pull(**changed), ["verl/x.py"], []) == [], changed


def test_the_post_edits_only_its_own_bots_comment_and_replaces_a_body_the_prs_own_workflow_wrote(fake_gh):
    someone = {"id": 1, "user": {"login": "mallory", "type": "User"}, "body": f"{MARKER}\nforged"}
    own = {"id": 2, "user": BOT, "body": f"{MARKER}\nan earlier verdict"}
    other_bot = {"id": 3, "user": BOT, "body": "another bot comment"}
    (call,) = post(fake_gh, a_pull(), ["verl/x.py"], [someone, own, other_bot])
    assert call[:2] == ["PATCH", "repos/volcengine/verl/issues/comments/2"]
    (fake_gh / "calls.json").unlink(missing_ok=True)
    (call,) = post(fake_gh, a_pull(), ["verl/x.py", ".github/workflows/pr-verdict.yml"], [someone])
    assert call[0] == "POST" and call[2].startswith(MARKER) and "not judged here" in call[2]
    assert "verdict" not in call[2].split("\n", 1)[1].replace("pr verdict", "")


def test_the_read_step_refuses_an_artifact_of_the_wrong_shape_whole(tmp_path):
    (step,) = [s for s in load(POSTS)["jobs"]["read"]["steps"] if "run" in s]
    verdict = tmp_path / "verdict"
    verdict.mkdir()

    def read(pr="7", head=HEAD, body=f"{MARKER}\nverdict\n"):
        (verdict / "pr-number").write_text(pr + "\n")
        (verdict / "head-sha").write_text(head + "\n")
        (verdict / "comment.md").write_bytes(body if isinstance(body, bytes) else body.encode())
        out = tmp_path / "output"
        out.write_text("")
        env = {"VERDICT": str(verdict), "RUN_HEAD": HEAD, "GITHUB_OUTPUT": str(out)}
        done = run_script(step["run"], env, tmp_path)
        return done.returncode, out.read_text()

    code, output = read()
    assert code == 0 and output.startswith("pr=7\nbody<<EOF_") and f"\n{MARKER}\nverdict\n" in output
    for bad in (
        {"pr": "7; rm -rf /"},
        {"pr": "0"},
        {"head": "b" * 40},
        {"body": "verdict without the marker"},
        {"body": MARKER + "\n" + "x" * 60001},
        {"body": MARKER.encode() + b"\n\xff\xfe"},
    ):
        code, output = read(**bad)
        assert code != 0 and output == "", bad
