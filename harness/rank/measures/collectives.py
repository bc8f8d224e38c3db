"""Collective accounting from the torch profiler's trace.

The profiler sees every c10d collective whatever issued it: FSDP's own all-gathers and reduce-scatters, a
DTensor `full_tensor()` inside a patched forward, and collectives that torch.compile put into a graph. An op is
FSDP's own when it runs inside one of FSDP2's `FSDP::...` record_function ranges on the same thread.

Bytes per op are the per-rank wire estimate of a ring algorithm, stated so they can be checked:
all-gather receives (W-1)/W of the gathered output; reduce-scatter sends (W-1)/W of its input; all-reduce
2(W-1)/W of its buffer; broadcast/scatter the buffer. `payload_bytes` is the logical size (gathered output,
reduced input).
"""

from __future__ import annotations

import gc
import json
import re
from collections import defaultdict
from contextlib import contextmanager

# The profiler names an argument's element type by its C++ type; each name maps to the torch dtype whose element
# size counts. A buffer whose type is missing here, or unrecorded, is left out of the byte totals and named in the
# summary's "unsized" list (seen: torch 2.11's gloo all-reduce of a tensor list) rather than being guessed.
PROFILER_DTYPES = {
    "float": "float32",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "double": "float64",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
}


class UnknownDtype(ValueError):
    """A collective's buffer has an element type this module cannot size."""


# c10d op name -> (kind, index of the argument holding the gathered/reduced buffer)
C10D_OPS = {
    "c10d::_allgather_base_": ("all_gather", 0),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 0),
    "c10d::allgather_": ("all_gather", 0),
    "c10d::allgather_coalesced_": ("all_gather", 0),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "c10d::reduce_scatter_": ("reduce_scatter", 1),
    "c10d::allreduce_": ("all_reduce", 0),
    "c10d::allreduce_coalesced_": ("all_reduce", 0),
    "c10d::broadcast_": ("broadcast", 0),
    "c10d::scatter_": ("broadcast", 0),
}
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")


def _numel(dims) -> int:
    """Dims of one tensor ([a, b]) or of a tensor list ([[a, b], [c]]), possibly nested once more."""
    if not dims:
        return 0
    if all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= d
        return n
    return sum(_numel(d) for d in dims)


def _elem_bytes(type_name: str) -> int:
    import torch

    if type_name not in PROFILER_DTYPES:
        raise UnknownDtype(
            f"collective buffer of element type {type_name!r}: its size is unknown "
            f"(known: {', '.join(sorted(PROFILER_DTYPES))})"
        )
    return getattr(torch, PROFILER_DTYPES[type_name]).itemsize


def _element_type(op: dict, buf_index: int, done_by: dict | None) -> str:
    """The element type of a c10d op's buffer. A tensor-list argument records none ("TensorList"): then a typed
    argument of the same op, else the backend's event for it (gloo's work event, NCCL's CPU-side annotation)."""
    types = op.get("args", {}).get("Input type", [])
    candidates = [types[buf_index]] if buf_index < len(types) else []
    candidates += [t for t in types if t in PROFILER_DTYPES]
    if done_by is not None:
        candidates += [t for t in done_by.get("args", {}).get("Input type", []) if t]
    for name in candidates:
        if name not in ("TensorList", "", "Scalar", "ScalarList"):
            return name
    # No timestamp in the message: records of the same cell must compare equal from run to run.
    raise UnknownDtype(f"{op['name']}: the profiler recorded no element type for its buffer")


def _wire_bytes(kind: str, payload: int, world: int) -> int:
    if world <= 1:
        return 0
    if kind in ("all_gather", "reduce_scatter"):
        return payload * (world - 1) // world
    if kind == "all_reduce":
        return 2 * payload * (world - 1) // world
    return payload


def _kind_of_backend_event(name: str) -> str | None:
    if "reducescatter" in name:
        return "reduce_scatter"
    if "allgather" in name:
        return "all_gather"
    if "allreduce" in name:
        return "all_reduce"
    if "broadcast" in name or "scatter" in name:
        return "broadcast"
    return None


def _own_type(op: dict, buf_index: int) -> bool:
    types = op.get("args", {}).get("Input type", [])
    return any(t not in ("TensorList", "", "Scalar", "ScalarList") for t in types)


