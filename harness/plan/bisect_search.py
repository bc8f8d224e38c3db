"""The search of `harness bisect`: the first commit of GOOD..BAD where a cell's signature (its outcome, the root error's
type, the failing parameters) is no longer GOOD's, as `git bisect` finds it, over the commits that touch verl/.

A commit that changes nothing under verl/ runs the same verl as its parent: it is left out of the search (counted,
never run). A commit whose cell cannot be built or run here is skipped as `git bisect skip` skips one: another commit
of the open interval is tried, the nearest to the middle; where every commit between the last GOOD-like and the first
changed one was skipped, the answer is that interval, not one commit.

The search is a plain function of an outcome function (commit -> Signature, or None where it cannot run), so its
logic is tested on a function of the commit's index (tests/unit/plan/test_bisect_search.py); commands/bisect.py gives it
the real one (a `harness run` on the commit's tree). Its git calls go through harness/git.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness import git
from harness.errors import UsageError
from harness.records.failure_signature import FailureSignature
from harness.records.results import IMPORT_ERRORS, Record

# What must stay the same for two cells to count as one outcome: a different outcome, root error type or set of
# failing parameters is a change (a number or a message moving within the same failure is not): the failure
# signature's bisect view (records/failure_signature.py same_ignoring_message).
Signature = FailureSignature


def direction(before: Signature, after: Signature) -> str:
    """What the first changed commit did to the cell: "better" (failing -> passing), "worse" (passing -> failing)
    or "different" (failing before and after, another way)."""
    if before.failing and not after.failing:
        return "better"
    if after.failing and not before.failing:
        return "worse"
    return "different"


def signature_of(record: dict) -> Signature | None:
    """A written record's (JSON) signature, what bisect keeps of it (FailureSignature.ignoring_message); None where
    the cell did not run here (skipped, an import error, or a record of another shape)."""
    try:
        loaded = Record.model_validate(record)
    except ValidationError:
        return None
    if loaded.outcome == "skipped":
        return None
    signature = FailureSignature.of(loaded).ignoring_message()
    if signature.root_type in IMPORT_ERRORS:
        return None
    return signature


@dataclass(frozen=True)
class Step:
    commit: str
    signature: Signature | None  # None: could not be built or run here (skipped)
    seconds: float
    note: str = ""
    why: str = ""  # the record's why: the cause of a failing cell, in words


@dataclass(frozen=True)
class Result:
    first_changed: str | None  # the first commit whose signature is not GOOD's; None where it is not one commit
    candidates: tuple[str, ...]  # where skips left it open: the commits it may be (first_changed's, alone, else)
    good: Signature
    changed: Signature | None  # first_changed's signature
    steps: tuple[Step, ...]
    before: str | None = None  # the last commit run that is GOOD-like, just before the candidates (None: GOOD itself)


Runner = Callable[[str], Step]


def search(commits: list[str], run: Runner, good: Signature, bad: Signature) -> Result:
    """commits: those after GOOD up to BAD, oldest first, BAD last (its step already run: `bad`). Returns the first
    commit whose signature is not `good`, as git bisect does (it assumes one change; with several it finds one)."""
    steps: list[Step] = []
    if bad.same_ignoring_message(good):
        raise UsageError(f"bisect: GOOD and BAD have the same outcome ({good.words()}): nothing changes between them")
    lo, hi = -1, len(commits) - 1  # commits[lo] is GOOD-like (-1: GOOD itself), commits[hi] is changed
    skipped: set[int] = set()
    while True:
        untried = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untried:
            break
        mid = (lo + hi) // 2
        pick = min(untried, key=lambda i: (abs(i - mid), i))
        step = run(commits[pick])
        steps.append(step)
        if step.signature is None:
            skipped.add(pick)
        elif step.signature.same_ignoring_message(good):
            lo = pick
        else:
            hi = pick
            last_changed = step.signature
    between = tuple(commits[lo + 1 : hi + 1])
    changed = bad if hi == len(commits) - 1 else last_changed
    before = commits[lo] if lo >= 0 else None
    return Result(between[0] if len(between) == 1 else None, between, good, changed, tuple(steps), before)


def _git(checkout: Path, *args: str) -> str:
    return git.output(checkout, *args, what=f"bisect: {checkout}: git {' '.join(args)}").decode()


def parse_range(checkout: Path, text: str) -> tuple[str, str]:
    """(GOOD, BAD) commits of GOOD..BAD; GOOD must be an ancestor of BAD (else the range is no history to search)."""
    good, sep, bad = text.partition("..")
    if not sep or not good or not bad or bad.startswith("."):
        raise UsageError(f"bisect: range {text!r}: give GOOD..BAD (two refs of {checkout}, GOOD an ancestor of BAD)")
    commits = []
    for ref in (good, bad):
        commit = git.commit_of(checkout, ref)
        if commit is None:
            raise UsageError(f"bisect: {checkout}: {ref!r} is no commit, branch or tag there")
        commits.append(commit)
    if commits[0] == commits[1]:
        raise UsageError(f"bisect: range {text!r}: GOOD and BAD are the same commit {commits[0][:12]}")
    if not git.is_ancestor(checkout, *commits):
        raise UsageError(f"bisect: range {text!r}: {good} is not an ancestor of {bad} in {checkout}")
    return commits[0], commits[1]


def commits_touching_verl(checkout: Path, good: str, bad: str) -> tuple[list[str], int]:
    """(the commits after GOOD up to BAD that change something under verl/, oldest first, BAD last whether or not
    it does; how many commits of the range were left out for changing nothing there)."""
    every = _git(checkout, "rev-list", "--count", "--ancestry-path", f"{good}..{bad}").strip()
    touching = _git(checkout, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}", "--", "verl").split()
    if not touching or touching[-1] != bad:
        touching.append(bad)
    return touching, int(every) - len(touching)
