"""The typed head of a record that the history's fast readers take (harness/records/record_head.py): the fields
they need from records of any schema, None where a record's JSON does not fit."""

from __future__ import annotations

import pytest

from harness.records.record_head import record_head, scenario_kind
from harness.records.results import nested_shape

pytestmark = pytest.mark.unit


def test_a_flat_schema_1_record_reads_through_the_nested_shape():
    flat = {"scenario": "s", "arm": "upstream", "outcome": "error", "wall_s": 3, "host": "h", "error": {"type": "X"}}
    head = record_head(nested_shape(flat))
    assert (head.scenario, head.arm, head.outcome, head.wall_s) == ("s", "upstream", "error", 3.0)
    assert head.stamp.host == "h" and head.verdict.error.type == "X"


def test_fields_a_record_predates_are_none_and_a_misfit_record_is_no_head():
    head = record_head({"scenario": "s"})
    assert head.wall_s is None and head.stamp.finished_at is None and head.verdict.error is None
    assert record_head({"scenario": "s", "wall_s": "not a number"}) is None


def test_a_scenarios_kind_ignores_every_other_field():
    kind = scenario_kind({"path": "engine", "ranks": 2, "steps": 3, "compile": True, "model": "tiny-qwen3-vl"})
    assert (kind.path, kind.ranks, kind.steps, kind.compile, kind.forward_only) == ("engine", 2, 3, True, None)


def test_a_records_error_root_and_why_are_read():
    head = record_head(
        {
            "outcome": "error",
            "verdict": {"error": {"type": "ChildFailedError", "root_cause": {"type": "RuntimeError"}}, "why": "w"},
        }
    )
    assert head.verdict.error.root_cause.type == "RuntimeError" and head.verdict.why == "w"
    # A signature is the whole record's (records/failure_signature.py): the head keeps no cause.
    assert not hasattr(record_head({"outcome": "mismatch", "verdict": {"cause": {"kind": "grad"}}}).verdict, "cause")
