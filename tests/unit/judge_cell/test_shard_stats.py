"""Every rank's per-parameter shard statistics merge into the whole gradient's (judge_cell/shard_stats.py), the one
merge that both the parity numbers (verdict.py) and the diagnosis (diagnosis.py) read."""

from __future__ import annotations

from harness.judge_cell.shard_stats import merge_ranks
from harness.records.rank_measures import GradShard


def _shards(grads: dict) -> dict[str, GradShard]:
    """One rank's gradient entries as the driver reads them from rank<R>.json."""
    return {name: GradShard.model_validate(entry) for name, entry in grads.items()}


def _entry(diff_sq, ref_sq, numel, problem=None, fit=None):
    entry = {"diff_sq": diff_sq, "ref_sq": ref_sq, "max_abs": 0.0, "problem": problem, "numel": numel}
    if fit is not None:
        entry["fit"] = fit
    return entry


def test_every_sum_adds_the_ranks_shards_and_problems_are_kept_per_parameter():
    rank0 = {
        "w": _entry(
            1.0, 4.0, 3, fit={"gg": 2.0, "reference": {"gb": 1.0, "bb": 4.0}, "unreduced": {"gb": 2.0, "bb": 2.0}}
        ),
        "b": _entry(0.5, 1.0, 1, problem="missing"),
    }
    rank1 = {
        "w": _entry(2.0, 5.0, 2, fit={"gg": 3.0, "reference": {"gb": 0.5, "bb": 5.0}}),
        "b": _entry(0.25, 1.0, 1, problem="nonfinite"),
    }
    merged = merge_ranks([_shards(rank0), _shards(rank1)])
    assert list(merged) == ["w", "b"]
    w = merged["w"]
    assert (w.diff_sq, w.ref_sq, w.numel, w.gg, w.ranks) == (3.0, 9.0, 5, 5.0, 2)
    assert w.every_rank_compared() and not w.problems
    assert (w.alternatives["reference"].gb, w.alternatives["reference"].bb) == (1.5, 9.0)
    assert w.alternatives["reference"].ranks == 2
    assert w.alternatives["unreduced"].ranks == 1  # rank 1 did not compare with it: not the whole gradient's
    b = merged["b"]
    assert b.problems == {"missing", "nonfinite"} and not b.every_rank_compared()


def test_entries_from_before_numel_was_stored_count_none():
    merged = merge_ranks([_shards({"w": {"diff_sq": 1.0, "ref_sq": 1.0, "max_abs": 0.0, "problem": None}})])
    assert merged["w"].numel == 0
