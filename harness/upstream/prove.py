"""A package's proof: its test run with plain pytest in the environment of each ref its finding names
(inputs/findings.py), failing where the defect is and passing where it is not. A failing test counts only when its
message holds one of the finding's `fails_with` fragments: a test that fails for another reason (an import error,
a crash elsewhere) shows nothing, and that ref is not proven.

Where each ref's verl comes from: `release` is this environment's installed verl; `release+fix` and `arm:NAME` are
arms materialised by plan/arms.py, first on PYTHONPATH; `git:REF` and `pr-base:REF` are trees of verl's repository
in environments of plan/verl_trees.py (built once per commit), or this environment where the tree is the
installed verl byte for byte.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from harness import git
from harness.errors import EXIT_COUNTED, EXIT_NOT_JUDGED, EXIT_OK, UsageError
from harness.inputs.findings import Finding
from harness.paths import shown_path
from harness.plan import verl_trees
from harness.plan.arms import installed_verl_dir, materialise, resolve_arm
from harness.upstream.run_generated import GeneratedRun, run_pytest


class NotProvable(Exception):
    """A ref this invocation cannot build an environment for (no verl repository given, no such commit)."""


@dataclass(frozen=True)
class RefEnv:
    ref: str
    python: str
    pythonpath: Path | None
    verl: str  # what verl it is, in words: version and where it comes from


@dataclass
class Proof:
    ref: str
    must_pass: bool
    env: RefEnv | None
    run: GeneratedRun | None
    why_not: str = ""  # set where the ref could not be run

    @property
    def ran(self) -> bool:
        return self.run is not None

    @property
    def passed(self) -> bool | None:
        return None if self.run is None else self.run.returncode == 0

    def failure_messages(self) -> list[str]:
        if self.run is None:
            return []
        return [m for n, m in self.run.messages.items() if self.run.outcomes.get(n) != "passed"]

    def holds(self, finding: Finding) -> bool:
        """The ref gave what the finding says: a pass where it must pass; where it must fail, a failure whose
        message names the defect."""
        if self.run is None:
            return False
        if self.must_pass:
            return self.passed is True
        if self.passed is not False or not self.run.outcomes:
            return False
        text = "\n".join(self.failure_messages()) + self.run.output_tail
        return any(fragment in text for fragment in finding.fails_with)

    def verdict(self, finding: Finding) -> str:
        if self.run is None:
            return f"not run: {self.why_not}"
        got = "passes" if self.passed else "fails"
        want = "passes" if self.must_pass else "fails"
        if self.holds(finding):
            return f"{got}, as it must"
        if got == want:
            return f"{got}, but not with the defect's message ({' / '.join(finding.fails_with)})"
        return f"{got}: it must {want[:-1]}"


def ref_commit(repo: Path, ref: str) -> str:
    """REF's commit; a pull request's head (refs/pr/N) is fetched from the repository's origin where it is missing
    (`refs/pull/N/head`, one at a time: fetching every pull request's ref at once fails)."""
    found = git.commit_of(repo, ref)
    if found is None and ref.startswith("refs/pr/"):
        number = ref.rsplit("/", 1)[-1]
        done = git.run(repo, "fetch", "-q", "origin", f"refs/pull/{number}/head:{ref}")
        if done.code != 0:
            raise NotProvable(f"{repo}: fetching refs/pull/{number}/head from its origin: {done.last_error()}")
        found = git.commit_of(repo, ref)
    if found is None:
        raise NotProvable(f"{repo}: {ref}: no such commit, branch or tag there")
    return found


def merge_base(repo: Path, one: str, other: str) -> str:
    done = git.run(repo, "merge-base", one, other)
    if done.code != 0:
        raise NotProvable(f"{repo}: no merge base of {one[:12]} and {other[:12]}: {done.last_error()}")
    return done.text().strip()


def ref_env(ref: str, finding: Finding, repo: Path | None) -> RefEnv:
    if ref == "release":
        return RefEnv(ref, sys.executable, None, f"installed verl {version('verl')}")
    if ref == "release+fix" or ref.startswith("arm:"):
        arm = resolve_arm(finding.fix if ref == "release+fix" else ref.removeprefix("arm:"))
        return RefEnv(
            ref,
            sys.executable,
            materialise(arm),
            f"installed verl {version('verl')} with {', '.join(map(shown_path, arm.patches))}",
        )
    if repo is None:
        raise NotProvable("no verl repository: give --verl-repo PATH (or HARNESS_VERL_REPO)")
    kind, _, name = ref.partition(":")
    commit = ref_commit(repo, name)
    if kind == "pr-base":
        commit = merge_base(repo, ref_commit(repo, "main"), commit)
    try:
        tree, files = verl_trees.resolve(f"{repo}@{commit}")
    except UsageError as exc:
        raise NotProvable(str(exc)) from None
    where = f"verl {tree.version} at {commit[:12]} ({name if kind == 'git' else 'merge base of ' + name + ' and main'})"
    if verl_trees.same_as_installed(files, installed_verl_dir()):
        return RefEnv(ref, sys.executable, None, where + ", the installed verl byte for byte")
    python = verl_trees.release_env(tree, files) or verl_trees.ensure_env(tree, files)
    return RefEnv(ref, str(python), None, where)


def prove(finding: Finding, test_file: Path, repo: Path | None, work_dir: Path, *, timeout_s: float = 1200) -> list:
    """The test on every ref of the finding, shows_on first: a Proof each."""
    proofs = []
    for ref, must_pass in finding.expected().items():
        try:
            env = ref_env(ref, finding, repo)
        except NotProvable as exc:
            proofs.append(Proof(ref, must_pass, None, None, str(exc)))
            continue
        run = run_pytest(
            test_file,
            ref,
            work_dir,
            python=env.python,
            pythonpath=env.pythonpath,
            numbers_env=finding.test.numbers_env,
            timeout_s=timeout_s,
        )
        proofs.append(Proof(ref, must_pass, env, run))
    return proofs


NOT_CHECKED = "not checked here"


def holds_words(proofs: list[Proof], finding: Finding) -> str:
    """The table's `holds` for one finding: "NO" only where a ref that ran did not give what the finding says; a ref
    that could not be run (no verl repository, no such commit) is not run, never "does not hold". A finding none of
    whose defect refs (those its test must fail on) ran is not checked here: a pass elsewhere shows no defect."""
    ran = [p for p in proofs if p.ran]
    if any(not p.holds(finding) for p in ran):
        return "NO"
    unrun = [p for p in proofs if not p.ran]
    if not any(not p.must_pass for p in ran):
        passed = f"; {', '.join(p.ref for p in ran)} passes, as it must" if ran else ""
        return f"{NOT_CHECKED} ({_why_not(unrun)}){passed}"
    return "yes" + (f" (not run: {', '.join(p.ref for p in unrun)})" if unrun else "")


def _why_not(unrun: list[Proof]) -> str:
    """Why refs were not run, once: "no verl repository: HARNESS_VERL_REPO" where that is the reason."""
    reasons = sorted({p.why_not for p in unrun})
    if reasons and all(r.startswith("no verl repository") for r in reasons):
        return "no verl repository: HARNESS_VERL_REPO"
    return "; ".join(reasons)


def proofs_exit(all_proofs: dict[str, list[Proof]], findings: dict[str, Finding]) -> tuple[int, list[str]]:
    """(the exit code, its closing lines) over every finding's proofs (harness/errors.py): EXIT_COUNTED where a
    ref that ran does not give what its finding says; EXIT_NOT_JUDGED where no ref could be run at all; EXIT_OK
    where everything that ran held, the refs not run said."""
    wrong = [
        f"{name} on {p.ref} ({p.verdict(findings[name])})"
        for name, proofs in all_proofs.items()
        for p in proofs
        if p.ran and not p.holds(findings[name])
    ]
    unrun = [f"{name} on {p.ref}" for name, proofs in all_proofs.items() for p in proofs if not p.ran]
    ran = sum(p.ran for proofs in all_proofs.values() for p in proofs)
    lines = []
    if wrong:
        lines.append("not as the findings say: " + "; ".join(wrong))
    if unrun:
        reasons = _why_not([p for proofs in all_proofs.values() for p in proofs if not p.ran])
        lines.append(f"not run here ({reasons}): {'; '.join(unrun)}")
    if wrong:
        return EXIT_COUNTED, lines
    if not ran:
        return EXIT_NOT_JUDGED, [*lines, "NOT JUDGED: no ref of any finding could be run here"]
    lines.append(
        f"every ref that ran ({ran}) is as its finding says" + (" (the others: not run, above)" if unrun else "")
    )
    return EXIT_OK, lines
