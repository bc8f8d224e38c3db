"""`harness bench --real-size`'s driver side: which cells (commands/bench_head.py), the memory model and the check
that skips a cell before it starts (plan/head_memory_model.py), how the ranks' figures are judged into a record
(judge_cell/head_step.py) and the record into one row per way beside the formula (render/head_table.py)."""

from __future__ import annotations

import pytest

from harness.commands.bench_head import head_cells, head_plan, head_scenario, parse_size, row_of
from harness.errors import UsageError
from harness.judge_cell.verdict import judge
from harness.launch import launch as launch_mod
from harness.launch.launch import RawRun
from harness.plan import head_memory_model as bench_head
from harness.plan.head_memory_model import DEFAULT_TOKENS, HeadCell, memory_estimate, path_peak, tokens_for
from harness.records.store import ResultsFile
from harness.render.head_table import head_table
from harness.run import runner

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
    # --head-precision: one precision alone (the real-size cells can be run one at a time).
    only = head_cells(True, [], [2], 256, ["fp32"])
    assert [(c.name, c.world, c.precision) for c in only] == [("Qwen3-VL-8B", 2, "fp32"), ("Qwen3-VL-32B", 2, "fp32")]


@pytest.mark.parametrize("precision", bench_head.PRECISIONS)
def test_the_estimate_is_the_measured_line_and_never_below_a_measured_peak(precision):
    tokens = tokens_for(precision, DEFAULT_TOKENS)
    measured = bench_head.MEASURED_PEAK_MIB[precision]
    assert set(measured) == set(bench_head.PATHS[precision])  # every path a cell launches, upstream's raise included
    for path, points in measured.items():
        assert len(points) >= 3, path
        for i, (hidden, mib) in enumerate(points):
            estimate = path_peak(HeadCell("h", hidden, 151936, 2, precision, tokens), path)
            if i >= len(points) - 2:  # the two largest sizes draw the line real sizes are estimated on
                assert estimate == pytest.approx(mib * 2**20, rel=1e-9), (path, hidden)
            else:  # below them the estimate never says less than was measured
                assert estimate >= mib * 2**20, (path, hidden)


def test_a_wider_world_holds_a_smaller_shard_and_other_tokens_move_the_token_sized_term():
    s = 4096 * 151936 * 4
    two, four = (HeadCell("8B", 4096, 151936, w, "fp32", 256) for w in (2, 4))
    for path in ("candidate", "unfused", "upstream"):
        assert path_peak(two, path) - path_peak(four, path) == pytest.approx(s / 2 - s / 4)
    # The fused head's temporaries stop growing at one chunk (512 rows); the unfused path's logits do not.
    many = HeadCell("8B", 4096, 151936, 2, "fp32", 4096)
    assert path_peak(many, "candidate") - path_peak(two, "candidate") == pytest.approx(
        bench_head.LOGITS_COPIES["candidate"] * 4 * 151936 * (512 - 256)
    )
    assert path_peak(many, "unfused") - path_peak(two, "unfused") == pytest.approx(
        bench_head.LOGITS_COPIES["unfused"] * 4 * 151936 * (4096 - 256)
    )
    assert memory_estimate(two) == int(2 * max(path_peak(two, p) for p in bench_head.PATHS["fp32"]))
    # Beyond a path's largest measured size its line is raised by what the 8B candidate launch measured over its line.
    (h0, m0), (h1, m1) = bench_head.MEASURED_PEAK_MIB["fp32"]["unfused"][-2:]
    line_at_8b = (m0 + (m1 - m0) * (4096 - h0) / (h1 - h0)) * 2**20
    assert path_peak(two, "unfused") == pytest.approx(line_at_8b * bench_head.BEYOND_MEASURED)
    # Fewer tokens than measured: the measured figure stands (the token-sized copies were counted at a small head).
    few = HeadCell("8B", 4096, 151936, 2, "fp32", 64)
    assert path_peak(few, "candidate") == path_peak(two, "candidate")


def test_a_way_that_does_not_fit_is_skipped_right_before_its_launch(monkeypatch, tmp_path):
    cell = HeadCell("8B", 4096, 151936, 2, "fp32", 256)
    monkeypatch.setattr(bench_head, "available_bytes", lambda: 8 * GIB)
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: pytest.fail("launched a way that does not fit"))
    monkeypatch.setattr(runner, "ResultsFile", lambda command: ResultsFile(command, tmp_path))
    plan, ways = head_plan([cell], timeout_s=10)
    result = runner.run_plan("test", plan, quiet=True)
    assert [r.outcome for r in result.records] == ["skipped"] * 3
    candidate = memory_estimate(cell, "candidate") / GIB
    assert (
        result.records[0].verdict.skipped_reason
        == f"needs ~{candidate:.1f} GiB, {candidate * 1.1:.1f} with the x1.1 margin; 8.0 GiB available"
    )
    rows = [row_of(c, way, record) for (c, way), record in zip(ways, result.records)]
    assert [r["path"] for r in rows] == ["candidate", "unfused", "upstream"]
    assert head_table(rows).count("| skipped |") == 3


