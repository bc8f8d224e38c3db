"""One vocabulary of failure kinds (records/results.py FailureKind, GradientOf): the words records written before it
used load as today's members, and every kind has its words (render/cause_words.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.records.results import Failure, FailureKind, GradientOf, Record
from harness.render.cause_words import KIND_WORDS, cause_words

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "old, of, words",
    [
        # a one-step cell's cause (judge_cell/cell_cause.py wrote "grad")
        ("grad", GradientOf.STEP, "grad lm_head.weight: this rank's gradient only, not reduced across ranks"),
        # an update's gradient before the clip (judge_cell/update_verdict.py wrote "gradient")
        ("gradient", GradientOf.UPDATE, "lm_head.weight's gradient wrong before the clip"),
        # the lm_head unit alone (judge_cell/head_step.py wrote "head gradient")
        ("head gradient", GradientOf.HEAD_UNIT, "the lm_head unit's lm_head.weight gradient wrong"),
    ],
)
def test_an_older_records_gradient_loads_as_the_one_kind_with_what_it_is_the_gradient_of(old, of, words):
    subject = "unreduced" if of == GradientOf.STEP else "lm_head.weight"
    cause = {"kind": old, "subject": subject, "parameters": ["lm_head.weight"], "words": "w"}
    record = Record.model_validate(
        {"schema_version": 4, "scenario": "s", "arm": "a", "outcome": "mismatch", "verdict": {"cause": cause}}
    )
    loaded = record.verdict.cause
    assert (loaded.kind, loaded.gradient_of, loaded.subject) == (FailureKind.GRADIENT, of, subject)
    assert cause_words([loaded]) == words  # the words the old kind had
    assert record.verdict.written()["cause"]["kind"] == "gradient"  # written back in today's word


def test_the_kinds_every_reader_kept_load_unchanged_and_an_unknown_one_is_refused():
    for kind in ("error", "hang", "log-probs", "residency", "mismatch", "metric", "update", "weights", "entropy"):
        assert Failure.model_validate({"kind": kind}).kind == FailureKind(kind)
    assert Failure.model_validate({"kind": "gradient", "gradient_of": "one step"}).gradient_of == GradientOf.STEP
    with pytest.raises(ValidationError):
        Failure.model_validate({"kind": "grads"})


def test_gradients_of_different_cells_are_different_causes_of_one_kind():
    """One word for the concept; verify still tells a one-step class from an update's or the head unit's parameter."""
    step = Failure(kind=FailureKind.GRADIENT, gradient_of=GradientOf.STEP, subject="lm_head.weight")
    head = Failure(kind=FailureKind.GRADIENT, gradient_of=GradientOf.HEAD_UNIT, subject="lm_head.weight")
    assert step.kind == head.kind and step.key() != head.key()


def test_every_kind_has_its_words():
    assert set(KIND_WORDS) == set(FailureKind)


def test_a_verdicts_failures_are_typed_and_an_older_records_lines_load_as_their_words():
    """Verdict.failures holds the judge's Failures; a record from before held their words alone (list[str]), which
    load as failures of kind WHY with those words, in order."""
    old = {"scenario": "s", "arm": "a", "outcome": "mismatch", "failures": ["grad w: relative error 1 > 0.0001", "x"]}
    record = Record.model_validate(old)
    assert record.verdict.failure_words() == old["failures"]
    assert [(f.kind, f.subject) for f in record.verdict.failures] == [(FailureKind.WHY, w) for w in old["failures"]]
    typed = Failure(kind=FailureKind.ENTROPY, value=0.5, bound=1e-4, words="entropy differs by 0.5 > 0.0001")
    record.verdict.failures = [typed]
    written = record.written()["verdict"]["failures"]
    assert written == [{"kind": "entropy", "value": 0.5, "bound": 1e-4, "words": "entropy differs by 0.5 > 0.0001"}]
    assert Record.model_validate(record.written()).verdict.failures == [typed]


def test_a_records_written_data_is_plain_and_crosses_to_pytests_controller():
    """A kind is written as its plain word, not the enum: make test's workers send each scenario item's record to
    the controller (conftest.py user_properties) through execnet, which refuses an enum (a fresh-clone CI stopped
    on `can't serialize <enum 'FailureKind'>` at its first scenario item)."""
    from execnet.gateway_base import dumps_internal, loads_internal

    record = Record(scenario="s", arm="a", outcome="mismatch")
    cause = Failure(kind=FailureKind.GRADIENT, gradient_of=GradientOf.STEP, subject="x", words="w")
    record.verdict.failures, record.verdict.cause = [cause], cause
    written = record.written()
    assert type(written["verdict"]["cause"]["kind"]) is str and type(written["verdict"]["cause"]["gradient_of"]) is str
    assert loads_internal(dumps_internal(written)) == written
    assert Record.model_validate(written).verdict.cause == cause
