"""One rank of one run: build the model, compute the oracle, apply verl's real patch and FSDP2, step, compare.

Started by torchrun (see driver/launch.py) as `python -m harness.rank.worker SPEC.json`. Whatever happens, the
rank writes OUT_DIR/rank<R>.json (atomically) with its phase, error, parity and collective counts, so nothing is
lost in torchrun's log. The phases, in order (rank/phases.py): setup, build, oracle, patch, wrap, compile,
forward, backward, compare, bench.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from harness.rank.phases import Phase


def describe_error(exc: BaseException, phase: str, rank: int) -> dict:
    message = str(exc).strip()
    root = exc
    seen = set()
    while (root.__cause__ or root.__context__) is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__ or root.__context__
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    # Where it was raised: a syntax error in a patched file names its own file and line; otherwise the deepest
    # frame (for an import that fails, the patched module's line).
    if isinstance(exc, SyntaxError) and exc.filename:
        location = f"{exc.filename}:{exc.lineno}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        location = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return {
        "type": type(exc).__name__,
        "message": message.splitlines()[0] if message else "",
        "full_message": message[:4000],
        "root_cause": {"type": type(root).__name__, "message": (str(root).strip().splitlines() or [""])[0]},
        "phase": phase,
        "rank": rank,
        "location": location,
        "traceback_tail": "".join(tail)[-3000:],
    }


def write_json_atomic(path: Path, data: dict):
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


@dataclass
class Rank:
    """What the phases of one rank share."""
    spec: dict
    scenario: object
    rank: int
    world: int
    phase: Phase
    out: dict
    device: object = None
    device_type: str = "cpu"
    mesh: object = None
    model: object = None
    batches: dict = field(default_factory=dict)  # (dp_rank, micro) -> MicroBatch, every rank's
    references: dict = field(default_factory=dict)  # name -> Reference

    @property
    def mixed(self) -> bool:
        return self.scenario.precision == "bf16-mixed"

    @property
    def out_dir(self) -> Path:
        return Path(self.spec["out_dir"])

    def fsdp_kwargs(self, placement_fn) -> dict:
        """The settings of verl's FSDP2 actor: param dtype per precision, fp32 gradient reduction."""
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        return {
            "mesh": self.mesh,
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16 if self.mixed else torch.float32,
                                              reduce_dtype=torch.float32, cast_forward_inputs=True),
            # pin_memory needs an accelerator.
            "offload_policy": (CPUOffloadPolicy(pin_memory=self.device_type == "cuda")
                               if self.scenario.cpu_offload else None),
            "reshard_after_forward": True,
            "shard_placement_fn": placement_fn,
        }

    def autocast(self):
        """verl runs the actor's forward under bf16 autocast and its backward outside it."""
        import contextlib

        import torch

        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)


def setup(r: Rank, local_rank: int):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.use_deterministic_algorithms(True, warn_only=True)
    r.device_type = r.spec["device"]
    if r.device_type == "cuda":
        torch.cuda.set_device(local_rank)
        r.device = torch.device("cuda", local_rank)
        backend = "cpu:gloo,cuda:nccl"
        r.out["device_name"] = torch.cuda.get_device_name(r.device)
    else:
        r.device = torch.device("cpu")
        backend = "gloo"
    # An explicit collective timeout (the run's own, see launch.py) instead of the 30-minute default.
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=r.spec["collective_timeout_s"]))
    r.out["backend"] = backend
    r.mesh = init_device_mesh(r.device_type, (r.world,), mesh_dim_names=("fsdp",))


def build(r: Rank):
    """The model and every rank's micro-batches: each rank needs them all for the oracle."""
    from harness.rank.batch import make_micro_batch, with_position_ids
    from harness.rank.model import build_model
    from harness.rank.transformers_compat import adapters_in_use, transformers_major

    s = r.scenario
    adapters = adapters_in_use(transformers_major())
    if adapters:
        # The transformers 4.x adapters this run's model and batch were built through (none under transformers 5).
        r.out["adapters"] = adapters
    r.model = build_model(s.model, s.seed, s.model_overrides).to(r.device)
    for dp_rank in range(r.world):
        for micro in range(s.grad_accum):
            mb = make_micro_batch(r.model.config, s.batch, s.seed, dp_rank, micro)
            r.batches[(dp_rank, micro)] = with_position_ids(r.model, mb).to(r.device)


def references(r: Rank):
    """The oracle, and under mixed precision or a benchmark FSDP's own unfused path: all before verl is
    imported (verl patches forwards on the class)."""
    import copy

    from harness.rank.measures import profiled, time_steps
    from harness.rank.oracle import Reference, compute_reference
    from harness.rank.references import gathered_grads, shard_placement, wrap_like_verl
    from harness.rank.step import actor_step

    s = r.scenario
    oracle = compute_reference(r.model, r.batches, s)
    r.references["oracle"] = oracle
    bench = s.repeat > 0
    if not (r.mixed or bench):
        return
    baseline = wrap_like_verl(copy.deepcopy(r.model), r.fsdp_kwargs(shard_placement(r.world)))
    baseline.train()

    def baseline_step():
        return actor_step(baseline, r.batches, r.rank, s, oracle.log_probs, r.autocast, logits_mode=True)

    outputs, comm, _ = profiled(baseline_step, r.out_dir / f"baseline_rank{r.rank}.json", r.world, r.device_type,
                                bool(r.spec.get("keep_traces")))
    if r.mixed:
        fsdp_ref = Reference()
        for micro, (lp, ent) in outputs.items():
            fsdp_ref.log_probs[(r.rank, micro)], fsdp_ref.entropy[(r.rank, micro)] = lp, ent
        if not s.forward_only:
            fsdp_ref.grads = gathered_grads(baseline)
        r.references["fsdp_unfused"] = fsdp_ref
    if bench:
        r.out["baseline"] = {"comm": comm, "step_time": time_steps(
            baseline_step, warmup=s.warmup, repeat=s.repeat,
            reset=lambda: baseline.zero_grad(set_to_none=True), device_type=r.device_type)}


