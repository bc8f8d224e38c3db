"""Collective accounting from synthetic torch-profiler chrome traces: kinds, origins, wire bytes, dtypes, time."""

from __future__ import annotations

import json

import pytest

from harness.rank.measures.collectives import KINDS, summarize_trace

MAIN, AUTOGRAD, GLOO = 1, 2, 3  # thread ids


def x(name, ts, dur, tid=MAIN, dims=None, types=None):
    event = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": {}}
    if dims is not None:
        event["args"]["Input Dims"] = dims
    if types is not None:
        event["args"]["Input type"] = types
    return event


def allgather_base(ts, tid=MAIN, dtype="float", dims=((16, 4), (8, 4))):
    return x(
        "c10d::_allgather_base_",
        ts,
        10,
        tid,
        dims=[list(d) for d in dims],
        types=[dtype, dtype, "ScalarList", "Scalar"],
    )


def coalesced_allgather(ts, tid=MAIN, dtype="float"):
    """The c10d op (a tensor list records no element type) and the gloo work event that ran it (it does)."""
    return [
        x(
            "c10d::allgather_into_tensor_coalesced_",
            ts,
            10,
            tid,
            dims=[[[256, 64]], [[128, 64]], [], []],
            types=["TensorList", "TensorList", "", "Scalar"],
        ),
        x("gloo:all_gather", ts + 5, 10, GLOO, dims=[[128, 64]], types=[dtype]),
    ]


def reduce_scatter_base(ts, tid=AUTOGRAD, dtype="float"):
    # (output shard, input to reduce): the input is the buffer that counts.
    return x(
        "c10d::_reduce_scatter_base_", ts, 10, tid, dims=[[8, 4], [16, 4], [], []], types=[dtype, dtype, "", "Scalar"]
    )


def summarize(tmp_path, events, world=2, name="trace.json"):
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "traceEvents": events
                + [
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": 7,
                        "tid": MAIN,
                        "args": {"name": "main"},
                    },  # not an "X" event
                ],
            }
        )
    )
    return summarize_trace(str(path), world)


