"""git, one way: every command this project runs in a git checkout (plan/verl_trees.py's trees, commands/pr.py's
ranges, plan/patch_base.py's bases, plan/bisect_search.py's ranges, the harness's own commit for a record's stamp) goes
through here, with no terminal and no pager, its output as bytes or text."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError


@dataclass(frozen=True)
class Done:
    code: int
    out: bytes
    err: str  # decoded, for messages

    def text(self) -> str:
        return self.out.decode("utf-8", errors="replace")

    def last_error(self) -> str:
        """git's own last line of complaint, for a one-line message."""
        lines = self.err.strip().splitlines()
        return lines[-1] if lines else f"exit code {self.code}"


def run(repo: Path, *args: str, timeout: float | None = None) -> Done:
    """`git -C repo ARGS`, whatever its exit code (subprocess.TimeoutExpired past `timeout` seconds)."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout
    )
    return Done(done.returncode, done.stdout, done.stderr.decode("utf-8", errors="replace"))


def output(repo: Path, *args: str, what: str | None = None) -> bytes:
    """The output of a git command that must succeed; otherwise a one-line UsageError led by `what` (default:
    the repository and the command)."""
    done = run(repo, *args)
    if done.code != 0:
        what = what or f"{repo}: git {' '.join(args)}"
        raise UsageError(f"{what}: {done.last_error()}")
    return done.out


def commit_of(repo: Path, ref: str) -> str | None:
    """The full commit a ref names in repo, None where it names none (or repo is no git repository)."""
    done = run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return done.text().strip() if done.code == 0 else None


def is_repository(repo: Path) -> bool:
    return run(repo, "rev-parse", "--git-dir").code == 0


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return run(repo, "merge-base", "--is-ancestor", older, newer).code == 0


def file_at(repo: Path, commit: str, path: str) -> bytes | None:
    """A file's bytes at a commit, None where the commit has no such file."""
    done = run(repo, "cat-file", "blob", f"{commit}:{path}")
    return done.out if done.code == 0 else None


def z_list(out: bytes) -> list[str]:
    """A NUL-separated list of paths (`-z`) as names, each kept whole (spaces, newlines and all); a name that is
    not UTF-8 keeps its bytes (surrogateescape) so it can still be named."""
    return [name.decode("utf-8", errors="surrogateescape") for name in out.split(b"\0") if name]
