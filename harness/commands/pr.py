"""pr: a pull request as its author wrote it, a checkout's BASE..HEAD diff of verl/ judged by verify on the verl at
BASE, differentially. `harness pr PATH BASE..HEAD` takes the diff between two refs of a verl checkout (its files under
verl/ only; the others are named as not judged) and judges it as `verify --patch` judges a patch, on the verl at BASE
(`BASE...HEAD`: on their merge base, the diff from there, as a pull request shows it). The verl at BASE is a tree of
plan/verl_trees.py: the installed verl itself where BASE's verl/ is byte for byte the installed one, else an environment
of its own.

The diff is kept under its base and head, written whole, every file named.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness import git
from harness.errors import EXIT_OK, UsageError
from harness.paths import CACHE_DIR, VERL_SPEC_ENV, VERL_TREE_ENV
from harness.render.untrusted import terminal_text

PR_DIFFS_DIR = CACHE_DIR / "prs"


def parse_range(checkout: Path, text: str) -> tuple[str, str]:
    """(the commit judged on, the head commit) of BASE..HEAD, or of BASE...HEAD (the merge base as the first). A
    two-dot range whose BASE is not an ancestor of HEAD is refused: its diff would undo BASE's own commits."""
    three = "..." in text
    base, _, head = text.partition("..." if three else "..")
    if not base or not head or ".." in head:
        raise UsageError(f"pr: range {text!r}: give BASE..HEAD or BASE...HEAD (two refs of {checkout})")
    base_commit = _commit(checkout, base)
    head_commit = _commit(checkout, head)
    if three:
        base_commit = git.output(checkout, "merge-base", base_commit, head_commit, what=f"pr: {text}").decode().strip()
    elif not git.is_ancestor(checkout, base_commit, head_commit):
        # Given backwards (HEAD older than BASE), or two branches apart: either way not a change made on BASE.
        hint = (
            f"the range backwards? {head}..{base}"
            if git.is_ancestor(checkout, head_commit, base_commit)
            else f"{base}...{head} judges {head} from their merge base"
        )
        raise UsageError(
            f"pr: range {text!r}: {base} is not an ancestor of {head}, so the diff from {base} to {head} would undo "
            f"{base}'s own commits (a revert); {hint}"
        )
    return base_commit, head_commit


def _commit(checkout: Path, ref: str) -> str:
    commit = git.commit_of(checkout, ref)
    if commit is None:
        raise UsageError(f"pr: {checkout}: {ref!r} is no commit, branch or tag there")
    return commit


@dataclass
class PrDiff:
    """A range's diff of verl/, byte for byte, and every file it changes, each named where it is not judged as
    the others are."""

    text: bytes  # the commits' subjects (its description), then the diff of verl/'s text files
    judged: list[str] = field(default_factory=list)  # text files under verl/, whose diff is judged
    not_utf8: list[str] = field(default_factory=list)  # of those, the ones not UTF-8: their diff kept byte for byte
    binary: list[str] = field(default_factory=list)  # binary files under verl/: no text diff carries them
    outside: list[str] = field(default_factory=list)  # files outside verl/: nothing here judges them