def _backend_event_of_each(c10d: list, typed: list) -> list:
    """Where the backend recorded fewer events than there were c10d ops (23 gloo work events for 45 ops were ops
    recorded twice, see _without_redispatches; this stays for a trace that lost events), an op whose buffer is a
    tensor list (no type of its own) takes the first backend event of its kind that starts at or after it and that
    no earlier such op took: its work is submitted when it is called, and the ops before it that FSDP issued were
    waited on before the layers that needed them ran. gloo runs a reduce-scatter as an all-reduce. Typed ops need
    no event. An op with no such event stays unsized."""
    used, out = set(), []
    for op in c10d:
        kind, buf_index = C10D_OPS[op["name"]]
        if _own_type(op, buf_index):
            out.append(None)
            continue
        accepted = {kind, "all_reduce"} if kind == "reduce_scatter" else {kind}
        pick = next(
            (
                i
                for i, e in enumerate(typed)
                if i not in used
                and e["ts"] >= op["ts"]
                and _kind_of_backend_event(e["name"].lower().replace("_", "")) in accepted
            ),
            None,
        )
        if pick is not None:
            used.add(pick)
        out.append(typed[pick] if pick is not None else None)
    return out


@contextmanager
def _collector_paused():
    """A trace is tens of thousands of small dicts, none in a cycle: the collections their creation sets off are
    time lost (an engine rank's summary took 0.76 s with them, 0.44 s without)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def summarize_trace(trace_path: str, world: int) -> dict:
    """Per kind and origin: count, bytes (wire estimate), payload bytes, dtypes, time."""
    with _collector_paused():
        return _summarize(trace_path, world)


def _summarize(trace_path: str, world: int) -> dict:
    with open(trace_path) as f:
        text = f.read()
    events = _wanted_events(text)
    if events is None:
        events = json.loads(text)["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    summary = _empty_summary()
    ops, unsized = _sized_ops(complete, world, summary)
    _add_times(complete, ops, summary)
    summary["ops"] = ops
    if unsized:
        summary["unsized"] = unsized
    return summary


# Where an event the summary reads names itself: FSDP2's ranges, the c10d ops, the backends' events (the readers
# below test these prefixes again on the decoded names).
_WANTED_NAME = re.compile(r'"name"\s*:\s*"(FSDP::|c10d::|(?i:gloo:|nccl))')


def _wanted_events(text: str) -> list[dict] | None:
    """The events whose names the summary reads, in the trace's order, each decoded from its own object: a trace
    is mostly aten ops it never reads (engine-update-no-sync's profiled RL step: 125k events, 52 MB, 1.3k read;
    json.load of it 1.6-1.7 s a rank, this 0.18 s, the same events). None where the "{" nearest before a name
    does not open that event (another layout) or none is found: then the whole trace is parsed."""
    decoder = json.JSONDecoder()
    events, starts = [], set()
    for match in _WANTED_NAME.finditer(text):
        start = text.rfind("{", 0, match.start())
        try:
            event, end = decoder.raw_decode(text, start) if start >= 0 else (None, 0)
        except json.JSONDecodeError:
            return None
        name = event.get("name") if isinstance(event, dict) else None
        if not isinstance(name, str) or not name.startswith(match.group(1)) or end < match.end():
            return None
        if start not in starts:
            starts.add(start)
            events.append(event)
    return events or None


def _empty_summary() -> dict:
    return {
        kind: {
            "count": 0,
            "bytes": 0,
            "payload_bytes": 0,
            "time_ms": 0.0,
            "by_origin": {"fsdp": {"count": 0, "bytes": 0}, "other": {"count": 0, "bytes": 0}},
            "dtypes": [],
        }
        for kind in KINDS
    }


def _origin_finder(complete: list[dict]):
    """origin(event) -> ("fsdp", module FQN from the innermost FSDP range, e.g. "FSDP::all_gather (lm_head)") or
    ("other", None): a collective is FSDP's when it runs inside an FSDP:: range of its thread."""
    fsdp_ranges = defaultdict(list)
    for e in complete:
        if e["name"].startswith("FSDP::"):
            fsdp_ranges[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))

    def origin(e) -> tuple[str, str | None]:
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        enclosing = [(b - a, name) for a, b, name in fsdp_ranges[e["tid"]] if a <= t0 and t1 <= b]
        if not enclosing:
            return "other", None
        name = min(enclosing)[1]
        module = name[name.rfind("(") + 1 : -1] if name.endswith(")") and "(" in name else None
        return "fsdp", module

    return origin


