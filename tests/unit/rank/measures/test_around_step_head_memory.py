"""The rank-side head memory measure (rank/measures/around_step.py LargestTensors): the largest logits-shaped tensor of
a step, forward and backward, from what the ops create; a broadcast or a view adds nothing of its own."""

from __future__ import annotations

import importlib

import pytest
import torch

from harness.rank.measures.around_step import LargestTensors, watch_head_memory
from harness.records.results import RankResult

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


def _rank_result() -> RankResult:
    return RankResult(rank=0, world_size=1, device="cpu")


def test_watch_records_only_a_step_that_returned_and_skips_compile():
    out = _rank_result()
    assert watch_head_memory(lambda: head(None) or 7, VOCAB, out)() == 7
    assert out.head_memory.largest_vocab_tensor_shape == [TOKENS, VOCAB]
    failing = _rank_result()
    with pytest.raises(ZeroDivisionError):
        watch_head_memory(lambda: 1 / 0, VOCAB, failing)()
    assert failing.head_memory is None
    compiled = _rank_result()
    watch_head_memory(lambda: None, VOCAB, compiled, compiled=True)()
    assert compiled.head_memory.measured is False and "torch.compile" in compiled.head_memory.why


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
        # Under the mode the trace keeps what may be a collective, FSDP's ranges among them (record_function).
        with torch.profiler.record_function("FSDP::before the hook"):
            measured = torch.ones(4, VOCAB) * 2
        with unmeasured():
            torch.cumsum(torch.ones(64, VOCAB), 0)  # larger and logits-shaped, but the harness's own
            with torch.profiler.record_function("FSDP::inside the hook"):
                pass
        with torch.profiler.record_function("FSDP::after the hook"):
            torch.cumprod(measured, 0)
        return measured

    out = _rank_result()
    profiled(watch_head_memory(step, VOCAB, out), tmp_path / "trace.json", 1, "cpu", keep_trace=True)
    names = {e["name"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]}
    assert "FSDP::inside the hook" not in names and "aten::cumsum" not in names
    assert {"FSDP::before the hook", "FSDP::after the hook"} <= names
    assert out.head_memory.largest_vocab_tensor_shape == [4, VOCAB]


def _trace_of(fn, tmp_path, mode: bool = True) -> list[str]:
    """The names of the events the CPU profiler records for fn under the head-memory mode, as a measured step
    runs it (profiled's profiler around, the mode inside), or without the mode."""
    import json
    from contextlib import nullcontext

    from torch.profiler import ProfilerActivity, profile

    from harness.rank.measures.around_step import _running

    cpu = [ProfilerActivity.CPU]
    with (
        profile(activities=cpu, record_shapes=True) as prof,
        _running(profile=prof, activities=cpu),
        LargestTensors(VOCAB) if mode else nullcontext(),
    ):
        fn()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    return [e["name"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e.get("ph") == "X"]


def test_under_the_profiler_the_trace_keeps_what_may_be_a_collective_and_no_plain_op(tmp_path):
    """A plain aten op issues no collective: it is not recorded (before: twice, as called and again below the
    mode). An op on a tensor subclass other than DTensor keeps every op its dispatch runs, and an op of another
    namespace is recorded (record_function's, which FSDP's ranges are made of; c10d's)."""
    from torch.testing._internal.two_tensor import TwoTensor

    a, b = torch.randn(4, HIDDEN), torch.randn(HIDDEN, VOCAB)
    assert "aten::mm" not in _trace_of(lambda: torch.mm(a, b), tmp_path)
    pair = TwoTensor(a, a.clone())
    assert _trace_of(lambda: torch.mm(pair, b), tmp_path).count("aten::mm") == 3  # below the mode, one per half

    def ranged():
        with torch.profiler.record_function("FSDP::pre_forward (lm_head)"):
            torch.mm(a, b)

    names = _trace_of(ranged, tmp_path)
    assert "FSDP::pre_forward (lm_head)" in names and "aten::mm" not in names
    # FSDP2's own copy ops (its namespace, fsdp::) issue no collective: neither they nor their copies are recorded.
    importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_collectives")  # registers the fsdp:: ops

    parts, out = [torch.randn(4, 2), torch.randn(2, 2)], torch.empty(6 * 2)
    names = _trace_of(lambda: torch.ops.fsdp.chunk_cat(parts, 0, 1, out=out.view(1, 12)), tmp_path)
    assert not any(n.startswith(("fsdp::", "aten::")) for n in names), names
    # The switch is back on once the mode has exited: without it, the profiler records every op again.
    assert "aten::mm" in _trace_of(lambda: torch.mm(a, b), tmp_path, mode=False)


def test_an_op_on_a_dtensor_keeps_only_the_collectives_its_dispatch_issues(tmp_path, fake_process_group):
    """mm of two row-sharded DTensors all-gathers the second inside DTensor's dispatch: that all-gather is in the
    trace; the local mm, the sharding propagation's fake-tensor ops and the op itself are not (before, all of
    them were: 42 events for this one op)."""
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh

    fake_process_group(0, 2)  # DTensor's dispatch issues its collectives as c10d ops, as it would with a peer
    mesh = init_device_mesh("cpu", (2,))
    a = DTensor.from_local(torch.randn(4, HIDDEN), mesh, [Shard(0)], run_check=False)
    b = DTensor.from_local(torch.randn(HIDDEN // 2, VOCAB), mesh, [Shard(0)], run_check=False)
    names = _trace_of(lambda: torch.mm(a, b), tmp_path)
    assert "c10d::allgather_into_tensor_coalesced_" in names, names
    assert "aten::mm" not in names and "PythonSubclass" not in names and "PythonDispatchMode" not in names, names
    # Without the mode the same op is recorded as always, the local mm among its events.
    assert "aten::mm" in _trace_of(lambda: torch.mm(a, b), tmp_path, mode=False)


def test_the_head_memory_is_the_same_with_the_profiler_around_it():
    from torch.profiler import ProfilerActivity, profile

    from harness.rank.measures.around_step import _running

    bare = LargestTensors(VOCAB)
    with bare:
        head(16)
    cpu = [ProfilerActivity.CPU]
    with profile(activities=cpu, record_shapes=True) as prof, _running(profile=prof, activities=cpu):
        profiled_mode = LargestTensors(VOCAB)
        with profiled_mode:
            head(16)
    assert profiled_mode.only_collectives_recorded and not bare.only_collectives_recorded
    assert profiled_mode.summary() == bare.summary()
