"""The engine path's oracle is computed on rank 0 and sent to the others (rank/verl_side/engine_path.py
_computed_once): the other ranks never compute it, and every rank ends with rank 0's result; rank 0 takes it from an
earlier cell of the same command (_of_this_command) where the scenario, device and world size are the same."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.rank.verl_side import engine_path

pytestmark = pytest.mark.unit


def test_only_rank_zero_computes_and_every_rank_gets_its_result(monkeypatch):
    import torch.distributed as dist

    sent = []

    def broadcast(box, src):
        assert src == 0
        if box[0] is None:
            box[0] = sent[0]  # what rank 0 sent
        else:
            sent.append(box[0])

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    calls = []

    def compute():
        calls.append(1)
        return {"oracle": 1}

    monkeypatch.setattr(engine_path, "_of_this_command", lambda r, kind, compute: compute())
    assert engine_path._computed_once(SimpleNamespace(rank=0, world=2), "sample", compute) == {"oracle": 1}
    assert engine_path._computed_once(SimpleNamespace(rank=1, world=2), "sample", compute) == {"oracle": 1}
    assert len(calls) == 1
    assert engine_path._computed_once(SimpleNamespace(rank=0, world=1), "sample", compute) == {"oracle": 1}  # no peers


def _cell(batch: Path, name: str, scenario: dict, world: int = 2, device: str = "cpu"):
    out_dir = batch / name
    out_dir.mkdir(parents=True)
    return SimpleNamespace(spec={"scenario": scenario, "device": device}, out_dir=out_dir, world=world, out={})


def test_the_cells_of_one_command_share_a_scenarios_oracle_and_say_whose_it_is(tmp_path):
    import torch

    calls = []

    def compute():
        calls.append(1)
        return {"log_probs": torch.arange(3.0)}

    scenario = {"name": "engine-sp2", "seed": 0}
    first = _cell(tmp_path, "engine-sp2__none", scenario)
    assert torch.equal(engine_path._of_this_command(first, "sample", compute)["log_probs"], torch.arange(3.0))
    assert first.out["oracle_from"] == "computed"
    second = _cell(tmp_path, "engine-sp2__upstream", scenario)
    assert torch.equal(engine_path._of_this_command(second, "sample", compute)["log_probs"], torch.arange(3.0))
    assert second.out["oracle_from"] == "computed by engine-sp2__none" and len(calls) == 1
    # Another scenario, world size, device or kind of oracle, or another command's directory: computed again.
    others = [
        (_cell(tmp_path, "a", {**scenario, "seed": 1}), "sample"),
        (_cell(tmp_path, "b", scenario, world=4), "sample"),
        (_cell(tmp_path, "c", scenario, device="cuda"), "sample"),
        (_cell(tmp_path, "d", scenario), "update"),
        (_cell(tmp_path / "another-command", "e", scenario), "sample"),
    ]
    for cell, kind in others:
        engine_path._of_this_command(cell, kind, compute)
        assert cell.out["oracle_from"] == "computed"
    assert len(calls) == 1 + len(others)
    assert not list(tmp_path.glob("*.partial"))
