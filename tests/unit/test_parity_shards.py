"""rank/parity.py cuts the reference gradient to a rank's shard with the public DTensor API only."""

from __future__ import annotations

import subprocess
import sys

from harness.paths import ROOT

# Rank 1 of 2 under torch's fake process group: a real DTensor with a real (uneven) Shard(0) placement, and no
# peer to talk to, so any collective in the cut would be a no-op the test could not see: the check below that
# the shard holds the right rows is what counts.
SCRIPT = """
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
from harness.rank.parity import _local_view
dist.init_process_group("fake", rank=1, world_size=2, store=FakeStore())
full = torch.arange(15.0).reshape(5, 3)
local, chunk = _local_view(distribute_tensor(full, init_device_mesh("cpu", (2,)), [Shard(0)], src_data_rank=None))
assert torch.equal(local, full[3:]), local
assert torch.equal(chunk(full * 2), full[3:] * 2)
plain, same = _local_view(full)
assert plain is full and same(full * 2).equal(full * 2)
print("ok")
"""


def test_a_dtensor_shard_and_the_matching_chunk_of_a_full_tensor():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_parity_uses_no_private_dtensor_module():
    source = (ROOT / "harness" / "rank" / "parity.py").read_text()
    assert "tensor._utils" not in source and "compute_local_shape_and_global_offset" not in source