def _without_redispatches(ops: list[dict]) -> list[dict]:
    """The ops of a trace, each once, in start order. An op called under a Python dispatch mode (the head-memory
    watch, LargestTensors, is one around every eager step) is recorded twice by the profiler: as called, and once
    more, inside the first on the same thread, as the mode calls it again below itself. Counted as they came, each
    FSDP all-gather and reduce-scatter of an eager step counted twice (fsdp2-multigpu: 29 all-gathers, the same step
    compiled, which runs no mode: 15), and gloo's work events seemed lost (23 for 45 ops). The outer record is
    kept: the same name, arguments and FSDP range as the inner one."""
    kept, last = [], {}
    for e in sorted(ops, key=lambda e: (e["tid"], e["ts"])):
        outer = last.get((e["tid"], e["name"]))
        if outer is not None and outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"]:
            continue
        last[(e["tid"], e["name"])] = e
        kept.append(e)
    return sorted(kept, key=lambda e: e["ts"])


def _c10d_with_typed_events(complete: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each c10d op in submission order, with the backend event that records its tensors' element types: gloo's
    work events, and on CUDA the CPU-side "nccl:<op>" annotations (one per c10d op, in submission order; seen on
    torch 2.11 + NCCL, H200)."""
    c10d = _without_redispatches([e for e in complete if e["name"] in C10D_OPS])
    typed = [
        e
        for e in complete
        if e["name"].lower().startswith(("gloo:", "nccl:")) and e.get("cat") != "gpu_user_annotation"
    ]
    typed.sort(key=lambda e: e["ts"])
    matched = typed if typed and len(typed) == len(c10d) else _backend_event_of_each(c10d, typed)
    return list(zip(c10d, matched))


def _sized_ops(complete: list[dict], world: int, summary: dict) -> tuple[list[dict], list[str]]:
    """Every collective as an op (kind, origin, module, payload, dtype, shape), counted and sized into summary;
    the ops whose element type is unknown are counted, never sized by a guess (their reasons: the second list)."""
    origin = _origin_finder(complete)
    ops, unsized = [], []
    for e, done_by in _c10d_with_typed_events(complete):
        kind, buf_index = C10D_OPS[e["name"]]
        dims = e.get("args", {}).get("Input Dims", [])
        buf_dims = dims[buf_index] if buf_index < len(dims) else []
        who, module = origin(e)
        entry = summary[kind]
        entry["count"] += 1
        entry["by_origin"][who]["count"] += 1
        op = {"kind": kind, "origin": who, "module": module, "payload_bytes": None, "dtype": None, "shape": buf_dims}
        ops.append(op)
        try:
            elem_type = _element_type(e, buf_index, done_by)
            payload = _numel(buf_dims) * _elem_bytes(elem_type)
        except UnknownDtype as exc:
            # The op stays out of the byte totals, and the record says so.
            entry["unsized"] = entry.get("unsized", 0) + 1
            unsized.append(str(exc))
            continue
        op.update(payload_bytes=payload, dtype=elem_type)
        _add_sized(entry, module, who, payload, _wire_bytes(kind, payload, world), elem_type)
    return ops, unsized


def _add_sized(entry: dict, module: str | None, who: str, payload: int, wire: int, elem_type: str):
    entry["bytes"] += wire
    entry["payload_bytes"] += payload
    entry["by_origin"][who]["bytes"] += wire
    if elem_type not in entry["dtypes"]:
        entry["dtypes"].append(elem_type)
    if module is not None:
        per_module = entry.setdefault("by_module", {}).setdefault(module, {"count": 0, "bytes": 0})
        per_module["count"] += 1
        per_module["bytes"] += wire


def _add_times(complete: list[dict], ops: list[dict], summary: dict):
    """Time: the backend's own work events, which include any wait for a slower peer. gloo:* run on its worker
    threads (one per c10d op, first in first out: gloo runs a reduce-scatter as an all-reduce, so they are matched by
    submission order, not by name), nccl kernels on the device. On CUDA only the device kernels
    (ncclDevKernel_*/ncclKernel_*) count: the CPU-side "nccl:<op>" annotations cover the same collectives and would
    count them twice."""
    work = sorted(
        (e for e in complete if e["name"].lower().startswith(("gloo:", "nccldevkernel", "ncclkernel"))),
        key=lambda e: e["ts"],
    )
    gloo_work = [e for e in work if e["name"].lower().startswith("gloo:")]
    if gloo_work and len(gloo_work) == len(ops):
        for op, e in zip(ops, gloo_work):
            summary[op["kind"]]["time_ms"] += e["dur"] / 1000.0
    else:
        for e in work:
            kind = _kind_of_backend_event(e["name"].lower().replace("_", ""))
            if kind:
                summary[kind]["time_ms"] += e["dur"] / 1000.0
    for kind in KINDS:
        summary[kind]["time_ms"] = round(summary[kind]["time_ms"], 3)