def test_the_memory_is_read_again_before_each_way(monkeypatch):
    cell = HeadCell("h", 64, 256, 2, "fp32", 100)
    free = iter([8 * GIB, 0, 8 * GIB])
    monkeypatch.setattr(bench_head, "available_bytes", lambda: next(free))
    scenarios = [head_scenario(cell, way, 10) for way in bench_head.PATHS["fp32"]]
    shorts = [bench_head.launch_short(s) for s in scenarios]
    assert shorts[0] is None and shorts[2] is None and shorts[1].endswith("0.0 GiB available")


def test_a_head_cell_is_a_scenario_that_stores_its_size_and_way():
    from harness.inputs.scenario import Scenario

    s = head_scenario(HeadCell("h", 64, 256, 3, "bf16-mixed", 12), "upstream-cast", 60)
    assert (s.name, s.path, s.ranks, s.precision, s.timeout_s) == (
        "head-64x256-w3-bf16-mixed-upstream-cast",
        "head",
        3,
        "bf16-mixed",
        60,
    )
    assert Scenario.model_validate_json(s.model_dump_json()) == s  # what a rerun reads back from the record
    with pytest.raises(ValueError, match="head: set for path: head"):
        Scenario(name="x", ranks=2, path="head")
    with pytest.raises(ValueError, match="head: set for path: head"):
        Scenario(name="x", ranks=2, head=s.head)


@pytest.mark.parametrize("text", ["4096", "ax151936", "0x10", "100000x256", "64x100000000"])
def test_a_bad_size_is_one_line(text):
    with pytest.raises(UsageError, match="--head-size"):
        parse_size(text)


def test_tokens_equal_to_the_vocabulary_are_refused():
    with pytest.raises(UsageError, match="--head-tokens"):
        head_cells(False, ["64x256"], [2], 256)
    with pytest.raises(UsageError, match=r"--head-tokens: head.tokens 1000000 is above its ceiling 65536"):
        head_cells(False, ["64x256"], [2], 1_000_000)


def _figures(ag, rs, diff_sq, ref_sq=1.0, held=0, way="candidate"):
    return {
        "way": way,
        "hidden": 64,
        "vocab": 256,
        "tokens": 100,
        "step_s": 1.0,
        "bytes": {"all_gather": ag, "reduce_scatter": rs, "all_reduce": 0},
        "dtypes": ["float"],
        "collective_ms": 5.0,
        "held_fwd_to_bwd": held,
        "held_weight_sized": held,
        "peak_rss_over_step": 10,
        "peak_rss_process": 120,
        "diff_sq": diff_sq,
        "ref_sq": ref_sq,
    }


def _judged(cell: HeadCell, way: str, per_rank: list[dict], returncode: int = 0):
    """The record judge makes of ranks that wrote `per_rank` (each a head_step, or an error)."""
    results = {}
    for rank, written in enumerate(per_rank):
        result = {"rank": rank, "world_size": cell.world, "device": "cpu", "phase": "done"}
        results[rank] = {**result, **({"error": written} if "type" in written else {"head_step": written})}
    raw = RawRun(head_scenario(cell, way, 60), "upstream", "cpu", cell.world, None, results, returncode)
    return judge(raw)


def test_rows_judge_the_gradient_over_all_ranks_and_compare_bytes_with_the_formula():
    cell = HeadCell("h", 64, 256, 2, "fp32", 100)
    weight = 64 * 256 * 4
    figures = {
        "candidate": _figures(weight, weight // 2, 1e-16),
        "unfused": _figures(weight, weight // 2, 1e-16),
        # rank 1's rows 3x as wrong: the error is over the whole weight, sqrt((1 + 3) / (1 + 1))
        "upstream": [_figures(weight // 2, 0, 1.0, held=weight), _figures(weight // 2, 0, 3.0, held=weight)],
    }
    rows = {}
    for way, f in figures.items():
        record = _judged(cell, way, f if isinstance(f, list) else [f, f])
        rows[way] = row_of(cell, way, record)
    assert rows["candidate"]["outcome"] == "pass" and rows["unfused"]["outcome"] == "pass"
    assert rows["upstream"]["outcome"] == "mismatch" and rows["upstream"]["grad_rel"] == pytest.approx(2**0.5)
    assert rows["candidate"]["formula"]["total"] == rows["candidate"]["moved"]
    assert rows["upstream"]["formula"]["held_fwd_to_bwd"] == rows["upstream"]["held_weight_sized"]
    assert head_table(list(rows.values())).count("| = ") == 3


def test_a_way_that_raised_is_an_error_row_with_the_ranks_error():
    cell = HeadCell("h", 64, 256, 2, "bf16-mixed", 100)
    error = {
        "type": "RuntimeError",
        "message": "expected m1 and m2 to have the same dtype",
        "phase": "forward",
        "rank": 0,
    }
    record = _judged(cell, "upstream", [error, {**error, "rank": 1}], returncode=1)
    assert record.outcome == "error"
    row = row_of(cell, "upstream", record)
    assert row["outcome"] == "error" and row["error"] == "RuntimeError: expected m1 and m2 to have the same dtype"
    cells = [c.strip() for c in head_table([row]).splitlines()[-1].split("|")]
    assert cells[6:8] == ["error", "RuntimeError: expected m1 and m2 to have the same dtype"]
