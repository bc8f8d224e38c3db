"""What is measured around a step: its collectives (profiler), the full lm_head-sized tensors autograd keeps
between forward and backward (saved-tensor hooks), the largest logits-shaped tensor it creates (a dispatch
mode), and its time over repeats after a warm-up."""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
from torch._C._autograd import _enable_record_function
from torch._subclasses.fake_tensor import FakeTensor
from torch.distributed.tensor import DTensor
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

# The measures now running around a step (set by profiled and watch_head_memory), which unmeasured() steps out of.
_RUNNING: dict = {"profile": None, "activities": None, "mode": None}
# Tensor types whose ops run no Python dispatch of their own below a mode (no DTensor among them).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


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


class LargestTensors(TorchDispatchMode):
    """The largest tensor any op of the step creates whose last dimension is the vocabulary size (a logits-shaped
    tensor: what verl's fused head exists to keep at one chunk of tokens), and the largest tensor overall.

    A dispatch mode sees every aten op's outputs, forward and backward, the same way on CPU and CUDA; sizes are
    counted from shapes and dtypes, so the figure does not depend on the allocator. An output that shares an
    input's storage (a view) is not counted, and a broadcast counts at most its storage's size."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.vocab_tensor = None  # (bytes, shape, dtype, op)
        self.any_tensor = None
        # The profiler's trace is read for its collectives and FSDP's ranges only (collectives.py), yet it held
        # every op of the step, and each op through this mode twice (as called, and again as the mode calls it
        # below itself, with every op its kernel runs): the profiler's stop and export grew with them. So while
        # this mode runs under a CPU profiler, torch's record-function switch (thread-local) is off, and on only
        # around an op that may be a collective or issue one: any op outside the aten namespace and FSDP2's copy
        # ops (c10d, the functional collectives, record_function's own ops, which FSDP's ranges are made of) and
        # any op on a tensor subclass (a DTensor, whose dispatch may all-gather an input; of its ops only those are
        # recorded, _collectives_recorded_in). A plain aten op is in the trace no more. fsdp2-multigpu's profiled
        # step alone: forward phase 0.53 s -> 0.26-0.33 s, engine-update-no-sync's 6.6 s -> 4.5-4.8 s; every record
        # the same (docs/TIME.md). On a CPU host only, as unmeasured() pauses the profiler: on CUDA, CUPTI's
        # kernels would lose the ops they belong to.
        self.only_collectives_recorded = _RUNNING["profile"] is not None and _RUNNING["activities"] == [
            torch.profiler.ProfilerActivity.CPU
        ]

    def __enter__(self):
        if self.only_collectives_recorded:
            _enable_record_function(False)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self.only_collectives_recorded:
                _enable_record_function(True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.only_collectives_recorded and _may_issue_a_collective(func, types):
            with _collectives_recorded_in(types):
                out = func(*args, **(kwargs or {}))
        else:
            out = func(*args, **(kwargs or {}))
        inputs = None
        for t in _tensors(out, []):
            local = _local(t)
            shaped = local.numel() * local.element_size()
            # What the shape says bounds what a tensor holds from above: an output that could not be the largest
            # even at that size is passed over before the inputs' storages are looked up (most ops of a step).
            if not any(self._beats(local, shaped)):
                continue
            if inputs is None:
                inputs = {_storage(x) for x in _tensors((args, kwargs), [])}
            # An output on an input's storage (a view, a transpose, an in-place op) is no new memory: lm_head's
            # weight.t() is [hidden, vocab] but holds nothing the weight does not.
            if _storage(t) not in inputs:
                self._see(local, shaped, func)
        return out

    def _beats(self, local, nbytes: int) -> tuple[bool, bool]:
        """(larger than any tensor so far, a logits-shaped tensor larger than any so far), at nbytes."""
        largest = self.any_tensor is None or nbytes > self.any_tensor[0]
        vocab = bool(local.dim()) and local.shape[-1] == self.vocab_size
        return largest, vocab and (self.vocab_tensor is None or nbytes > self.vocab_tensor[0])

    def _see(self, local, nbytes: int, func):
        try:
            nbytes = min(nbytes, local.untyped_storage().nbytes())
        except (RuntimeError, NotImplementedError):
            pass
        largest, vocab = self._beats(local, nbytes)
        if not (largest or vocab):
            return  # a broadcast, smaller than its shape says: described only when the largest so far
        entry = (nbytes, list(local.shape), str(local.dtype).removeprefix("torch."), str(func))
        if largest:
            self.any_tensor = entry
        if vocab:
            self.vocab_tensor = entry

    def summary(self) -> dict:
        out = {"measured": True, "vocab_size": self.vocab_size}
        for key, entry in (("largest_vocab_tensor", self.vocab_tensor), ("largest_tensor", self.any_tensor)):
            nbytes, shape, dtype, op = entry or (0, None, None, None)
            out.update({f"{key}_bytes": nbytes, f"{key}_shape": shape, f"{key}_dtype": dtype, f"{key}_op": op})
        return out


# Namespaces whose ops issue no collective: aten's, and FSDP2's own copy-in / copy-out of its all-gather buffers
# (fsdp::all_gather_copy_in, split_with_sizes_copy, chunk_cat). Their events were a fifth of the profiled
# update step's trace (5.8k of engine-update-no-sync's 29.0k a rank).
_NO_COLLECTIVES = frozenset({"aten", "fsdp"})


def _may_issue_a_collective(func, types) -> bool:
    return func.namespace not in _NO_COLLECTIVES or any(t not in _PLAIN for t in types)


def _gives_back(types) -> bool:
    """An op on a DTensor: a mode can give it back (NotImplemented), and DTensor then runs the ops it stands for
    (its shards' local ops, a redistribute's collectives) with that mode still in place, as torch's
    CommDebugMode counts them."""
    return any(issubclass(t, DTensor) for t in types)


@contextmanager
def _collectives_recorded_in(types):
    """Around one op that may issue a collective, under LargestTensors with the record-function switch off. An op
    on a DTensor runs under _CollectivesOnly, which records only what of its dispatch may be a collective: its
    local ops were recorded one by one before (13.7k of that trace's 29.0k events were below an op on a DTensor,
    AdamW's and the clip's on every parameter shard). Any other op is recorded whole, with every op below it (a
    c10d op's backend work, the ops of another subclass's dispatch)."""
    if _gives_back(types):
        with _CollectivesOnly():
            yield
        return
    _enable_record_function(True)
    try:
        yield
    finally:
        _enable_record_function(False)


class _CollectivesOnly(TorchDispatchMode):
    """Below LargestTensors, inside one op on a DTensor: every op the DTensor's dispatch runs comes through here
    (an op on a DTensor is given back, to be run as the ops it stands for), and only what may be a collective is
    recorded."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _gives_back(types):
            return NotImplemented
        # A fake tensor's op (DTensor's sharding propagation on its first call of a kind) holds no data and
        # issues no collective.
        if not _may_issue_a_collective(func, types) or any(issubclass(t, FakeTensor) for t in types):
            return func(*args, **(kwargs or {}))
        with _collectives_recorded_in(types):
            return func(*args, **(kwargs or {}))


