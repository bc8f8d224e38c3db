"""What is measured around a step: its collectives (profiler), the full lm_head-sized tensors autograd keeps
between forward and backward (saved-tensor hooks), and its time over repeats after a warm-up."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch


class SavedFullWeights:
    """Counts the bytes of tensors shaped like the full lm_head weight that autograd holds for backward.

    Checked right after the forward: a patch that gathers the weight and lets autograd keep it holds it from
    forward to backward; FSDP's own unsharded parameter is freed by the reshard after forward (its storage is
    resized to zero), so it counts nothing at that point."""

    def __init__(self, shape: tuple):
        self.shape = tuple(shape)
        self.saved = []
        self.held_bytes_after_forward = 0

    def _pack(self, tensor):
        if tuple(tensor.shape) == self.shape:
            self.saved.append(tensor)
        return tensor

    @staticmethod
    def _unpack(tensor):
        return tensor

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def measure(self):
        seen, total = set(), 0
        for t in self.saved:
            storage = t.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        self.held_bytes_after_forward = max(self.held_bytes_after_forward, total)
        self.saved.clear()


def profiled(fn, trace_path: Path, world: int, device_type: str, keep_trace: bool = False):
    """Run fn under the torch profiler; returns (fn's result, collective summary, wall seconds)."""
    from torch.profiler import ProfilerActivity, profile

    from harness.rank.collectives import summarize_trace

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities, record_shapes=True) as prof:
        result = fn()
        if device_type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - start
    prof.export_chrome_trace(str(trace_path))
    comm = summarize_trace(str(trace_path), world)
    if not keep_trace:
        trace_path.unlink(missing_ok=True)
    return result, comm, wall


def time_steps(fn, *, warmup: int, repeat: int, reset, device_type: str) -> dict:
    """Wall time of fn over `repeat` runs after `warmup` runs; reset() runs before each (zero the grads)."""
    import torch.distributed as dist

    times = []
    for i in range(warmup + repeat):
        reset()
        dist.barrier()
        start = time.perf_counter()
        fn()
        if device_type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return {"n": len(times), "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "times_s": [round(t, 6) for t in times]}
