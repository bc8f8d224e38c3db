"""The lm_head unit alone (rank/head_bench.py through commands/bench_head.py), at a small size with the real-size
code: real torchrun runs of FSDP2 and the installed verl's FusedLinearForPPO, judged against the fp32 reference."""

from __future__ import annotations

import pytest

from harness.commands.bench_head import PATHS, HeadCell, rows_of, run_cell
from harness.paths import CACHE_DIR

# The nightly's (make test-nightly): benchmark cells (make bench): the nightly's, beside the scenarios.
pytestmark = pytest.mark.nightly


def _rows(cell: HeadCell) -> dict:
    result = run_cell(cell, CACHE_DIR / "test-bench-head" / f"w{cell.world}-{cell.precision}", timeout_s=600)
    # Each path ran in processes of its own: no rank process ran two paths (a rank's peak is one path's).
    for rank in result["ranks"]:
        pids = [figures.get("pid") for figures in rank["paths"].values()]
        assert len(set(pids)) == len(PATHS[cell.precision]), rank
    return {r["path"]: r for r in rows_of(cell, result)}


def test_at_two_ranks_every_path_moves_what_the_formula_says_and_only_upstream_is_wrong():
    rows = _rows(HeadCell("tiny", 64, 256, 2, "fp32", 100))
    weight = 256 * 64 * 4
    for path in ("candidate", "unfused"):
        assert rows[path]["outcome"] == "pass", rows[path]
        # FSDP's path: the weight gathered in forward and again in backward, the gradient reduce-scattered.
        assert (rows[path]["all_gather"], rows[path]["reduce_scatter"]) == (weight, weight // 2)
        assert rows[path]["held_weight_sized"] == 0
    up = rows["upstream"]
    assert up["outcome"] == "mismatch" and up["grad_rel"] == pytest.approx(1.0, abs=0.1)
    assert (up["all_gather"], up["reduce_scatter"], up["held_weight_sized"]) == (weight // 2, 0, weight)
    assert all(r["moved"] == r["formula"]["total"] for r in rows.values())


def test_uneven_shards_under_bf16_the_candidate_passes_and_upstream_raises():
    rows = _rows(HeadCell("tiny", 64, 256, 3, "bf16-mixed", 100))
    assert rows["candidate"]["outcome"] == "pass" and "c10::BFloat16" in rows["candidate"]["dtypes"]
    assert rows["unfused"]["outcome"] == "pass"
    assert rows["upstream-cast"]["outcome"] == "mismatch"
    assert rows["upstream"]["outcome"] == "error" and "same dtype" in rows["upstream"]["error"]
