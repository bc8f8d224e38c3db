"""One rank of one run: build the model, compute the oracle, apply verl's real patch and FSDP2, step, compare.

Started by torchrun (see launch.py) as `python -m harness.worker SPEC.json`. Whatever happens, the rank writes
OUT_DIR/rank<R>.json (atomically) with its phase, error, parity and collective counts, so nothing is lost in
torchrun's log. The phases, in order: setup, build, oracle, patch, wrap, compile, forward, backward, compare, bench.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path


class Phase:
    """Tracks where the rank is, so an exception is recorded with the step that raised it.

    It also rewrites `progress_rank<R>` ("<pid> <phase>") on every change: the launcher reads it to kill the
    rank on a timeout and to say where a hung rank was stuck.
    """

    def __init__(self, progress_path: Path):
        self.name = "setup"
        self.times = {}
        self._t0 = time.perf_counter()
        self._progress_path = progress_path
        self._announce()

    def _announce(self):
        self._progress_path.write_text(f"{os.getpid()} {self.name}")

    def enter(self, name: str):
        now = time.perf_counter()
        self.times[self.name] = round(self.times.get(self.name, 0.0) + now - self._t0, 4)
        if name != self.name:
            self.name = name
            self._announce()
        self._t0 = now


def describe_error(exc: BaseException, phase: str, rank: int) -> dict:
    message = str(exc).strip()
    root = exc
    seen = set()
    while (root.__cause__ or root.__context__) is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__ or root.__context__
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__name__,
        "message": message.splitlines()[0] if message else "",
        "full_message": message[:4000],
        "root_cause": {"type": type(root).__name__, "message": (str(root).strip().splitlines() or [""])[0]},
        "phase": phase,
        "rank": rank,
        "traceback_tail": "".join(tail)[-3000:],
    }


def write_json_atomic(path: Path, data: dict):
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def run_rank(spec: dict, rank: int, world: int, local_rank: int, phase: Phase, out: dict):
    import contextlib
    import copy

    import torch
    import torch.distributed as dist

    from harness.batch import make_micro_batch, with_position_ids
    from harness.model import build_model
    from harness.oracle import Reference, compute_reference
    from harness.scenario import Scenario

    scenario = Scenario.model_validate_json(json.dumps(spec["scenario"]))
    device_type = spec["device"]
    torch.use_deterministic_algorithms(True, warn_only=True)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "cpu:gloo,cuda:nccl"
        out["device_name"] = torch.cuda.get_device_name(device)
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # An explicit collective timeout (the run's own, see launch.py) instead of the 30-minute default.
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=spec["collective_timeout_s"]))
    out["backend"] = backend

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    mixed = scenario.precision == "bf16-mixed"
    mesh = init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",))

    def fsdp_kwargs(placement_fn):
        # The settings of verl's FSDP2 actor: param dtype per precision, fp32 gradient reduction.
        return {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16 if mixed else torch.float32,
                                              reduce_dtype=torch.float32, cast_forward_inputs=True),
            # pin_memory needs an accelerator.
            "offload_policy": CPUOffloadPolicy(pin_memory=device_type == "cuda") if scenario.cpu_offload else None,
            "reshard_after_forward": True,
            "shard_placement_fn": placement_fn,
        }

    def autocast():
        # verl runs the actor's forward under bf16 autocast and its backward outside it.
        if not mixed:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)

    phase.enter("build")
    model = build_model(scenario.model, scenario.seed, scenario.model_overrides).to(device)
    config = model.config
    batches = {}
    for dp_rank in range(world):
        for micro in range(scenario.grad_accum):
            mb = make_micro_batch(config, scenario.batch, scenario.seed, dp_rank, micro)
            batches[(dp_rank, micro)] = with_position_ids(model, mb).to(device)

    phase.enter("oracle")
    from harness.step import SavedFullWeights, actor_step, profiled, time_steps

    out_dir = Path(spec["out_dir"])
    keep = bool(spec.get("keep_traces"))
    reference = compute_reference(model, batches, scenario)
    references = {"oracle": reference}
    bench = scenario.repeat > 0
    if mixed or bench:
        # FSDP's own unfused path under the same policy: the second reference under mixed precision, and the
        # baseline a benchmark reports each arm's cost against.
        from harness.fsdp_reference import gathered_grads, shard_placement, wrap_like_verl

        baseline_model = wrap_like_verl(copy.deepcopy(model), fsdp_kwargs(shard_placement(world)))
        baseline_model.train()

        def baseline_step():
            return actor_step(baseline_model, batches, rank, scenario, reference.log_probs, autocast,
                              logits_mode=True)

        baseline_outputs, baseline_comm, _ = profiled(baseline_step, out_dir / f"baseline_rank{rank}.json", world,
                                                      device_type, keep)
        if mixed:
            fsdp_ref = Reference()
            for micro, (lp, ent) in baseline_outputs.items():
                fsdp_ref.log_probs[(rank, micro)], fsdp_ref.entropy[(rank, micro)] = lp, ent
            if not scenario.forward_only:
                fsdp_ref.grads = gathered_grads(baseline_model)
            references["fsdp_unfused"] = fsdp_ref
        if bench:
            out["baseline"] = {"comm": baseline_comm,
                               "step_time": time_steps(baseline_step, warmup=scenario.warmup, repeat=scenario.repeat,
                                                       reset=lambda: baseline_model.zero_grad(set_to_none=True),
                                                       device_type=device_type)}
        del baseline_model

    phase.enter("patch")
    import verl  # resolved from the arm's materialised copy, first on PYTHONPATH
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.fsdp_utils import apply_fsdp2, get_shard_placement_fn

    out["verl_file"] = verl.__file__
    apply_monkey_patch(model, use_remove_padding=False, use_fused_kernels=True,
                       fused_kernels_backend=scenario.fused_backend)

    phase.enter("wrap")
    lm_head_shape = tuple(model.lm_head.weight.shape)
    out["lm_head_shape"] = list(lm_head_shape)
    # The weights are identical on every rank (same seed), so verl's broadcast of a full state dict is not needed.
    apply_fsdp2(model, fsdp_kwargs(get_shard_placement_fn(fsdp_size=world)), {})
    model.train()
    step_model = model
    if scenario.compile:
        phase.enter("compile")
        step_model = torch.compile(model, backend="inductor")

    phase.enter("forward")
    # Saved-tensor hooks are not traced by torch.compile; the measurement is eager-only.
    saved = None if scenario.compile else SavedFullWeights(lm_head_shape)

    def arm_step():
        return actor_step(step_model, batches, rank, scenario, reference.log_probs, autocast, saved=saved,
                          phase=phase.enter)

    dist.barrier()
    outputs, out["comm"], step_s = profiled(arm_step, out_dir / f"trace_rank{rank}.json", world, device_type, keep)
    out["step_s"] = round(step_s, 4)

    phase.enter("compare")
    from harness.parity import compare_gradients, compare_outputs
    from harness.residency import residency_after_step

    if device_type == "cuda":
        out["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        out["cuda_allocated_after_bytes"] = torch.cuda.memory_allocated(device)
    out["saved_lm_head_bytes"] = None if saved is None else saved.held_bytes_after_forward
    ignore = [t for ref in references.values() for t in list(ref.grads.values()) if t is not None]
    out["residency"] = residency_after_step(model, lm_head_shape, ignore)
    out["parity"] = {}
    for ref_name, ref in references.items():
        entry = {"outputs": {
            str(micro): {"log_probs": compare_outputs(lp, ref.log_probs[(rank, micro)]),
                         "entropy": compare_outputs(ent, ref.entropy[(rank, micro)])}
            for micro, (lp, ent) in outputs.items()}}
        if not scenario.forward_only:
            entry["grads"] = compare_gradients(model.named_parameters(), ref.grads)
        out["parity"][ref_name] = entry
    if bench:
        phase.enter("bench")
        out["step_time"] = time_steps(arm_step, warmup=scenario.warmup, repeat=scenario.repeat,
                                      reset=lambda: model.zero_grad(set_to_none=True), device_type=device_type)
    dist.barrier()


def use_rank_private_compile_cache(rank: int, world: int):
    """Inductor's cache key does not include the rank, and a compiled graph can hold rank-specific constants
    (which chunk of a gathered weight this rank keeps). With one cache shared by the ranks, a rank loaded its
    peer's graph and the compiled upstream arm's lm_head gradient changed from rel. error 0.99 to 1.58.
    So each (world size, rank) gets its own cache; a later run of the same rank may reuse it."""
    base = os.environ.get("HARNESS_COMPILE_CACHE")
    if base:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"w{world}-r{rank}")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(base, f"w{world}-r{rank}", "triton")


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    use_rank_private_compile_cache(rank, world)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    out = {"rank": rank, "world_size": world, "device": spec["device"], "error": None, "pid": os.getpid()}
    phase = Phase(Path(spec["out_dir"]) / f"progress_rank{rank}")
    code = 0
    try:
        run_rank(spec, rank, world, local_rank, phase, out)
    except BaseException as exc:  # noqa: BLE001 - every failure is a result to record
        out["error"] = describe_error(exc, phase.name, rank)
        code = 1
    phase.enter("done")
    out["phase_times_s"] = phase.times
    out["phase"] = "done" if code == 0 else out["error"]["phase"]
    write_json_atomic(Path(spec["out_dir"]) / f"rank{rank}.json", out)
    if code == 0:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    sys.stdout.flush()
    # os._exit: a failed rank must not wait in interpreter shutdown for peers that will never answer.
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
