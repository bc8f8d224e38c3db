"""The update's oracle is computed on rank 0 and sent to the others (rank/verl_side/engine_path.py _computed_once):
the other ranks never compute it, and every rank ends with rank 0's result."""

from __future__ import annotations

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

    assert engine_path._computed_once(SimpleNamespace(rank=0, world=2), compute) == {"oracle": 1}
    assert engine_path._computed_once(SimpleNamespace(rank=1, world=2), compute) == {"oracle": 1}
    assert len(calls) == 1
    assert engine_path._computed_once(SimpleNamespace(rank=0, world=1), compute) == {"oracle": 1}  # no peers