def _tensors(tree, found: list) -> list:
    """The tensors among an op's arguments or outputs, appended to found: aten ops pass them alone, in lists or
    tuples (a torch.return_types structseq is a tuple), and keyword arguments in a dict: the tensors pytree's
    tree_leaves finds. Every op of a measured step comes through here twice; with tree_leaves the mode cost the tiny
    model's text step 43 ms, with this 29 ms."""
    if isinstance(tree, torch.Tensor):
        found.append(tree)
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            _tensors(item, found)
    elif isinstance(tree, dict):
        for item in tree.values():
            _tensors(item, found)
    return found


def _local(tensor):
    return getattr(tensor, "_local_tensor", tensor)  # a DTensor: this rank's share is what it holds


def _storage(tensor):
    try:
        return _local(tensor).untyped_storage().data_ptr() or id(tensor)  # 0: an empty storage, no memory shared
    except (RuntimeError, NotImplementedError):
        return id(tensor)


def watch_head_memory(fn, vocab_size: int, out, compiled: bool = False):
    """fn, wrapped so that a run of it that returns sets out.head_memory (LargestTensors' summary; out: the rank's
    RankResult).

    Under torch.compile the mode would be traced into the graph, so nothing is measured there and the record says
    so (as for the saved-tensor hooks)."""
    if compiled:

        def run():
            out.head_memory = {
                "measured": False,
                "vocab_size": vocab_size,
                "why": "not measured under torch.compile (a dispatch mode would change what is compiled)",
            }
            return fn()

        return run

    def run():
        with LargestTensors(vocab_size) as mode, _running(mode=mode):
            result = fn()
        out.head_memory = mode.summary()
        return result

    return run