def test_fsdp_all_gather_inside_an_fsdp_range(tmp_path):
    events = [x("FSDP::all_gather", 100, 50), allgather_base(120)]
    s = summarize(tmp_path, events)
    ag = s["all_gather"]
    assert ag["count"] == 1
    assert ag["by_origin"]["fsdp"] == {"count": 1, "bytes": 16 * 4 * 4 // 2}
    assert ag["by_origin"]["other"] == {"count": 0, "bytes": 0}
    assert ag["payload_bytes"] == 16 * 4 * 4  # the gathered output, argument 0
    assert ag["bytes"] == 16 * 4 * 4 * (2 - 1) // 2
    assert ag["dtypes"] == ["float"]
    assert s["ops"] == [
        {
            "kind": "all_gather",
            "origin": "fsdp",
            "module": None,
            "payload_bytes": 256,
            "dtype": "float",
            "shape": [16, 4],
        }
    ]
    for kind in ("reduce_scatter", "all_reduce", "broadcast"):
        assert s[kind]["count"] == 0 and s[kind]["bytes"] == 0


def test_fsdp_range_on_another_thread_does_not_count(tmp_path):
    events = [x("FSDP::all_gather", 100, 50, tid=AUTOGRAD), allgather_base(120, tid=MAIN)]
    ag = summarize(tmp_path, events)["all_gather"]
    assert ag["by_origin"]["fsdp"]["count"] == 0 and ag["by_origin"]["other"]["count"] == 1


def test_op_sticking_out_of_the_fsdp_range_is_other(tmp_path):
    events = [x("FSDP::all_gather", 100, 50), allgather_base(145)]  # 145 + 10 > 150
    assert summarize(tmp_path, events)["all_gather"]["by_origin"]["other"]["count"] == 1


def test_coalesced_all_gather_outside_fsdp_is_other(tmp_path):
    events = [x("FSDP::pre_forward", 0, 50), *coalesced_allgather(100)]
    ag = summarize(tmp_path, events, world=2)["all_gather"]
    expected = (2 - 1) * 256 * 64 * 4 // 2
    assert ag["count"] == 1
    assert ag["by_origin"]["other"] == {"count": 1, "bytes": expected}
    assert ag["by_origin"]["fsdp"] == {"count": 0, "bytes": 0}
    assert ag["bytes"] == expected and ag["payload_bytes"] == 256 * 64 * 4
    assert ag["dtypes"] == ["float"]  # from the gloo work event: a tensor list records no element type


def test_a_tensor_list_takes_its_element_size_from_the_work_event(tmp_path):
    ag = summarize(tmp_path, coalesced_allgather(0, dtype="c10::BFloat16"))["all_gather"]
    assert ag["payload_bytes"] == 256 * 64 * 2 and ag["dtypes"] == ["c10::BFloat16"]


def test_under_nccl_a_tensor_list_takes_its_type_from_the_cpu_annotation(tmp_path):
    # As torch 2.11 + NCCL records them: the c10d op (no element type), the CPU-side "nccl:<op>" annotation (typed),
    # and a device-side annotation of the same name (untyped, not counted as a second op).
    events = [
        x("c10d::allreduce_", 0, 5, dims=[[[10]], [], []], types=["TensorList", "", "Scalar"]),
        dict(x("nccl:all_reduce", 2, 3, dims=[[10]], types=["long int"]), cat="user_annotation"),
        dict(x("nccl:all_reduce", 4, 3, tid=GLOO), cat="gpu_user_annotation"),
    ]
    s = summarize(tmp_path, events, world=4)
    assert s["all_reduce"]["payload_bytes"] == 10 * 8 and s["all_reduce"]["dtypes"] == ["long int"]


def test_an_unrecorded_element_type_is_named_unsized_not_four_bytes(tmp_path):
    s = summarize(tmp_path, coalesced_allgather(0)[:1])  # no work event: nothing says the element size
    ag = s["all_gather"]
    assert ag["count"] == 1 and ag["unsized"] == 1 and ag["payload_bytes"] == 0 and ag["bytes"] == 0
    assert len(s["unsized"]) == 1 and "no element type" in s["unsized"][0]


def test_an_unknown_element_type_is_named_unsized_not_four_bytes(tmp_path):
    s = summarize(tmp_path, [allgather_base(0, dtype="c10::Float4_e2m1fn_x2")])
    assert s["all_gather"]["unsized"] == 1 and s["all_gather"]["bytes"] == 0
    assert "c10::Float4_e2m1fn_x2" in s["unsized"][0]


@pytest.mark.parametrize(
    "name, size", [("double", 8), ("long int", 8), ("c10::Half", 2), ("bool", 1), ("c10::Float8_e4m3fn", 1)]
)
def test_element_sizes_come_from_the_dtype(tmp_path, name, size):
    assert summarize(tmp_path, [allgather_base(0, dtype=name)])["all_gather"]["payload_bytes"] == 16 * 4 * size


@pytest.mark.parametrize("world", [2, 4, 8])
def test_all_gather_wire_bytes_scale_with_world(tmp_path, world):
    ag = summarize(tmp_path, coalesced_allgather(0), world=world)["all_gather"]
    assert ag["bytes"] == 256 * 64 * 4 * (world - 1) // world


def test_bf16_uses_two_bytes_per_element(tmp_path):
    s = summarize(tmp_path, [allgather_base(0, dtype="c10::BFloat16"), reduce_scatter_base(50, dtype="c10::BFloat16")])
    assert s["all_gather"]["payload_bytes"] == 16 * 4 * 2
    assert s["all_gather"]["bytes"] == 16 * 4 * 2 // 2
    assert s["all_gather"]["dtypes"] == ["c10::BFloat16"]
    assert s["reduce_scatter"]["payload_bytes"] == 16 * 4 * 2


def test_reduce_scatter_counted_by_its_input(tmp_path):
    events = [x("FSDP::post_backward_reduce", 0, 100, tid=AUTOGRAD), reduce_scatter_base(10), reduce_scatter_base(200)]
    rs = summarize(tmp_path, events)["reduce_scatter"]
    assert rs["count"] == 2
    assert rs["payload_bytes"] == 2 * 16 * 4 * 4
    assert rs["bytes"] == 2 * (16 * 4 * 4 // 2)
    assert rs["by_origin"]["fsdp"]["count"] == 1 and rs["by_origin"]["other"]["count"] == 1


def test_all_reduce_and_broadcast(tmp_path):
    events = [
        x("c10d::allreduce_", 0, 5, dims=[[[10, 10]], [], []], types=["TensorList", "", "Scalar"]),
        x("gloo:all_reduce", 2, 5, GLOO, dims=[[10, 10]], types=["float"]),
        x("c10d::broadcast_", 10, 5, dims=[[[3]], [], []], types=["TensorList", "", "Scalar"]),
        x("gloo:broadcast", 12, 5, GLOO, dims=[[3]], types=["float"]),
    ]
    s = summarize(tmp_path, events, world=4)
    assert s["all_reduce"]["count"] == 1 and s["all_reduce"]["bytes"] == 2 * 400 * 3 // 4
    assert s["broadcast"]["count"] == 1 and s["broadcast"]["bytes"] == 12


def test_world_one_sends_nothing(tmp_path):
    events = [
        x("FSDP::all_gather", 0, 1000),
        allgather_base(10),
        x("gloo:all_gather", 12, 1, GLOO, types=["float"]),
        *coalesced_allgather(100),
        reduce_scatter_base(300),
        x("gloo:all_reduce", 302, 1, GLOO, types=["float"]),
    ]
    s = summarize(tmp_path, events, world=1)
    assert s["all_gather"]["count"] == 2 and s["reduce_scatter"]["count"] == 1
    for kind in KINDS:
        assert s[kind]["bytes"] == 0
        assert s[kind]["by_origin"]["fsdp"]["bytes"] == 0 and s[kind]["by_origin"]["other"]["bytes"] == 0
    assert s["all_gather"]["payload_bytes"] == 16 * 4 * 4 + 256 * 64 * 4  # the logical size is still known


def test_non_collective_ops_are_ignored(tmp_path):
    events = [x("aten::mm", 0, 10, dims=[[4, 4], [4, 4]], types=["float", "float"]), x("FSDP::all_gather", 20, 5)]
    s = summarize(tmp_path, events)
    assert all(s[k]["count"] == 0 for k in KINDS) and s["ops"] == []


def test_gloo_work_events_are_matched_to_ops_in_order(tmp_path):
    # gloo runs a reduce-scatter as an all-reduce: its work event's name says all_reduce, but it is the
    # reduce-scatter's time, because gloo runs work first in, first out.
    events = [
        allgather_base(0),
        reduce_scatter_base(100),
        allgather_base(200, dims=((32, 4), (16, 4))),
        x("gloo:all_gather", 5, 1500, tid=GLOO),
        x("gloo:all_reduce", 110, 2500, tid=GLOO),
        x("gloo:all_gather", 210, 250, tid=GLOO),
    ]
    s = summarize(tmp_path, events)
    assert s["all_gather"]["time_ms"] == pytest.approx(1.75)
    assert s["reduce_scatter"]["time_ms"] == pytest.approx(2.5)
    assert s["all_reduce"]["time_ms"] == 0.0 and s["all_reduce"]["count"] == 0


def test_backend_events_by_name_when_counts_do_not_match(tmp_path):
    # NCCL kernels are named after their collective; they are summed per kind by name.
    events = [
        allgather_base(0),
        reduce_scatter_base(100),
        x("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5, 1000, tid=GLOO),
        x("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(...)", 110, 3000, tid=GLOO),
        x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)", 200, 500, tid=GLOO),
    ]
    s = summarize(tmp_path, events)
    assert s["all_gather"]["time_ms"] == pytest.approx(1.0)
    assert s["reduce_scatter"]["time_ms"] == pytest.approx(3.0)
    assert s["all_reduce"]["time_ms"] == pytest.approx(0.5)


def test_empty_trace(tmp_path):
    s = summarize(tmp_path, [])
    assert s["ops"] == [] and all(s[k]["count"] == 0 and s[k]["time_ms"] == 0.0 for k in KINDS)


def test_nccl_time_is_counted_once(tmp_path):
    events = [
        allgather_base(0),
        reduce_scatter_base(100),
        dict(x("nccl:_all_gather_base", 2, 400), cat="user_annotation"),
        dict(x("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5, 1000, tid=GLOO), cat="kernel"),
        dict(x("nccl:_reduce_scatter_base", 102, 300, tid=AUTOGRAD), cat="user_annotation"),
        dict(x("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(...)", 110, 3000, tid=GLOO), cat="kernel"),
    ]
    s = summarize(tmp_path, events)
    assert s["all_gather"]["time_ms"] == pytest.approx(1.0)
    assert s["reduce_scatter"]["time_ms"] == pytest.approx(3.0)


def test_fsdp_collective_is_attributed_to_the_module_its_range_names(tmp_path):
    """FSDP2 labels its ranges with the unit's FQN; the innermost enclosing range names the module."""
    events = [
        x("FSDP::pre_forward (lm_head)", 0, 100),
        x("FSDP::all_gather (lm_head)", 10, 50),
        allgather_base(20),
        x("FSDP::all_gather (model.layers.0)", 200, 50),
        allgather_base(210),
    ]
    s = summarize(tmp_path, events)
    assert [op["module"] for op in s["ops"]] == ["lm_head", "model.layers.0"]
    assert s["all_gather"]["by_module"]["lm_head"]["count"] == 1
    assert s["all_gather"]["by_module"]["model.layers.0"]["count"] == 1


def test_a_tensor_list_takes_the_first_backend_event_of_its_kind_after_it_when_events_were_lost(tmp_path):
    # As a gloo run on torch 2.13 recorded it: fewer work events than c10d ops (typed ops need none), so the
    # coalesced all-gather takes the first all_gather work event at or after it, not one by position.
    events = [
        allgather_base(0, dtype="c10::BFloat16"),
        x("gloo:all_reduce", 20, 5, GLOO, dims=[[4]], types=["long int"]),
        *coalesced_allgather(100, dtype="float"),
        allgather_base(200, dtype="c10::BFloat16"),
    ]
    s = summarize(tmp_path, events)
    assert "unsized" not in s
    assert s["all_gather"]["dtypes"] == ["c10::BFloat16", "float"]
    assert s["all_gather"]["payload_bytes"] == 2 * 16 * 4 * 2 + 256 * 64 * 4


def _read_by_the_summary(events):
    return [
        e
        for e in events
        if e.get("name", "").startswith(("FSDP::", "c10d::")) or e.get("name", "").lower().startswith(("gloo:", "nccl"))
    ]


def test_the_events_read_are_those_of_the_whole_trace_from_the_profilers_own_file(tmp_path):
    """The profiler's chrome trace, read event by event (collectives._wanted_events), gives exactly the events a
    whole json.load gives the summary, in the same order."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from harness.rank.measures.collectives import _wanted_events

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for name in ("FSDP::pre_forward (lm_head)", "FSDP::all_gather (lm_head)", "gloo:all_gather", "other"):
            with record_function(name):
                torch.ones(3).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    text = path.read_text()
    wanted = _read_by_the_summary(json.loads(text)["traceEvents"])
    assert len(wanted) == 3
    assert _wanted_events(text) == wanted


def test_a_trace_of_another_layout_is_parsed_whole(tmp_path):
    """Where the "{" nearest before a name does not open its event (here "args" holds an object before "name"),
    the whole trace is parsed: the same summary."""
    from harness.rank.measures.collectives import _wanted_events

    event = allgather_base(0)
    reordered = {"ph": "X", "args": event["args"], **{k: v for k, v in event.items() if k not in ("ph", "args")}}
    text = json.dumps({"traceEvents": [reordered]})
    assert _wanted_events(text) is None
    assert summarize(tmp_path, [reordered])["all_gather"]["count"] == 1


def test_an_op_recorded_again_inside_itself_by_a_dispatch_mode_counts_once(tmp_path):
    """Under a Python dispatch mode the profiler records an op as called and again, inside it, as the mode calls it
    below itself: one collective. Two calls back to back, or the same op on two threads at once, are two."""
    once = [x("FSDP::all_gather", 100, 80), allgather_base(110), allgather_base(112)]
    once[2]["dur"] = 6  # 112-118, inside the first (110-120)
    assert summarize(tmp_path, once)["all_gather"]["count"] == 1
    twice = [allgather_base(110), allgather_base(130)]
    assert summarize(tmp_path, twice, name="twice.json")["all_gather"]["count"] == 2
    threads = [allgather_base(110, tid=MAIN), allgather_base(112, tid=AUTOGRAD)]
    assert summarize(tmp_path, threads, name="threads.json")["all_gather"]["count"] == 2
