"""`harness bench --real-size`'s driver side (commands/bench_head.py): which cells, the memory check that skips a
cell before it starts, and how the ranks' figures become one row per path beside the formula."""

from __future__ import annotations

import pytest

from harness.commands import bench_head
from harness.commands.bench_head import (
    DEFAULT_TOKENS,
    HeadCell,
    head_cells,
    memory_estimate,
    parse_size,
    path_peak,
    rows_of,
    run_head_bench,
    tokens_for,
)
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


def test_a_cell_that_does_not_fit_is_skipped_before_it_starts(monkeypatch, tmp_path):
    cell = HeadCell("8B", 4096, 151936, 2, "fp32", 256)
    monkeypatch.setattr(bench_head, "available_bytes", lambda: 8 * GIB)
    started = []
    monkeypatch.setattr(bench_head, "run_path", lambda *a: started.append(a))
    said = []
    rows = run_head_bench([cell], tmp_path, 10, say=lambda text, **_: said.append(text))
    assert not started
    candidate = memory_estimate(cell, "candidate") / GIB
    assert [r["path"] for r in rows] == ["candidate", "unfused", "upstream"]
    assert (
        rows[0]["skipped"]
        == f"needs ~{candidate:.1f} GiB, {candidate * 1.1:.1f} with the x1.1 margin; 8.0 GiB available"
    )
    assert f"candidate {candidate:.1f}" in said[0] and "candidate: skipped" in said[1]
    assert bench_head.table(rows).count("| skipped |") == 3


def test_each_path_is_a_launch_of_its_own_and_one_that_no_longer_fits_is_skipped_alone(monkeypatch, tmp_path):
    cell = HeadCell("h", 64, 256, 2, "fp32", 100)
    free = iter(
        [8 * GIB, 8 * GIB, 0, 8 * GIB]
    )  # the opening line, then one check before each path: the second finds none
    monkeypatch.setattr(bench_head, "available_bytes", lambda: next(free))
    launched = []

    def run_path(cell, path, out, timeout_s):
        launched.append((path, out))
        return {"ranks": [_figures(1, 1, 0.0) for _ in range(cell.world)]}

    monkeypatch.setattr(bench_head, "run_path", run_path)
    said = []
    rows = {r["path"]: r for r in run_head_bench([cell], tmp_path, 10, say=lambda text, **_: said.append(text))}
    assert [path for path, _ in launched] == ["candidate", "upstream"]
    assert len({out for _, out in launched}) == 2  # each launch writes into a folder of its own
    assert rows["unfused"]["skipped"].endswith("0.0 GiB available") and "unfused: skipped" in said[2]
    assert rows["candidate"]["outcome"] == rows["upstream"]["outcome"] == "pass"
    assert "skipped" in bench_head.table(list(rows.values()))


def test_a_path_whose_launch_failed_is_an_error_row_and_the_others_are_kept(monkeypatch, tmp_path):
    cell = HeadCell("h", 64, 256, 2, "fp32", 100)
    monkeypatch.setattr(
        bench_head,
        "run_path",
        lambda cell, path, out, timeout_s: (
            {"error": "torchrun exit -9"}
            if path == "unfused"
            else {"ranks": [_figures(1, 1, 0.0) for _ in range(cell.world)]}
        ),
    )
    rows = {r["path"]: r for r in rows_of(cell, bench_head.run_cell(cell, tmp_path, 10))}
    assert rows["unfused"]["outcome"] == "error" and rows["unfused"]["error"] == "torchrun exit -9"
    assert rows["candidate"]["outcome"] == rows["upstream"]["outcome"] == "pass"


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
        "peak_rss_process": 120,
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