def measured_step(r, fn, lm_head_rows: int):
    """fn, the step under test, run with what every path measures around it: the head-memory watch and the
    profiler, into the rank's result (head memory, comm, step_s); returns fn's result."""
    watched = watch_head_memory(fn, lm_head_rows, r.out, r.scenario.compile)
    trace = r.out_dir / f"trace_rank{r.rank}.json"
    result, r.out.comm, step_s = profiled(watched, trace, r.world, r.device_type, bool(r.launch.get("keep_traces")))
    r.out.step_s = round(step_s, 4)
    return result


def profiled(fn, trace_path: Path, world: int, device_type: str, keep_trace: bool = False):
    """Run fn under the torch profiler; returns (fn's result, collective summary, fn's wall seconds)."""
    from torch.profiler import ProfilerActivity, profile

    from harness.rank.measures.collectives import summarize_trace

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof, _running(profile=prof, activities=activities):
        # fn's own time: the profiler's stop after it grows with the trace (3-4x the tiny model's step), not fn.
        start = time.perf_counter()
        result = fn()
        if device_type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    prof.export_chrome_trace(str(trace_path))
    comm = summarize_trace(str(trace_path), world)
    if not keep_trace:
        trace_path.unlink(missing_ok=True)
    return result, comm, wall


@contextmanager
def _running(**measures):
    before = dict(_RUNNING)
    _RUNNING.update(measures)
    try:
        yield
    finally:
        _RUNNING.update(before)


@contextmanager
def unmeasured():
    """The harness's own code inside a measured step (the optimizer watch's step hooks, engine_update.py), out of
    what is measured of verl's step: the profiler's trace (read only for its collectives; the watch issues none)
    and the head-memory mode (the watch's copies are of parameter shards, never logits-shaped). In the profiled
    first RL step of engine-update-sgd (candidate) the watch's ops were 18.5k of the trace's 50.2k events (20.3 MB
    -> 13.2 MB a rank), each also through the mode; the profiler's stop, the export and the json.load of the trace
    grow with its events and were most of that step's cost.

    The profiler's CPU collection is paused on a CPU host only: on CUDA, CUPTI's kernel records would be paused
    beside it, so there the watch's ops stay in the trace as before."""
    prof, mode = _RUNNING["profile"], _RUNNING["mode"]
    with ExitStack() as stack:
        if prof is not None and _RUNNING["activities"] == [torch.profiler.ProfilerActivity.CPU]:
            prof.toggle_collection_dynamic(False, _RUNNING["activities"])
            stack.callback(prof.toggle_collection_dynamic, True, _RUNNING["activities"])
        if mode is not None and _python_dispatch._get_current_dispatch_mode() is mode:
            stack.enter_context(_python_dispatch._pop_mode_temporarily())
        yield


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
    return {
        "n": len(times),
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "times_s": [round(t, 6) for t in times],
    }
