"""Uneven shards: the oracle comparison takes each rank's rows exactly as FSDP2 cuts them (torch.chunk sizes,
to_local() without padding), and a gradient cut by rank * rows // W is named as such.

Each rank is this process in torch's fake process group in turn, with FSDP2's own fully_shard on a Linear shaped
like the tiny model's lm_head (256 x 64): the placements and local shards are FSDP2's, not a hand-built DTensor's."""

from __future__ import annotations

import pytest

ROWS, HIDDEN = 256, 64
# (world, mesh shape): W = 3, and W = 6 as HSDP with a shard group of 3 (the (ddp, fsdp) mesh verl builds).
MESHES = [(3, (3,)), (6, (2, 3))]


def _sharded_head(rank: int, world: int, mesh_shape: tuple):
    """(this rank's FSDP2-sharded Linear(64, 256), the full weight it was cut from)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, ROWS, bias=False)
    full = head.weight.detach().clone()
    # torch caches DTensor specs by mesh equality, which compares the mesh's ranks and names but not which rank
    # this process is: one process playing each rank in turn would get the first rank's mesh back. The names
    # carry the rank so that each turn's mesh is its own (a real run has one rank per process).
    names = (f"fsdp{rank}",) if len(mesh_shape) == 1 else (f"ddp{rank}", f"fsdp{rank}")
    fully_shard(head, mesh=init_device_mesh("cpu", mesh_shape, mesh_dim_names=names))
    return head, full


def _each_rank(world, mesh_shape, per_rank):
    """per_rank(rank, head, full) on every rank of the world in turn; the results in rank order."""
    import torch.distributed as dist

    out = []
    for rank in range(world):
        try:
            out.append(per_rank(rank, *_sharded_head(rank, world, mesh_shape)))
        finally:
            dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world, mesh_shape", MESHES)
def test_each_rank_compares_the_unpadded_rows_fsdp2_holds(world, mesh_shape):
    import torch

    from harness.rank.measures.parity import local_view

    def rows_of(rank, head, full):
        local, chunk = local_view(head.weight)
        # FSDP2's local shard is torch.chunk's piece, without the padding FSDP adds to the last one for its
        # collectives; the reference is cut to the very same rows.
        assert torch.equal(local, torch.chunk(full, 3)[rank % 3])
        assert torch.equal(chunk(full), local)
        return local.shape[0]

    rows = _each_rank(world, mesh_shape, rows_of)
    assert rows == [86, 86, 84] * (world // 3)
    # Over one shard group the rows are the whole weight once: nothing padded, nothing twice.
    assert sum(rows[:3]) == ROWS


@pytest.mark.parametrize("world, mesh_shape", MESHES)
def test_a_right_gradient_is_exact_and_an_even_cut_is_named(world, mesh_shape):
    import torch
    from torch.distributed.tensor import DTensor

    from harness.judge_cell.diagnosis import grad_diagnosis
    from harness.judge_cell.shard_stats import merge_ranks
    from harness.rank.measures.parity import compare_gradients, even_cut
    from harness.rank.oracle.reference import ReferenceGrads
    from harness.records.rank_measures import GradShard

    reference = torch.randn(ROWS, HIDDEN, generator=torch.Generator().manual_seed(1))

    def shards(cut_evenly: bool):
        def one_rank(rank, head, full):
            local, chunk = _local_view_of(head.weight)
            held = local.shape[0]
            # What a hand-written slice keeps: rows from coordinate * rows // 3 on, as many as the rank holds.
            start = (rank % 3) * ROWS // 3 if cut_evenly else None
            grad = reference[start : start + held] if cut_evenly else chunk(reference)
            w = head.weight
            w.grad = DTensor.from_local(
                grad.clone(), w.device_mesh, w.placements, shape=w.shape, stride=w.stride(), run_check=False
            )
            if cut_evenly:
                assert torch.equal(even_cut(w.grad, reference), grad)
            ref = ReferenceGrads({"weight": reference}, with_alternatives=True)
            return {name: GradShard(**entry) for name, entry in compare_gradients(head.named_parameters(), ref).items()}

        return _each_rank(world, mesh_shape, one_rank)

    right = merge_ranks(shards(cut_evenly=False))["weight"]
    # Every rank's unpadded rows, summed: the whole weight once per replica, and not one padding element.
    assert right.numel == ROWS * HIDDEN * (world // 3)
    assert right.diff_sq == 0.0
    assert grad_diagnosis({"weight": right}, "weight", world, "fp32").text == "the right gradient"

    shifted = merge_ranks(shards(cut_evenly=True))
    sums = shifted["weight"]
    assert sums.numel == right.numel and sums.diff_sq > 0
    diagnosis = grad_diagnosis(shifted, "weight", world, "fp32")
    assert diagnosis.pattern == "even_cut" and diagnosis.residual < 1e-6, diagnosis
    assert "shifted rows" in diagnosis.text and "torch.chunk" in diagnosis.text


def _local_view_of(tensor):
    from harness.rank.measures.parity import local_view

    return local_view(tensor)


def test_an_even_world_has_no_even_cut_alternative(fake_process_group):
    """Where the world divides the rows, rank * rows // W is FSDP2's own cut: no alternative to tell apart."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    from harness.rank.measures.parity import even_cut

    fake_process_group(1, 4)
    full = torch.arange(float(ROWS * 2)).reshape(ROWS, 2)
    sharded = distribute_tensor(full, init_device_mesh("cpu", (4,)), [Shard(0)], src_data_rank=None)
    assert even_cut(sharded, full) is None
    assert even_cut(full, full) is None
