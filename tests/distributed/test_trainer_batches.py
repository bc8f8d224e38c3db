"""Each of verl's trainers hands the engine its own batch layout (scenario field `trainer`), recorded with every
response length: the scenarios of the default set under each trainer have unequal lengths, without which the two
layouts would be one. The records are the shipped cells' (shared_cell: the scenario items' own runs)."""

from __future__ import annotations

import pytest


def _unequal(layout: dict) -> bool:
    return len(set(layout["response_lengths"])) > 1


@pytest.mark.xdist_group("engine-v1")
def test_the_v1_trainers_batch_is_nested_with_unequal_lengths(shared_cell):
    record = shared_cell("engine-v1", "fsdp2-lmhead-forward")
    layout = record.measures.batch_layout
    assert layout["trainer"] == "v1" and layout["response_mask"] == "nested" and _unequal(layout), layout
    assert record.outcome == "pass", record.verdict.why  # the candidate passes under the v1 trainer's batch


@pytest.mark.xdist_group("engine-update-v1")
def test_the_v1_trainers_update_batch_is_nested_with_unequal_lengths(shared_cell):
    record = shared_cell("engine-update-v1", "fsdp2-lmhead-forward")
    layout = record.measures.batch_layout
    assert layout["trainer"] == "v1" and layout["response_mask"] == "nested" and _unequal(layout), layout
    assert record.outcome == "pass", record.verdict.why


@pytest.mark.xdist_group("fsdp2-multigpu")
def test_the_ray_trainers_batch_is_dense_to_the_longest_response(shared_cell):
    record = shared_cell("fsdp2-multigpu", "fsdp2-lmhead-forward")
    layout = record.measures.batch_layout
    lengths = layout["response_lengths"]
    assert layout["trainer"] == "ray" and _unequal(layout), layout
    assert layout["response_mask"] == f"dense {len(lengths)}x{max(lengths)}"
    assert record.outcome == "pass", record.verdict.why
