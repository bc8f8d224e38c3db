"""Sequence parallelism on the rank and driver sides: where a response token's log-prob sits among verl's SP
shards (rank/oracle/sequence_parallel.py), and the why computed from per-position errors (judge_cell/diagnosis.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.judge_cell.diagnosis import sp_position_diagnosis
from harness.rank.oracle.sequence_parallel import logprob_errors_by_position, response_positions
from harness.records.rank_measures import OutputComparisons


def _sample(p, r):
    return SimpleNamespace(prompt_ids=torch.zeros(p, dtype=torch.long), response_ids=torch.zeros(r, dtype=torch.long))


def test_positions_follow_the_packed_padded_sequence():
    # One micro-batch: lengths 6 + 5 = 11, padded to 12 for sp 2: shards of 6. Sample 0's responses are scored
    # at packed positions 3, 4 (prompt 4), sample 1's at 6 + 2 .. 6 + 3.
    got = response_positions([_sample(4, 2), _sample(3, 2)], micro_batch_size=2, sp=2)
    assert got == [(0, 3, 6), (0, 4, 6), (1, 2, 6), (1, 3, 6)]
    # Two micro-batches of one sample each are packed and padded on their own: 6 -> shards of 3.
    assert response_positions([_sample(4, 2), _sample(4, 2)], 1, 2) == [(1, 0, 3), (1, 1, 3)] * 2


def test_errors_are_recorded_per_token_with_the_group():
    samples = [_sample(4, 2), _sample(3, 2)]
    actual = torch.tensor([[0.0, 0.5], [0.0, 0.0]])
    rec = logprob_errors_by_position(actual, torch.zeros(2, 2), samples, 2, 2, group=1)
    assert rec["group"] == 1 and rec["sp"] == 2
    assert rec["tokens"] == [[0, 3, 6, 0.0], [0, 4, 6, 0.5], [1, 2, 6, 0.0], [1, 3, 6, 0.0]]


def _outputs(tokens_by_group):
    return [
        OutputComparisons.model_validate(
            {
                "log_probs": {
                    "max_abs": max(t[3] for t in tokens),
                    "sp_positions": {"sp": 2, "group": g, "tokens": tokens},
                }
            }
        )
        for g, tokens in tokens_by_group.items()
    ]


def test_errors_only_at_shard_ends_are_named_so():
    tokens = [[0, 4, 6, 0.0], [0, 5, 6, 2.5], [1, 0, 6, 0.0], [1, 1, 6, 0.0]]
    d = sp_position_diagnosis(_outputs({0: tokens}), 1e-4)
    assert d.pattern == "sp-shard-end"
    assert "last position of each SP shard only (1 of 1 scored shard-end positions, max diff 2.5)" in d.text


def test_a_whole_shard_wrong_and_the_other_right_is_named_so():
    tokens = [[0, 4, 6, 0.0], [0, 5, 6, 0.0], [1, 0, 6, 1.2], [1, 1, 6, 3.0], [1, 2, 6, 0.0]]
    d = sp_position_diagnosis(_outputs({0: tokens, 1: tokens}), 1e-4)
    assert d.pattern == "sp-whole-shards" and d.of == 10
    assert "wrong throughout SP shard(s) 1 (shard 0: 0 of 4, shard 1: 4 of 6; max diff 3)" in d.text


@pytest.mark.parametrize("tokens", [[[0, 1, 6, 0.0], [1, 5, 6, 0.0]], []])
def test_nothing_wrong_or_nothing_recorded_gives_no_sp_why(tokens):
    assert (
        sp_position_diagnosis(
            _outputs({0: tokens}) if tokens else [OutputComparisons.model_validate({"log_probs": {"max_abs": 0}})], 1e-4
        )
        is None
    )


@pytest.mark.parametrize(
    "body, words",
    [
        ("ranks: 3\npath: engine\nengine: {ulysses_sequence_parallel_size: 2}\n", "must divide ranks (3)"),
        (
            "ranks: 2\npath: engine\nengine: {ulysses_sequence_parallel_size: 2, use_remove_padding: false}\n",
            "needs engine.use_remove_padding",
        ),
        (
            "ranks: 2\nengine: {ulysses_sequence_parallel_size: 2}\n",
            "engine.ulysses_sequence_parallel_size: verl's engine runs it",
        ),
    ],
)
def test_bad_sp_settings_are_one_line_naming_the_file(tmp_path, body, words):
    from harness.errors import UsageError
    from harness.inputs.scenario import load_scenario

    path = tmp_path / "sp.yaml"
    path.write_text(body)
    with pytest.raises(UsageError) as exc:
        load_scenario(path)
    assert words in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)
