"""Real runs (torchrun, gloo, 2 and 4 ranks): the same seed gives the same numbers, bit for bit, and the byte
accounting of the collectives finds the candidate's one all-gather of the lm_head weight, at the size it has."""
from __future__ import annotations

import pytest

from harness.rank.model import hidden_size, load_config, vocab_size


def _gathered_lm_head_bytes(scenario) -> tuple[int, int]:
    config = load_config(scenario.model, scenario.model_overrides)
    world = scenario.ranks
    return world, (world - 1) * vocab_size(config) * hidden_size(config) * 4 // world


# The first run is fsdp2-multigpu x upstream's scenario item's (shared_cell), the second one of this test's own.
@pytest.mark.xdist_group("fsdp2-multigpu")
def test_same_seed_same_numbers_and_lm_head_gather_bytes(shared_cell, run_cell, scenario):
    first, second = shared_cell("fsdp2-multigpu", "upstream"), run_cell("fsdp2-multigpu", "upstream")
    assert first["outcome"] == second["outcome"] == "mismatch"
    assert first["parity"] == second["parity"]  # every number, bit for bit, on CPU
    world, expected = _gathered_lm_head_bytes(scenario("fsdp2-multigpu"))
    for record in (first, second):
        other = record["comm"]["all_gather"]["by_origin"]["other"]
        # The patch's full_tensor(): one all-gather of the fp32 lm_head weight, (W-1)/W of it received per rank.
        assert other == {"count": 1, "bytes": expected}
    assert first["comm"]["all_gather"]["count"] == second["comm"]["all_gather"]["count"]
    assert first["comm"]["reduce_scatter"]["count"] == second["comm"]["reduce_scatter"]["count"] > 0


@pytest.mark.xdist_group("fsdp2-multigpu-4")
def test_lm_head_gather_bytes_at_four_ranks(shared_cell, scenario):
    record = shared_cell("fsdp2-multigpu-4", "upstream")
    world, expected = _gathered_lm_head_bytes(scenario("fsdp2-multigpu-4"))
    assert world == 4
    assert record["comm"]["all_gather"]["by_origin"]["other"] == {"count": 1, "bytes": expected}