def patch_and_wrap(r: Rank):
    """verl's own monkey patch and FSDP2 wrapping, from whichever verl the arm put first on the path."""
    import verl
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.fsdp_utils import apply_fsdp2, get_shard_placement_fn

    r.out["verl_file"] = verl.__file__
    apply_monkey_patch(r.model, use_remove_padding=False, use_fused_kernels=True,
                       fused_kernels_backend=r.scenario.fused_backend)
    r.phase.enter("wrap")
    r.out["lm_head_shape"] = list(r.model.lm_head.weight.shape)
    # The weights are identical on every rank (same seed), so verl's broadcast of a full state dict is not needed.
    apply_fsdp2(r.model, r.fsdp_kwargs(get_shard_placement_fn(fsdp_size=r.world)), {})
    r.model.train()


def step_and_compare(r: Rank):
    import torch
    import torch.distributed as dist

    from harness.rank.measures import SavedFullWeights, profiled, time_steps
    from harness.rank.parity import compare_gradients, compare_outputs
    from harness.rank.residency import residency_after_step, tensors_held_by
    from harness.rank.step import actor_step

    s = r.scenario
    step_model = r.model
    if s.compile:
        r.phase.enter("compile")
        step_model = torch.compile(r.model, backend=s.compile_backend)
    r.phase.enter("forward")
    lm_head_shape = tuple(r.out["lm_head_shape"])
    # Saved-tensor hooks are not traced by torch.compile; the measurement is eager-only.
    saved = None if s.compile else SavedFullWeights(lm_head_shape)
    oracle = r.references["oracle"]

    def arm_step():
        return actor_step(step_model, r.batches, r.rank, s, oracle.log_probs, r.autocast, saved=saved,
                          phase=r.phase.enter)

    dist.barrier()
    outputs, r.out["comm"], step_s = profiled(arm_step, r.out_dir / f"trace_rank{r.rank}.json", r.world,
                                              r.device_type, bool(r.spec.get("keep_traces")))
    r.out["step_s"] = round(step_s, 4)

    r.phase.enter("compare")
    if r.device_type == "cuda":
        r.out["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(r.device)
        r.out["cuda_allocated_after_bytes"] = torch.cuda.memory_allocated(r.device)
    r.out["saved_lm_head_bytes"] = None if saved is None else saved.held_bytes_after_forward
    r.out["residency"] = residency_after_step(r.model, lm_head_shape, tensors_held_by(r.references))
    r.out["parity"] = {}
    for name, ref in r.references.items():
        entry = {"outputs": {
            str(micro): {"log_probs": compare_outputs(lp, ref.log_probs[(r.rank, micro)],
                                                      ref.log_prob_alternatives.get((r.rank, micro))),
                         "entropy": compare_outputs(ent, ref.entropy[(r.rank, micro)])}
            for micro, (lp, ent) in outputs.items()}}
        if not s.forward_only:
            entry["grads"] = compare_gradients(r.model.named_parameters(), ref.grads)
        r.out["parity"][name] = entry
    if s.repeat > 0:
        r.phase.enter("bench")
        r.out["step_time"] = time_steps(arm_step, warmup=s.warmup, repeat=s.repeat,
                                        reset=lambda: r.model.zero_grad(set_to_none=True), device_type=r.device_type)
    dist.barrier()


def run_rank(r: Rank, local_rank: int):
    """The direct path: our actor step around verl's monkey patch and FSDP2 wrapping. The engine path:
    verl's own engine, batch layout and loss (rank/engine_step.py). Same phases, same result file."""
    setup(r, local_rank)
    if r.scenario.path == "engine":
        from harness.rank import engine_step as path
    else:
        path = None
    r.phase.enter("build")
    (path.build if path else build)(r)
    r.phase.enter("oracle")
    (path.references if path else references)(r)
    r.phase.enter("patch")
    if path:
        path.engine_and_step(r)
        return
    patch_and_wrap(r)
    step_and_compare(r)


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
    out = {"rank": rank, "world_size": world, "device": spec["device"], "error": None, "pid": os.getpid()}
    phase = Phase(Path(spec["out_dir"]) / f"progress_rank{rank}")
    code = 0
    try:
        from harness.spec.scenario import Scenario

        scenario = Scenario.model_validate_json(json.dumps(spec["scenario"]))
        run_rank(Rank(spec, scenario, rank, world, phase, out), int(os.environ.get("LOCAL_RANK", 0)))
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
