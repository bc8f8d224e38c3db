"""Real runs (torchrun, gloo, 2 and 4 ranks): the same seed gives the same numbers, bit for bit, and the byte
accounting of the collectives finds the candidate's one all-gather of the lm_head weight, at the size it has."""

from __future__ import annotations

import pytest

from harness.rank.oracle.model import hidden_size, load_config, vocab_size


def _gathered_lm_head_bytes(scenario) -> tuple[int, int]:
    config = load_config(scenario.model, scenario.model_overrides)
    world = scenario.ranks
    return world, (world - 1) * vocab_size(config) * hidden_size(config) * 4 // world


# Two launches of fsdp2-multigpu x upstream that make test runs anyway, each with its own oracle: the scenario
# item's (shared_cell, the runner in this process) and a user's `verify --scenario fsdp2-multigpu --alone`
# (upstream_verified: a fresh interpreter, test_verify_rerun_report.py checks what it prints), read in one process.
@pytest.mark.xdist_group("fsdp2-multigpu")
def test_same_seed_same_numbers_and_lm_head_gather_bytes(shared_cell, upstream_verified, scenario):
    done, second = upstream_verified
    assert second is not None, done.stdout[-3000:] + done.stderr[-3000:]
    first = shared_cell("fsdp2-multigpu", "upstream")
    assert (first.scenario, first.arm) == (second.scenario, second.arm) == ("fsdp2-multigpu", "upstream")
    assert first.run_dir != second.run_dir and second.stamp.reused_from is None  # two launches
    assert first.outcome == second.outcome == "mismatch"
    assert first.measures.parity == second.measures.parity  # every number, bit for bit, on CPU
    world, expected = _gathered_lm_head_bytes(scenario("fsdp2-multigpu"))
    for record in (first, second):
        other = record.measures.comm.all_gather.by_origin["other"].written()
        # The patch's full_tensor(): one all-gather of the fp32 lm_head weight, (W-1)/W of it received per rank.
        assert other == {"count": 1, "bytes": expected}
    assert first.measures.comm.all_gather.count == second.measures.comm.all_gather.count
    assert first.measures.comm.reduce_scatter.count == second.measures.comm.reduce_scatter.count > 0


@pytest.mark.nightly  # fsdp2-multigpu-4 is the nightly's
@pytest.mark.xdist_group("fsdp2-multigpu-4")
def test_lm_head_gather_bytes_at_four_ranks(shared_cell, scenario):
    record = shared_cell("fsdp2-multigpu-4", "upstream")
    world, expected = _gathered_lm_head_bytes(scenario("fsdp2-multigpu-4"))
    assert world == 4
    assert record.measures.comm.all_gather.by_origin["other"].written() == {"count": 1, "bytes": expected}
    assert record.measures.comm.other_bytes() == expected  # the headline figure every table shows


@pytest.mark.xdist_group("fsdp2-multigpu")
def test_records_keep_the_warnings_a_run_raised(shared_cell):
    """The candidate's forward reads lm_head through its FSDP unit, whose fused head returns reshaped views: torch
    warns that an in-place op on them would skip FSDP's pre-backward. Evidence, kept in the record (no filter)."""
    from harness.paths import ROOT

    view_warning = "FSDP2-wrapped module (FSDPLinear) returned a view tensor"
    candidate = shared_cell("fsdp2-multigpu", "fsdp2-lmhead-forward")
    upstream = shared_cell("fsdp2-multigpu", "upstream")
    found = [w for w in candidate.warnings if w.message.startswith(view_warning)]
    assert len(found) == 1, candidate.warnings
    assert found[0].category == "UserWarning" and found[0].ranks == [0, 1] and found[0].count >= 2
    assert "/fsdp/_fully_shard/" in found[0].where and found[0].where.rsplit(":", 1)[1].isdigit()
    # upstream bypasses lm_head's unit (its forward never runs), so this warning is the candidate's own
    assert not [w for w in upstream.warnings if w.message.startswith(view_warning)]
    for record in (candidate, upstream):  # one log per rank beside torchrun.log
        assert sorted(record.rank_logs) == ["0", "1"]
        assert all((ROOT / path).is_file() for paths in record.rank_logs.values() for path in paths)