def pr_diff(checkout: Path, base: str, head: str) -> PrDiff:
    """The range's diff of verl/ with the commits' subjects above it as its description (a `Written against:`
    line naming BASE: plan/patch_base.py), and its files sorted as above. Names are read NUL-separated (`-z`):
    a name with a space or any other byte stays whole."""
    what = f"pr: {base[:12]}..{head[:12]} of {checkout}"
    numstat = git.z_list(git.output(checkout, "diff", "--numstat", "-z", "--no-renames", base, head, what=what))
    out = PrDiff(b"")
    for entry in numstat:
        added, _, name = entry.split("\t", 2)
        if not name.startswith("verl/"):
            out.outside.append(name)
        elif added == "-":
            out.binary.append(name)
        else:
            out.judged.append(name)
    if not out.judged:
        binary = (
            f" but {len(out.binary)} binary file(s) ({_named(out.binary)}), which no text diff carries"
            if out.binary
            else ""
        )
        raise UsageError(f"{what} changes nothing under verl/{binary}: nothing to judge")
    flags = ("--no-color", "--no-ext-diff", "--no-renames", "--full-index")
    # Names as given, never as patterns: a file named `verl/[x].py` is that file.
    body = git.output(checkout, "--literal-pathspecs", "diff", *flags, base, head, "--", *out.judged, what=what)
    out.not_utf8 = [name for name, section in _sections(body, out.judged) if not _utf8(section)]
    log = git.output(checkout, "log", "--format=%s", f"{base}..{head}", what=what)
    subjects = log.decode("utf-8", errors="replace").strip().splitlines()
    about = "; ".join(subjects) or f"{base[:12]}..{head[:12]}"
    header = f"Pull request {base[:12]}..{head[:12]} of {checkout}: {about}\nWritten against: {checkout}@{base}\n"
    out.text = header.encode() + body
    return out


def _sections(body: bytes, names: list[str]) -> list[tuple[str, bytes]]:
    """The diff cut per file (git writes them in the order --numstat lists them)."""
    parts = body.split(b"\ndiff --git ")
    return list(zip(names, parts, strict=False))


def _utf8(blob: bytes) -> bool:
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def write_diff(text: bytes, base: str, head: str) -> Path:
    """The diff as a file of its own, kept under its base and named after its head (the arm verify judges is its
    stem), written whole: a temporary file renamed into place, so that two `pr` of one head on two bases, or the
    same range twice at once, never read each other's or half of one."""
    directory = PR_DIFFS_DIR / base[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"pr-{head[:10]}.diff"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _named(names: list[str]) -> str:
    """The first names, each on the line it is printed in (a newline in a name escaped, as a control character is)."""
    shown = [terminal_text(name, keep="") for name in names[:6]]
    return ", ".join(shown) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def cmd_pr(args) -> int:
    checkout = Path(args.checkout).resolve()
    if not (checkout / "verl" / "__init__.py").is_file():
        raise UsageError(f"pr: {checkout}: not a verl checkout's root (no verl/__init__.py)")
    base, head = parse_range(checkout, args.range)
    found = pr_diff(checkout, base, head)
    diff = write_diff(found.text, base, head)
    print(f"pr: {args.range} of {checkout}: {diff} (the diff of verl/), judged on verl at {base[:12]}")
    print(f"pr: judged: {len(found.judged)} file(s) under verl/ ({_named(found.judged)})")
    if found.not_utf8:
        print(f"pr: not UTF-8, their diff kept byte for byte: {_named(found.not_utf8)}")
    if found.binary:
        print(f"pr: not judged: {len(found.binary)} binary file(s) under verl/ ({_named(found.binary)})")
    if found.outside:
        print(f"pr: not judged: {len(found.outside)} file(s) outside verl/ ({_named(found.outside)})")
    argv = ["verify", "--patch", str(diff)]
    for name in args.scenario or []:
        argv += ["--scenario", name]
    argv += [flag for flag, on in (("--nightly", args.nightly), ("--fresh", args.fresh)) if on]
    argv += ["--jobs", str(args.jobs)] if args.jobs else []
    argv += ["--reach-seconds", str(args.reach_seconds)]  # where the PR's code ran nowhere (commands/reach.py)
    argv += ["--json", args.json] if args.json else []
    argv += ["--pr", str(checkout), args.range]  # the differential verdict (docs/PR.md); the comment's reproduce line
    argv += ["--comment", args.comment] if args.comment else []
    env = {k: v for k, v in os.environ.items() if k != VERL_TREE_ENV}
    env[VERL_SPEC_ENV] = f"{checkout}@{base}"
    sys.stdout.flush()
    # verify itself, on the verl at BASE (cli.main enters the tree): one code path for the verdict.
    os.execve(sys.executable, [sys.executable, "-m", "harness", *argv], env)
    return EXIT_OK  # not reached
