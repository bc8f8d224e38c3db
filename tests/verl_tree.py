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


@dataclass(frozen=True)
class OddCommit:
    """A commit on top of `fix` whose files a text-only, space-splitting reader gets wrong."""

    commit: str
    latin1: str  # a text file under verl/ that is not UTF-8
    binary: str  # a binary file under verl/
    spaced: str  # a file under verl/ whose name has a space


def add_odd_commit(repo: VerlRepo) -> OddCommit:
    """Branch `odd` from fix: a Latin-1 source file, a binary file and a file named with a space, all under verl/."""
    git(repo.path, "checkout", "--quiet", "-b", "odd", repo.fix)
    odd = OddCommit("", "verl/utils/latin1_notes.py", "verl/utils/table.bin", "verl/utils/my notes.py")
    (repo.path / odd.latin1).write_bytes("# caf\u00e9 au lait\n".encode("latin-1"))
    (repo.path / odd.binary).write_bytes(b"\x00\x01\x02binary\x00")
    (repo.path / odd.spaced).write_text("# a name with a space\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "--quiet", "-m", "odd files")
    commit = git(repo.path, "rev-parse", "HEAD")
    git(repo.path, "checkout", "--quiet", "fsdp2-lmhead-forward")
    return OddCommit(commit, odd.latin1, odd.binary, odd.spaced)
