"""pr: a pull request as its author wrote it. `harness pr PATH BASE..HEAD` takes the diff between two refs of a verl
checkout (its files under verl/ only; the others are named as not judged) and judges it as `verify --patch` judges a
patch, on the verl at BASE (`BASE...HEAD`: on their merge base, the diff from there, as a pull request shows it).
The verl at BASE is a tree of plan/verl_trees.py: the installed verl itself where BASE's verl/ is byte for byte
the installed one, else an environment of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.errors import UsageError
from harness.paths import CACHE_DIR, VERL_SPEC_ENV, VERL_TREE_ENV

PR_DIFFS_DIR = CACHE_DIR / "prs"


def _git(checkout: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise UsageError(f"{checkout}: git {' '.join(args)}: {done.stderr.strip().splitlines()[-1:] or ['failed']}")
    return done.stdout


def parse_range(checkout: Path, text: str) -> tuple[str, str]:
    """(the commit judged on, the head commit) of BASE..HEAD, or of BASE...HEAD (the merge base as the first)."""
    three = "..." in text
    base, _, head = text.partition("..." if three else "..")
    if not base or not head or ".." in head:
        raise UsageError(f"pr: range {text!r}: give BASE..HEAD or BASE...HEAD (two refs of {checkout})")
    base_commit = _commit(checkout, base)
    head_commit = _commit(checkout, head)
    if three:
        base_commit = _git(checkout, "merge-base", base_commit, head_commit).strip()
    return base_commit, head_commit


def _commit(checkout: Path, ref: str) -> str:
    try:
        return _git(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except UsageError:
        raise UsageError(f"pr: {checkout}: {ref!r} is no commit, branch or tag there") from None


def pr_diff(checkout: Path, base: str, head: str) -> tuple[str, list[str]]:
    """(the diff of verl/ from base to head, with the commits' subjects above it as its description; the files
    the range changes outside verl/, which nothing here judges)."""
    changed = _git(checkout, "diff", "--name-only", "--no-renames", base, head).split()
    outside = [f for f in changed if not f.startswith("verl/")]
    if not any(f.startswith("verl/") for f in changed):
        raise UsageError(f"pr: {base[:12]}..{head[:12]} of {checkout} changes nothing under verl/: nothing to judge")
    body = _git(
        checkout, "diff", "--no-color", "--no-ext-diff", "--no-renames", "--full-index", base, head, "--", "verl"
    )
    subjects = _git(checkout, "log", "--format=%s", f"{base}..{head}").strip().splitlines()
    about = "; ".join(subjects) or f"{base[:12]}..{head[:12]}"
    header = f"Pull request {base[:12]}..{head[:12]} of {checkout}: {about}\n"
    return header + body, outside


def write_diff(text: str, head: str) -> Path:
    """The diff as a file of its own, named after the head commit: the arm verify judges is its stem."""
    PR_DIFFS_DIR.mkdir(parents=True, exist_ok=True)
    path = PR_DIFFS_DIR / f"pr-{head[:10]}.diff"
    path.write_text(text)
    return path


def cmd_pr(args) -> int:
    checkout = Path(args.checkout).resolve()
    if not (checkout / "verl" / "__init__.py").is_file():
        raise UsageError(f"pr: {checkout}: not a verl checkout's root (no verl/__init__.py)")
    base, head = parse_range(checkout, args.range)
    text, outside = pr_diff(checkout, base, head)
    diff = write_diff(text, head)
    print(f"pr: {args.range} of {checkout}: {diff} (the diff of verl/), judged on verl at {base[:12]}")
    if outside:
        shown = ", ".join(outside[:6]) + (f" and {len(outside) - 6} more" if len(outside) > 6 else "")
        print(f"pr: not judged: {len(outside)} file(s) outside verl/ ({shown})")
    argv = ["verify", "--patch", str(diff)]
    for name in args.scenario or []:
        argv += ["--scenario", name]
    argv += [flag for flag, on in (("--nightly", args.nightly), ("--fresh", args.fresh)) if on]
    argv += ["--jobs", str(args.jobs)] if args.jobs else []
    argv += ["--json", args.json] if args.json else []
    argv += ["--pr", str(checkout), args.range]  # the differential verdict (docs/PR.md); the comment's reproduce line
    argv += ["--comment", args.comment] if args.comment else []
    env = {k: v for k, v in os.environ.items() if k != VERL_TREE_ENV}
    env[VERL_SPEC_ENV] = f"{checkout}@{base}"
    sys.stdout.flush()
    # verify itself, on the verl at BASE (cli.main enters the tree): one code path for the verdict.
    os.execve(sys.executable, [sys.executable, "-m", "harness", *argv], env)
    return 0  # not reached
