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


# Its two cells are also test_wrong_patches.py's response-mask-as-nested (scenario, then passes_in): one verify run
# (verified_once) in one process serves both.
@pytest.mark.xdist_group("verify-response-mask-as-nested")
def test_verify_names_the_trainer_whose_batch_a_change_fails_under(verified_once):
    """The engine reading response_mask one row per sample, verified as a user does on one configuration under both
    trainers (two cells, --alone): its closing block and verdict line name the ray trainer's batch as the one it
    fails under, and the why names the samples it got wrong."""
    from pathlib import Path

    fixture = Path(__file__).parent.parent / "fixtures" / "wrong_patches" / "response-mask-as-nested.diff"
    done, _ = verified_once(f"fsdp2-lmhead-forward+{fixture}", "fsdp2-multigpu", "engine-v1")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    name = "fsdp2-lmhead-forward+response-mask-as-nested"
    at = lines.index(f"{name}'s outcome differs between verl's trainers (the batch each hands the engine):")
    assert lines[at + 1] == "  fsdp2-multigpu (trainer: ray): mismatch; engine-v1 (trainer: v1): pass", lines[at:]
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert verdict.startswith(f"verdict: {name} FAILS in 1 of 2 scenario(s)") and "fails under ray's batch" in verdict
    assert "exactly the responses shorter than the batch's longest (11 tokens)" in " ".join(done.stdout.split())
