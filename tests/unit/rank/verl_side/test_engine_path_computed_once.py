"""The engine path's oracle is computed on rank 0 and sent to the others (rank/verl_side/engine_path.py
_computed_once): the other ranks never compute it, and every rank ends with rank 0's result, bit for bit; rank 0 takes
it from an earlier cell of the same command (_of_this_command) where the scenario, device and world size are the
same."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.rank.verl_side import engine_path
from harness.records.results import RankResult

pytestmark = pytest.mark.unit


def _cell(batch: Path, name: str, scenario: dict, world: int = 2, device: str = "cpu", rank: int = 0):
    out_dir = batch / name
    out_dir.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(
        launch={"scenario": scenario, "device": device},
        out_dir=out_dir,
        world=world,
        rank=rank,
        out=RankResult(rank=rank, world_size=world, device=device),
    )


def test_only_rank_zero_computes_and_every_rank_gets_its_result_bit_for_bit(monkeypatch, tmp_path):
    import torch
    import torch.distributed as dist

    sent = []

    def broadcast(box, src):
        assert src == 0
        if box[0] is None:
            box[0] = sent[0]  # what rank 0 sent
        else:
            assert isinstance(box[0][0], bytes)  # the file's bytes, not the objects
            sent.append(box[0])

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    calls = []
    # Values whose last bits a lossy copy would change, a tensor twice (one storage), and a plain number.
    oracle = {"grads": torch.randn(7, 5, generator=torch.Generator().manual_seed(0)) / 3, "n": 3}
    oracle["same"] = oracle["grads"]

    def compute():
        calls.append(1)
        return oracle

    zero, one = (_cell(tmp_path, "engine-sp2__none", {"name": "engine-sp2"}, rank=k) for k in (0, 1))
    got = [engine_path._computed_once(r, "sample", compute) for r in (zero, one)]
    assert len(calls) == 1
    for value in got:
        assert torch.equal(value["grads"], oracle["grads"]) and value["n"] == 3
        assert value["same"].untyped_storage().data_ptr() == value["grads"].untyped_storage().data_ptr()
    assert zero.out.oracle_from == "computed" and one.out.oracle_from is None
    alone = _cell(tmp_path / "another-command", "x", {"name": "engine-sp2"}, world=1)
    assert torch.equal(engine_path._computed_once(alone, "sample", compute)["grads"], oracle["grads"])  # no peers
    assert len(calls) == 2


def test_the_cells_of_one_command_share_a_scenarios_oracle_and_say_whose_it_is(tmp_path):
    import torch

    calls = []

    def compute():
        calls.append(1)
        return {"log_probs": torch.arange(3.0)}

    # One rank (no peers to send to), so the cells below go through _computed_once as a cell's rank 0 does.
    scenario = {"name": "engine-sp2", "seed": 0}
    first = _cell(tmp_path, "engine-sp2__none", scenario, world=1)
    second = _cell(tmp_path, "engine-sp2__upstream", scenario, world=1)
    for cell in (first, second):
        assert torch.equal(engine_path._computed_once(cell, "sample", compute)["log_probs"], torch.arange(3.0))
    assert first.out.oracle_from == "computed"
    assert second.out.oracle_from == "computed by engine-sp2__none" and len(calls) == 1
    # Another scenario, world size, device or kind of oracle, or another command's directory: computed again.
    others = [
        (_cell(tmp_path, "a", {**scenario, "seed": 1}, world=1), "sample"),
        (_cell(tmp_path, "b", scenario, world=4), "sample"),
        (_cell(tmp_path, "c", scenario, world=1, device="cuda"), "sample"),
        (_cell(tmp_path, "d", scenario, world=1), "update"),
        (_cell(tmp_path / "another-command", "e", scenario, world=1), "sample"),
    ]
    for cell, kind in others:
        data, computed_here = engine_path._of_this_command(cell, kind, compute)
        assert computed_here and isinstance(data, bytes)
    assert len(calls) == 1 + len(others)
    assert not list(tmp_path.glob("*.partial"))
