"""A package's proof (harness/upstream/prove.py): where each ref's verl comes from, and when a ref's run holds
what its finding says (a pass where it must pass; where it must fail, a failure naming the defect). The verl
repository is one of our own made from the installed verl's files (tests/verl_tree.py); nothing here imports verl."""

from __future__ import annotations

import sys

import pytest
from verl_tree import git, make_verl_repo  # tests/verl_tree.py

from harness.inputs.findings import load_findings, select_findings
from harness.upstream.prove import NotProvable, Proof, ref_env
from harness.upstream.run_generated import GeneratedRun

pytestmark = pytest.mark.unit

FINDING = select_findings(load_findings(), ["qwen3-5-packed-rows"])[0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    made = make_verl_repo(tmp_path_factory.mktemp("tree"))
    git(made.path, "update-ref", "refs/pr/1", made.fix)  # a pull request's head, as fetched
    return made


def _run(returncode: int, messages: dict, tail: str = "") -> GeneratedRun:
    outcomes = {n: ("failed" if m else "passed") for n, m in messages.items()}
    return GeneratedRun("ref", returncode, 1.0, outcomes, messages, None, tail)


def test_a_failure_holds_only_where_it_names_the_defect():
    fragment = FINDING.fails_with[0]
    named = Proof("release", False, None, _run(1, {"test_a": f"AssertionError: {fragment}", "test_b": ""}))
    assert named.holds(FINDING) and named.verdict(FINDING) == "fails, as it must"
    other = Proof("release", False, None, _run(1, {"test_a": "ModuleNotFoundError: No module named 'fla'"}))
    assert not other.holds(FINDING) and "not with the defect's message" in other.verdict(FINDING)
    collected_nothing = Proof("release", False, None, _run(4, {}, tail=fragment))
    assert not collected_nothing.holds(FINDING)


def test_a_pass_holds_only_where_the_ref_must_pass_and_a_ref_not_run_holds_nothing():
    passed = _run(0, {"test_a": ""})
    assert Proof("release+fix", True, None, passed).holds(FINDING)
    wrong = Proof("release", False, None, passed)
    assert not wrong.holds(FINDING) and wrong.verdict(FINDING) == "passes: it must fail"
    assert not Proof("release+fix", True, None, _run(1, {"test_a": "x"})).holds(FINDING)
    missing = Proof("git:main", False, None, None, "no verl repository")
    assert not missing.holds(FINDING) and missing.passed is None
    assert missing.verdict(FINDING) == "not run: no verl repository"


def test_release_is_this_environment_and_release_plus_fix_the_fixs_arm():
    release = ref_env("release", FINDING, None)
    assert release.python == sys.executable and release.pythonpath is None
    fixed = ref_env("release+fix", FINDING, None)
    assert fixed.python == sys.executable
    assert (fixed.pythonpath / "verl" / "models" / "transformers" / "qwen3_5.py").is_file()
    assert FINDING.fix.rsplit("/", 1)[-1] in fixed.verl


def test_a_git_ref_needs_the_repository(repo):
    with pytest.raises(NotProvable, match="--verl-repo"):
        ref_env("git:main", FINDING, None)
    with pytest.raises(NotProvable, match="refs/pull/2/head"):  # fetched where missing; this repo has no origin
        ref_env("git:refs/pr/2", FINDING, repo.path)
    with pytest.raises(NotProvable):
        ref_env("git:no-such-branch", FINDING, repo.path)


def test_a_pull_requests_base_is_its_merge_base_with_main_and_a_tree_gets_its_environment(repo):
    base = ref_env("pr-base:refs/pr/1", FINDING, repo.path)
    assert base.python == sys.executable  # main's verl is the installed one byte for byte: no environment
    assert repo.base[:12] in base.verl and "merge base of refs/pr/1 and main" in base.verl
    head = ref_env("git:refs/pr/1", FINDING, repo.path)
    assert head.python != sys.executable and repo.fix[:12] in head.verl
    assert head.python.endswith("/bin/python")


NO_REPO = "no verl repository: give --verl-repo PATH (or HARNESS_VERL_REPO)"


def test_a_ref_not_run_is_not_run_never_does_not_hold_and_the_exit_follows_what_ran():
    """A fresh clone (issue 74): no verl repository, every git ref not run. A finding whose refs all were not run
    is not checked here; one whose run refs held holds (the rest said); exit 0 where everything that ran held."""
    from harness.errors import EXIT_COUNTED, EXIT_NOT_JUDGED, EXIT_OK
    from harness.upstream.prove import holds_words, proofs_exit

    fails = _run(1, {"test_a": f"AssertionError: {FINDING.fails_with[0]}"})
    on_release = [Proof("release", False, None, fails), Proof("git:main", False, None, None, NO_REPO)]
    only_git = [Proof("git:refs/pr/7370", False, None, None, NO_REPO)]
    assert holds_words(on_release, FINDING) == "yes (not run: git:main)"
    assert holds_words(only_git, FINDING) == "not checked here (no verl repository: HARNESS_VERL_REPO)"
    base_passes = [*only_git, Proof("release", True, None, _run(0, {"test_a": ""}))]  # a PR's finding off its head
    assert holds_words(base_passes, FINDING) == (
        "not checked here (no verl repository: HARNESS_VERL_REPO); release passes, as it must"
    )
    findings = {"a": FINDING, "b": FINDING}
    code, lines = proofs_exit({"a": on_release, "b": only_git}, findings)
    assert code == EXIT_OK and "NO" not in " ".join(lines) and not lines[0].startswith("not as the findings say")
    assert lines[-1] == "every ref that ran (1) is as its finding says (the others: not run, above)"
    assert proofs_exit({"b": only_git}, {"b": FINDING})[0] == EXIT_NOT_JUDGED
    passes = [Proof("release", False, None, _run(0, {"test_a": ""})), *only_git]
    assert holds_words(passes, FINDING) == "NO"
    code, lines = proofs_exit({"a": passes}, {"a": FINDING})
    assert code == EXIT_COUNTED and lines[0] == "not as the findings say: a on release (passes: it must fail)"
