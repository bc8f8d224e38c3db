"""A verl source tree of the tests' own, as a maintainer's checkout would be: a git repository made from the installed
verl's files (commit `base`, tagged), then a commit of our own that changes the fused path (`fix`: the candidate
patch applied to it, as its author would have committed it), and one that also adds a file outside verl/."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.paths import PATCHES_DIR
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, patched_files, read_patch

CANDIDATE = PATCHES_DIR / "fsdp2-lmhead-forward.diff"


@dataclass(frozen=True)
class VerlRepo:
    path: Path
    base: str  # the installed verl's files
    fix: str  # base + the candidate's change, committed


# Fixed authors and dates: the same files give the same commits from run to run, so a tree's environment (keyed by
# its commit, plan/verl_trees.py) is built once and reused, as for a maintainer's checkout.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "fsdp2-harness tests",
    "GIT_AUTHOR_EMAIL": "tests@fsdp2-harness.invalid",
    "GIT_AUTHOR_DATE": "2026-08-22T00:00:00Z",
    "GIT_COMMITTER_NAME": "fsdp2-harness tests",
    "GIT_COMMITTER_EMAIL": "tests@fsdp2-harness.invalid",
    "GIT_COMMITTER_DATE": "2026-08-22T00:00:00Z",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env)
    return done.stdout.strip()


def make_verl_repo(where: Path) -> VerlRepo:
    repo = where / "verl-checkout"
    shutil.copytree(installed_verl_dir(), repo / "verl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "verl as installed")
    git(repo, "tag", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "-b", "fsdp2-lmhead-forward")
    for rel, text in patched_files(repo / "verl", [(CANDIDATE, read_patch(CANDIDATE))]).items():
        (repo / rel).write_bytes(text.encode(*ENCODING))
    (repo / "tests").mkdir()
    (repo / "tests" / "test_lm_head.py").write_text("# a test the pull request adds (outside verl/)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "run the fused head as lm_head's FSDP forward")
    fix = git(repo, "rev-parse", "HEAD")
    return VerlRepo(repo, base, fix)
