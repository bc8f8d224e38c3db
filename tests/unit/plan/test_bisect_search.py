"""plan/bisect_search.py's search on a fake outcome function (a plain function of the commit's index): it finds the
first changed commit with about log2(n) runs, skips the commits that cannot run as git bisect skip does, and compares
signatures (outcome, root error type, failing parameters), not numbers."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.plan.bisect_search import Signature, Step, search, signature_of

CRASH = Signature("error", "RuntimeError", ("lm_head.weight",))
UNREDUCED = Signature("mismatch", None, ("lm_head.weight",))


def commits(n: int) -> list[str]:
    return [f"c{i:03d}" for i in range(n)]


def runner(outcome_of, ran: list[int] | None = None):
    """A Runner over commits named c<index>: outcome_of(index) -> Signature or None (cannot run)."""

    def run(commit: str) -> Step:
        index = int(commit[1:])
        if ran is not None:
            ran.append(index)
        return Step(commit, outcome_of(index), 0.0)

    return run


@pytest.mark.parametrize("change_at", [0, 1, 37, 98, 99])
def test_it_finds_the_first_changed_commit_in_about_log2_runs(change_at):
    ran: list[int] = []
    result = search(commits(100), runner(lambda i: CRASH if i < change_at else UNREDUCED, ran), CRASH, UNREDUCED)
    assert result.first_changed == f"c{change_at:03d}"
    assert result.candidates == (f"c{change_at:03d}",)
    assert result.changed == UNREDUCED
    assert len(ran) <= 7  # ceil(log2(100)); BAD (c099) itself is never run again
    assert 99 not in ran


def test_a_commit_that_cannot_run_is_skipped_and_a_neighbour_tried():
    ran: list[int] = []
    result = search(
        commits(64),
        runner(lambda i: None if i in (31, 32) else (CRASH if i < 40 else UNREDUCED), ran),
        CRASH,
        UNREDUCED,
    )
    assert result.first_changed == "c040"
    assert ran[:2] == [31, 30]  # the middle was tried and skipped, then its nearest neighbour
    skipped = [s for s in result.steps if s.signature is None]
    assert skipped and all(int(s.commit[1:]) in (31, 32) for s in skipped)


def test_skips_next_to_the_change_leave_the_interval_it_may_be():
    result = search(
        commits(20), runner(lambda i: None if 8 <= i <= 10 else (CRASH if i < 9 else UNREDUCED)), CRASH, UNREDUCED
    )
    assert result.first_changed is None
    assert result.candidates == ("c008", "c009", "c010", "c011")


def test_a_third_outcome_in_between_is_a_change_and_is_named():
    other = Signature("error", "KeyError", ())
    result = search(
        commits(50),
        runner(lambda i: CRASH if i < 20 else (other if i < 30 else UNREDUCED)),
        CRASH,
        UNREDUCED,
    )
    assert result.first_changed == "c020"
    assert result.changed == other


def test_good_and_bad_alike_is_refused():
    with pytest.raises(UsageError, match="same outcome"):
        search(commits(5), runner(lambda i: CRASH), CRASH, CRASH)


def record(outcome, *, error_type=None, parameters=None, message="..."):
    kind = "error" if error_type else "gradient"
    verdict = {"cause": {"kind": kind, "parameters": parameters} if parameters is not None else None}
    if error_type:
        verdict["error"] = {"type": "Wrapped", "root_cause": {"type": error_type, "message": message}}
    return {"scenario": "s", "arm": "a", "outcome": outcome, "verdict": verdict}


def test_signature_is_outcome_root_error_and_failing_parameters():
    assert signature_of(record("error", error_type="RuntimeError", parameters=["lm_head.weight"])) == CRASH
    assert signature_of(record("mismatch", parameters=["lm_head.weight"])) == UNREDUCED
    assert signature_of(record("pass")) == Signature("pass")
    # Another root error, or other failing parameters, is another signature.
    assert signature_of(record("error", error_type="KeyError", parameters=["lm_head.weight"])) != CRASH
    assert signature_of(record("mismatch", parameters=["lm_head.weight", "model.embed.weight"])) != UNREDUCED


def test_a_signature_ignores_the_message_and_the_outer_error():
    """bisect compares less than pr (records/failure_signature.py same_ignoring_message): the same root error with
    another message (a line number, a path) or another wrapper is the same outcome; pr's same_failure tells them
    apart."""
    from harness.records.failure_signature import FailureSignature
    from harness.records.results import Record

    one = record("error", error_type="RuntimeError", parameters=["lm_head.weight"], message="at line 10")
    other = record("error", error_type="RuntimeError", parameters=["lm_head.weight"], message="at line 12")
    other["verdict"]["error"]["type"] = "TorchRuntimeError"
    assert signature_of(one) == signature_of(other) == CRASH
    full = [FailureSignature.of(Record.model_validate(r)) for r in (one, other)]
    assert full[0].same_ignoring_message(full[1]) and not full[0].same_failure(full[1])
    # Read from a record of another shape: none, as for a cell that cannot run here.
    assert signature_of({"outcome": "pass"}) is None


def test_a_cell_that_cannot_run_here_has_no_signature():
    assert signature_of(record("skipped")) is None
    assert signature_of(record("error", error_type="ModuleNotFoundError")) is None


def test_a_signature_reads_as_the_step_lines_print_it():
    assert CRASH.words() == "error (RuntimeError; lm_head.weight)"
    assert UNREDUCED.words() == "mismatch (lm_head.weight)"
    assert Signature("pass").words() == "pass"
