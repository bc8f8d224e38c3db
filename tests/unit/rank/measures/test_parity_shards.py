"""rank/measures/parity.py cuts the reference gradient to a rank's shard with the public DTensor API only."""

from __future__ import annotations

from harness.paths import ROOT


def test_a_dtensor_shard_and_the_matching_chunk_of_a_full_tensor(fake_process_group):
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    from harness.rank.measures.parity import local_view

    # Rank 1 of 2: a real (uneven) Shard(0) placement, and no peer to talk to, so any collective in the cut would be a
    # no-op the test could not see: the check that the shard holds the right rows is what counts.
    fake_process_group(1, 2)
    full = torch.arange(15.0).reshape(5, 3)
    mesh = init_device_mesh("cpu", (2,))
    local, chunk = local_view(distribute_tensor(full, mesh, [Shard(0)], src_data_rank=None))
    assert torch.equal(local, full[3:]), local
    assert torch.equal(chunk(full * 2), full[3:] * 2)
    plain, same = local_view(full)
    assert plain is full and same(full * 2).equal(full * 2)


def test_parity_uses_no_private_dtensor_module():
    source = (ROOT / "harness" / "rank" / "measures" / "parity.py").read_text()
    assert "tensor._utils" not in source and "compute_local_shape_and_global_offset" not in source
