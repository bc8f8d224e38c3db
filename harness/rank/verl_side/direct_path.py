"""The direct path: our own actor step around verl's monkey patch and FSDP2 wrapping, configured from verl's own
config objects (rank/verl_side/verl_config.py). It isolates the fused forward where verl's engine cannot run the thing
under test: every verl release (the engine's API changed from release to release, `make releases`), the model
families of `make sweep`.

Phases: build (model, every rank's micro-batches), references (the oracle; under mixed precision or a benchmark
also FSDP's own unfused path), run (patch, wrap, compile, forward, backward, compare, bench).
"""

from __future__ import annotations


def _autocast(r):
    """verl runs the actor's forward under autocast in the param dtype and its backward outside it."""
    import contextlib

    import torch

    if r.scenario.precision != "bf16-mixed":
        return contextlib.nullcontext()
    return torch.autocast(device_type=r.device_type, dtype=torch.bfloat16)


def build(r):
    """The model and every rank's micro-batches: each rank needs them all for the oracle."""
    from harness.rank.oracle.batch import make_micro_batch, with_position_ids
    from harness.rank.oracle.model import build_model

    s = r.scenario
    r.model = build_model(s.model, s.seed, s.model_overrides).to(r.device)
    for dp_rank in range(r.world):
        for micro in range(s.grad_accum):
            mb = make_micro_batch(r.model.config, s.batch, s.seed, dp_rank, micro)
            r.batches[(dp_rank, micro)] = with_position_ids(r.model, mb).to(r.device)


def references(r):
    """The oracle, and under mixed precision or a benchmark FSDP's own unfused path: all before verl is
    imported (verl patches forwards on the class)."""
    import copy

    from harness.rank.measures.around_step import profiled, time_steps
    from harness.rank.oracle.reference import Reference, ReferenceGrads, compute_reference
    from harness.rank.oracle.unfused_fsdp import gathered_grads, reference_fsdp_kwargs, wrap_like_verl
    from harness.rank.verl_side.step import actor_step

    s = r.scenario
    mixed = s.precision == "bf16-mixed"
    oracle = compute_reference(r.model, r.batches, s)
    r.references["oracle"] = oracle
    bench = s.repeat > 0
    if not (mixed or bench):
        return
    baseline = wrap_like_verl(copy.deepcopy(r.model), reference_fsdp_kwargs(r.mesh, s, r.world, r.device_type))
    baseline.train()

    def baseline_step():
        return actor_step(baseline, r.batches, r.rank, s, oracle.log_probs, lambda: _autocast(r), logits_mode=True)

    outputs, comm, _ = profiled(
        baseline_step,
        r.out_dir / f"baseline_rank{r.rank}.json",
        r.world,
        r.device_type,
        bool(r.launch.get("keep_traces")),
    )
    if mixed:
        fsdp_ref = Reference()
        for micro, (lp, ent) in outputs.items():
            fsdp_ref.log_probs[(r.rank, micro)], fsdp_ref.entropy[(r.rank, micro)] = lp, ent
        if not s.forward_only:
            fsdp_ref.grads = ReferenceGrads(gathered_grads(baseline))  # no alternatives: FSDP's own path
        r.references["fsdp_unfused"] = fsdp_ref
    if bench:
        r.out.baseline = {
            "comm": comm,
            "step_time": time_steps(
                baseline_step,
                warmup=s.warmup,
                repeat=s.repeat,
                reset=lambda: baseline.zero_grad(set_to_none=True),
                device_type=r.device_type,
            ),
        }


