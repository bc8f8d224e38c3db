"""One reading of "the same failure" (records/failure_signature.py): what each comparison reads, and how the
commands' comparisons relate: pr's same_failure implies bisect's same_ignoring_message, which implies the recipe's and
rerun's same_outcome (docs/PR.md "Which command compares what")."""

from __future__ import annotations

import itertools

import pytest

from harness.records.failure_signature import FailureSignature, portable
from harness.records.results import FAILING_OUTCOMES

UNREDUCED = {"kind": "gradient", "gradient_of": "one step", "subject": "unreduced", "parameters": ["lm_head.weight"]}
SUM = {"kind": "gradient", "gradient_of": "one step", "subject": "sum over ranks", "parameters": ["lm_head.weight"]}


def _crash(record, message: str, outer: str = "ChildFailedError", root: str = "RuntimeError"):
    error = {"type": outer, "message": "failed", "root_cause": {"type": root, "message": message}}
    return record(outcome="error", error=error, parity=None)


def _mismatch(record, params: dict, cause: dict):
    parity = {"grads_over_tolerance": params, "missing_grads": []}
    return record(outcome="mismatch", parity=parity, cause=cause)


def _signature(r) -> FailureSignature:
    return FailureSignature.of(r)


def test_an_error_is_its_types_and_its_root_message_without_paths(record):
    here = _crash(record, "bad index in /work/a/.cache/arm-1/verl/models/x.py at 0x7f00aa")
    there = _crash(record, "bad index in /tmp/other/verl/models/x.py at 0x55bb01")
    assert portable("/work/a/verl/models/x.py") == "verl/models/x.py"
    assert _signature(here).same_failure(_signature(there))
    # Another root message, or another outer type: another failure for pr; the same for bisect.
    for other in (_crash(record, "another message"), _crash(record, here.verdict.error.root_message(), outer="Other")):
        assert not _signature(here).same_failure(_signature(other))
        assert _signature(here).same_ignoring_message(_signature(other))
    # Another root type: another outcome even for bisect.
    assert not _signature(here).same_ignoring_message(_signature(_crash(record, "x", root="KeyError")))


def test_a_mismatch_is_its_failing_parameters_and_its_cause(record):
    base = _mismatch(record, {"lm_head.weight": 1.0}, UNREDUCED)
    assert _signature(base).parameters == ("lm_head.weight",)
    assert _signature(base).same_failure(_signature(_mismatch(record, {"lm_head.weight": 0.7}, UNREDUCED)))
    # The same parameter wrong another way: another failure for pr, the same outcome for bisect (no cause read).
    twice = _mismatch(record, {"lm_head.weight": 1.0}, SUM)
    assert not _signature(base).same_failure(_signature(twice)) and _signature(base).same_ignoring_message(
        _signature(twice)
    )
    # Another parameter too: another failure for both.
    more = _mismatch(record, {"lm_head.weight": 1.0, "model.norm.weight": 0.2}, UNREDUCED)
    assert not _signature(base).same_ignoring_message(_signature(more))


def test_a_pass_is_never_the_same_failure(record):
    passed = _signature(record(outcome="pass"))
    assert not passed.failing and not passed.same_failure(passed) and passed.same_outcome(passed)
    assert passed.words() == "pass"
    assert {"error", "mismatch", "hang"} == FAILING_OUTCOMES


@pytest.fixture
def signatures(record) -> list[FailureSignature]:
    """Records that differ in each part a comparison may read."""
    return [
        _signature(r)
        for r in (
            record(outcome="pass"),
            _crash(record, "m1"),
            _crash(record, "m2"),
            _crash(record, "m1", outer="Other"),
            _crash(record, "m1", root="KeyError"),
            _mismatch(record, {"lm_head.weight": 1.0}, UNREDUCED),
            _mismatch(record, {"lm_head.weight": 1.0}, SUM),
            _mismatch(record, {"lm_head.weight": 1.0, "a": 1.0}, UNREDUCED),
        )
    ]


def test_the_comparisons_nest_pr_then_bisect_then_the_outcome(signatures):
    for a, b in itertools.product(signatures, repeat=2):
        if a.same_failure(b):
            assert a.same_ignoring_message(b), (a, b)
        if a.same_ignoring_message(b):
            assert a.same_outcome(b), (a, b)
    # Each is strictly less: a pair the next tells apart and the one before does not.
    assert any(a.same_ignoring_message(b) and not a.same_failure(b) for a, b in itertools.product(signatures, repeat=2))
    assert any(a.same_outcome(b) and not a.same_ignoring_message(b) for a, b in itertools.product(signatures, repeat=2))
