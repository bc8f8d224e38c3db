"""The lm_head unit alone (rank/head_bench.py through commands/bench_head.py), at a small size with the real-size
code: real torchrun runs of FSDP2 and the installed verl's FusedLinearForPPO through the one runner, judged against
the fp32 reference. Ctrl-C and rerun of a head cell: tests/distributed/test_forked_cells.py
(_head_bench_interrupted, a command beside a kept parent)."""

from __future__ import annotations

import pytest

from harness.commands.bench_head import PATHS, head_plan, row_of
from harness.plan.head_memory_model import HeadCell
from harness.records.store import ResultsFile, read_records
from harness.run import runner

# The nightly's (make test-nightly): benchmark cells (make bench): the nightly's, beside the scenarios.
pytestmark = pytest.mark.nightly


def _rows(cell: HeadCell, tmp_path, monkeypatch) -> dict:
    monkeypatch.setattr(runner, "ResultsFile", lambda command: ResultsFile(command, tmp_path))
    plan, ways = head_plan([cell], timeout_s=600)
    result = runner.run_plan("test", plan, quiet=True)
    # Each way is a cell of its own, stamped and written like every other: its own ranks (a rank's peak is one
    # way's), its scenario stored whole for a rerun.
    assert read_records(result.path) == result.records
    assert len({r.run_dir for r in result.records}) == len(result.records)
    assert all(r.stamp.scenario_spec.written()["head"]["way"] == way for r, (_, way) in zip(result.records, ways))
    assert [way for _, way in ways] == list(PATHS[cell.precision])
    return {way: row_of(c, way, record) for (c, way), record in zip(ways, result.records)}


def test_at_two_ranks_every_path_moves_what_the_formula_says_and_only_upstream_is_wrong(tmp_path, monkeypatch):
    rows = _rows(HeadCell("tiny", 64, 256, 2, "fp32", 100), tmp_path, monkeypatch)
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


def test_uneven_shards_under_bf16_the_candidate_passes_and_upstream_raises(tmp_path, monkeypatch):
    rows = _rows(HeadCell("tiny", 64, 256, 3, "bf16-mixed", 100), tmp_path, monkeypatch)
    assert rows["candidate"]["outcome"] == "pass" and "c10::BFloat16" in rows["candidate"]["dtypes"]
    assert rows["unfused"]["outcome"] == "pass"
    assert rows["upstream-cast"]["outcome"] == "mismatch"
    assert rows["upstream"]["outcome"] == "error" and "same dtype" in rows["upstream"]["error"]
