"""`harness bench --real-size`'s driver side (commands/bench_head.py): which cells, the memory check that skips a
cell before it starts, and how the ranks' figures become one row per path beside the formula."""

from __future__ import annotations

import pytest

from harness.commands import bench_head
from harness.commands.bench_head import HeadCell, head_cells, memory_estimate, parse_size, rows_of, run_head_bench
from harness.errors import UsageError

GIB = 2**30


def test_real_size_cells_are_the_8b_and_32b_heads_at_each_world_and_precision():
    cells = head_cells(True, [], [2, 4], 256)
    assert {(c.name, c.hidden, c.vocab) for c in cells} == {
        ("Qwen3-VL-8B", 4096, 151936),
        ("Qwen3-VL-32B", 5120, 151936),
    }
    assert {(c.world, c.precision) for c in cells} == {(w, p) for w in (2, 4) for p in ("fp32", "bf16-mixed")}
    # bf16 cells take an eighth of the tokens (a CPU multiplies bf16 about 9x slower than fp32).
    assert {(c.precision, c.tokens) for c in cells} == {("fp32", 256), ("bf16-mixed", 32)}


def test_the_estimate_counts_shards_gathered_weight_gradient_logits_and_the_process():
    cell = HeadCell("8B", 4096, 151936, 2, "fp32", 256)
    s = 4096 * 151936 * 4
    per_rank = 2 * s / 2 + 2 * s + 16 * 256 * 151936 + bench_head.PROCESS_BYTES
    assert memory_estimate(cell) == int(2 * per_rank * bench_head.MEASURED_OVER_FORMULA)
    # 8B at W = 2: the formula's 16.5 GiB, times the measured ratio, about 22.4 GiB: with the 1.1 margin more than a
    # 24 GB host has free (its rank 0 was OOM-killed at 11.17 GiB resident under the formula's estimate alone).
    assert 22 * GIB < memory_estimate(cell) < 23 * GIB
    assert memory_estimate(cell) * bench_head.MARGIN > 23.4 * GIB
    assert memory_estimate(HeadCell("8B", 4096, 151936, 4, "fp32", 256)) > 24 * GIB


def test_a_cell_that_does_not_fit_is_skipped_before_it_starts(monkeypatch, tmp_path):
    cell = HeadCell("8B", 4096, 151936, 2, "fp32", 256)
    monkeypatch.setattr(bench_head, "available_bytes", lambda: 8 * GIB)
    started = []
    monkeypatch.setattr(bench_head, "run_cell", lambda *a: started.append(a))
    said = []
    rows = run_head_bench([cell], tmp_path, 10, say=lambda text, **_: said.append(text))
    assert not started
    assert rows[0]["skipped"].startswith("needs ~22.") and "8.0 GiB available" in rows[0]["skipped"]
    assert "skipped" in said[0] and "estimate 22." in said[0]
    assert "skipped" in bench_head.table(rows)


@pytest.mark.parametrize("text", ["4096", "ax151936", "0x10"])
def test_a_bad_size_is_one_line(text):
    with pytest.raises(UsageError, match="--head-size"):
        parse_size(text)


def test_tokens_equal_to_the_vocabulary_are_refused():
    with pytest.raises(UsageError, match="--head-tokens"):
        head_cells(False, ["64x256"], [2], 256)


def _rank(path_figures: dict) -> dict:
    return {"paths": path_figures}


def _figures(ag, rs, diff_sq, ref_sq=1.0, held=0):
    return {
        "step_s": 1.0,
        "bytes": {"all_gather": ag, "reduce_scatter": rs, "all_reduce": 0},
        "dtypes": ["float"],
        "collective_ms": 5.0,
        "held_fwd_to_bwd": held,
        "held_weight_sized": held,
        "peak_rss_over_step": 10,
        "peak_rss": 100,
        "diff_sq": diff_sq,
        "ref_sq": ref_sq,
    }


def test_rows_judge_the_gradient_over_all_ranks_and_compare_bytes_with_the_formula():
    cell = HeadCell("h", 64, 256, 2, "fp32", 100)
    weight = 64 * 256 * 4
    ranks = [
        _rank(
            {
                "candidate": _figures(weight, weight // 2, 1e-16),
                "unfused": _figures(weight, weight // 2, 1e-16),
                "upstream": _figures(weight // 2, 0, 1.0, held=weight),
            }
        )
        for _ in range(2)
    ]
    rows = {r["path"]: r for r in rows_of(cell, {"ranks": ranks})}
    assert rows["candidate"]["outcome"] == "pass" and rows["unfused"]["outcome"] == "pass"
    assert rows["upstream"]["outcome"] == "mismatch" and rows["upstream"]["grad_rel"] == pytest.approx(1.0)
    assert rows["candidate"]["formula"]["total"] == rows["candidate"]["moved"]
    assert rows["upstream"]["formula"]["held_fwd_to_bwd"] == rows["upstream"]["held_weight_sized"]
    text = bench_head.table(list(rows.values()))
    assert text.count("| = ") == 3


def test_a_path_that_raised_is_an_error_row():
    cell = HeadCell("h", 64, 256, 2, "bf16-mixed", 100)
    ok = _figures(1, 1, 0.0)
    ranks = [
        _rank({"candidate": ok, "unfused": ok, "upstream-cast": ok, "upstream": {"error": "RuntimeError: dtype"}})
        for _ in range(2)
    ]
    rows = {r["path"]: r for r in rows_of(cell, {"ranks": ranks})}
    assert rows["upstream"]["outcome"] == "error" and rows["upstream"]["error"] == "RuntimeError: dtype"