def _patch_and_wrap(r):
    """verl's own monkey patch and FSDP2 wrapping, from whichever verl the arm put first on the path, with the
    settings verl's engine reads from the trainer's config objects."""
    import verl
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.fsdp_utils import apply_fsdp2

    from harness.rank.verl_side.verl_config import shared_model_dir, verl_config

    r.out.verl_file = verl.__file__
    config = verl_config(r.scenario, r.world, shared_model_dir(r, r.model))
    r.out.verl_config = config.summary()
    apply_monkey_patch(model=r.model, **config.monkey_patch_kwargs())
    r.phase.enter("wrap")
    r.out.lm_head_shape = list(r.model.lm_head.weight.shape)
    # The weights are identical on every rank (same seed), so verl's broadcast of a full state dict is not needed.
    apply_fsdp2(r.model, config.fsdp2_kwargs(r.mesh, r.device_type), config.engine)
    r.model.train()


def _by_rows(lp, ent, ref, batch, key) -> dict:
    """What rank/measures/rows.py reads of one micro-batch: the rows a head skipped, and the comparison over the
    rows verl's trainer reads (this path compares every row, the prompt's too)."""
    from harness.rank.measures.rows import read_rows_comparison, sequence_roles, skipped_rows

    roles, read = sequence_roles(lp.shape[-1], batch.response_mask)
    return {
        "skipped_rows": skipped_rows(lp, ent, ref.log_probs[key], ref.entropy[key], roles, read),
        "log_probs_read": read_rows_comparison(lp, ref.log_probs[key], read),
        "entropy_read": read_rows_comparison(ent, ref.entropy[key], read),
    }


def run(r):
    import torch
    import torch.distributed as dist

    from harness.rank.measures.around_step import SavedFullWeights, measured_step, time_steps
    from harness.rank.measures.parity import compare_gradients, compare_outputs
    from harness.rank.measures.residency import residency_after_step, tensors_held_by
    from harness.rank.verl_side.step import actor_step

    _patch_and_wrap(r)
    s = r.scenario
    if s.compile:
        from harness.rank.verl_side.torch_compile import compile_in_place

        r.phase.enter("compile")
        r.out.compiled_modules = compile_in_place(r.model, s.compile_scope, s.compile_backend)
    r.phase.enter("forward")
    lm_head_shape = tuple(r.out.lm_head_shape)
    # Saved-tensor hooks are not traced by torch.compile; the measurement is eager-only.
    saved = None if s.compile else SavedFullWeights(lm_head_shape)
    oracle = r.references["oracle"]

    def arm_step():
        return actor_step(
            r.model, r.batches, r.rank, s, oracle.log_probs, lambda: _autocast(r), saved=saved, phase=r.phase.enter
        )

    dist.barrier()
    outputs = measured_step(r, arm_step, lm_head_shape[0])

    r.phase.enter("compare")
    if r.device_type == "cuda":
        r.out.cuda_peak_allocated_bytes = torch.cuda.max_memory_allocated(r.device)
        r.out.cuda_allocated_after_bytes = torch.cuda.memory_allocated(r.device)
    r.out.saved_lm_head_bytes = None if saved is None else saved.held_bytes_after_forward
    r.out.residency = residency_after_step(r.model, lm_head_shape, tensors_held_by(r.references))
    parity = {}
    for name, ref in r.references.items():
        entry = {
            "outputs": {
                str(micro): {
                    "log_probs": compare_outputs(
                        lp, ref.log_probs[(r.rank, micro)], ref.log_prob_alternatives.get((r.rank, micro))
                    ),
                    "entropy": compare_outputs(ent, ref.entropy[(r.rank, micro)]),
                    **_by_rows(lp, ent, ref, r.batches[(r.rank, micro)], (r.rank, micro)),
                }
                for micro, (lp, ent) in outputs.items()
            }
        }
        if not s.forward_only:
            entry["grads"] = compare_gradients(r.model.named_parameters(), ref.grads)
        parity[name] = entry
    r.out.parity = parity  # assigned whole: the model checks it as it is set
    if s.repeat > 0:
        r.phase.enter("bench")
        r.out.step_time = time_steps(
            arm_step,
            warmup=s.warmup,
            repeat=s.repeat,
            reset=lambda: r.model.zero_grad(set_to_none=True),
            device_type=r.device_type,
        )
    dist.barrier()
