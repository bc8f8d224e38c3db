"""The rank-side head memory measure (rank/measures/around_step.py LargestTensors): the largest logits-shaped tensor of
a step, forward and backward, from what the ops create; a broadcast or a view adds nothing of its own."""

from __future__ import annotations

import pytest
import torch

from harness.rank.measures.around_step import LargestTensors, watch_head_memory

pytestmark = pytest.mark.unit
VOCAB, HIDDEN, TOKENS = 96, 8, 40


def head(chunk: int | None):
    """log-probs of TOKENS tokens from a [VOCAB, HIDDEN] head, whole or `chunk` tokens at a time, with backward."""
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen, requires_grad=True)
    labels = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    step = chunk or TOKENS
    parts = [
        torch.log_softmax(hidden[i : i + step] @ weight.t(), -1).gather(-1, labels[i : i + step, None])
        for i in range(0, TOKENS, step)
    ]
    torch.cat(parts).sum().backward()


@pytest.mark.parametrize("chunk, rows", [(None, TOKENS), (16, 16)])
def test_the_largest_logits_tensor_is_one_chunk_of_tokens_by_the_vocabulary(chunk, rows):
    with LargestTensors(VOCAB) as mode:
        head(chunk)
    s = mode.summary()
    assert s["largest_vocab_tensor_shape"] == [rows, VOCAB]
    assert s["largest_vocab_tensor_bytes"] == rows * VOCAB * 4
    assert s["largest_tensor_bytes"] >= s["largest_vocab_tensor_bytes"]


def test_a_view_of_the_weight_is_not_a_logits_tensor():
    """weight.t() of a [vocab, hidden] head is [hidden, vocab], on the weight's own storage: no memory of its own."""
    weight = torch.randn(VOCAB, VOCAB // 2)
    with LargestTensors(VOCAB) as mode:
        weight.t()
        weight.view(-1, VOCAB)
    assert mode.summary()["largest_vocab_tensor_bytes"] == 0


def test_a_broadcast_counts_at_its_storage_size():
    with LargestTensors(VOCAB) as mode:
        torch.zeros(1, VOCAB).expand(1000, VOCAB)
    assert mode.summary()["largest_vocab_tensor_bytes"] == VOCAB * 4


def test_watch_records_only_a_step_that_returned_and_skips_compile():
    out = {}
    assert watch_head_memory(lambda: head(None) or 7, VOCAB, out)() == 7
    assert out["head_memory"]["largest_vocab_tensor_shape"] == [TOKENS, VOCAB]
    failing = {}
    with pytest.raises(ZeroDivisionError):
        watch_head_memory(lambda: 1 / 0, VOCAB, failing)()
    assert "head_memory" not in failing
    compiled = {}
    watch_head_memory(lambda: None, VOCAB, compiled, compiled=True)()
    assert compiled["head_memory"]["measured"] is False and "torch.compile" in compiled["head_memory"]["why"]


def test_an_ops_tensors_are_those_pytree_finds():
    """The mode gathers an op's tensors itself (pytree cost more per op): the same tensors, in the same order, for
    the shapes aten arguments and results come in."""
    from torch.utils._pytree import tree_leaves

    from harness.rank.measures.around_step import _tensors

    a, b, c = torch.ones(2, 3), torch.zeros(3), torch.arange(4.0)
    structures = [
        ((a, 2, None), {}),
        ((a, [b, c], torch.float32), {"out": a}),
        (([a, b], 0), {"alpha": 1.5, "dtype": torch.bfloat16}),
        torch.max(a, dim=1),  # a torch.return_types structseq
        (torch.Size([2, 3]), (a, (b,)), {"device": "cpu", "pair": [c, 3]}),
        a,
        None,
    ]
    for structure in structures:
        expected = [t for t in tree_leaves(structure) if isinstance(t, torch.Tensor)]
        found = _tensors(structure, [])
        assert len(found) == len(expected) and all(x is y for x, y in zip(found, expected)), structure


def test_unmeasured_code_stays_out_of_the_trace_and_the_mode(tmp_path):
    """The optimizer watch's hooks run inside the measured step: their ops are neither in the profiler's trace nor
    seen by the head-memory mode, and both measure again once the hook returns."""
    import json

    from harness.rank.measures.around_step import profiled, unmeasured

    def step():
        measured = torch.ones(4, VOCAB) * 2
        with unmeasured():
            torch.cumsum(torch.ones(64, VOCAB), 0)  # larger and logits-shaped, but the harness's own
        torch.cumprod(measured, 0)
        return measured

    out = {}
    profiled(watch_head_memory(step, VOCAB, out), tmp_path / "trace.json", 1, "cpu", keep_trace=True)
    names = {e["name"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]}
    assert "aten::cumsum" not in names
    assert {"aten::mul", "aten::cumprod"} <= names
    assert out["head_memory"]["largest_vocab_tensor_shape"] == [4, VOCAB]
