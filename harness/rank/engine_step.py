"""The engine path's phases: what verl 0.9.1's trainer does for one actor update (or one ref / old-log-prob
pass), run by verl's own engine (rank/engine.py), judged against the per-sample oracle (oracle.sample_reference).

Every rank builds every rank's samples (the oracle needs the global batch), writes the seeded model to a
directory verl loads it from, and then hands only its own samples to verl.
"""
from __future__ import annotations

import tempfile
from pathlib import Path


def settings_of(scenario, world: int):
    from harness.rank.engine import EngineSettings

    e = scenario.engine
    return EngineSettings(
        world=world, precision=scenario.precision, use_remove_padding=e.use_remove_padding,
        gradient_checkpointing=e.gradient_checkpointing, fsdp_size=e.fsdp_size, forward_only=scenario.forward_only,
        offload_policy=scenario.cpu_offload,
        use_dynamic_bsz=e.use_dynamic_bsz, max_token_len_per_gpu=e.max_token_len_per_gpu,
        micro_batch_size_per_gpu=scenario.batch.micro_batch_size, no_sync=e.no_sync,
        fused_kernels_backend=scenario.fused_backend,
        ppo_mini_batch_size=world * scenario.grad_accum * scenario.batch.micro_batch_size,
        entropy_coeff=scenario.loss.entropy_coeff, clip_ratio=scenario.loss.clip_ratio,
        clip_ratio_c=scenario.loss.clip_ratio_c)


def build(r):
    from harness.rank.batch import make_samples
    from harness.rank.model import build_model

    s = r.scenario
    r.model = build_model(s.model, s.seed, s.model_overrides)
    for dp_rank in range(r.world):
        for micro in range(s.grad_accum):
            r.batches[(dp_rank, micro)] = make_samples(r.model, s.batch, s.seed, dp_rank, micro)


def references(r):
    from harness.rank.oracle import sample_reference

    r.references["oracle"] = sample_reference(r.model, r.batches, r.scenario)


def engine_and_step(r):
    """verl builds the engine (its monkey patch and FSDP2 wrapping included), then one update or one pass."""
    import torch.distributed as dist
    import verl

    from harness.rank.engine import actor_update, build_engine, infer, make_verl_batch, save_tiny_model
    from harness.rank.measures import profiled

    s = r.scenario
    r.out["verl_file"] = verl.__file__
    model_dir = Path(tempfile.mkdtemp(prefix="model-", dir=r.out_dir)) if r.rank == 0 else None
    if r.rank == 0:
        save_tiny_model(r.model, model_dir)
    shared = [str(model_dir) if model_dir else None]
    dist.broadcast_object_list(shared, src=0)
    r.phase.enter("wrap")
    handle = build_engine(shared[0], settings_of(s, r.world))
    r.out["adapters"] = r.out.get("adapters", []) + handle.adapters  # after any transformers 4.x ones (build)
    r.out["engine_init_s"] = round(handle.init_s, 3)
    r.out["lm_head_shape"] = list(r.model.lm_head.weight.shape)
    samples = [x for micro in range(s.grad_accum) for x in r.batches[(r.rank, micro)]]
    data = rank_share(make_verl_batch(_global_samples(r), temperature=s.temperature,
                                      global_batch_size=r.world * len(samples)), r.rank, r.world)

    r.phase.enter("forward")
    dist.barrier()
    step = (lambda: infer(handle, data)) if s.forward_only else (lambda: actor_update(handle, data))
    result, r.out["comm"], step_s = profiled(step, r.out_dir / f"trace_rank{r.rank}.json", r.world,
                                             r.device_type, bool(r.spec.get("keep_traces")))
    r.out["step_s"] = round(step_s, 4)

    r.phase.enter("compare")
    _compare(r, handle, result, samples)
    dist.barrier()


def _global_samples(r) -> list:
    """The trainer's global batch: rank 0's samples, then rank 1's, ... (the order verl's dispatch splits)."""
    return [x for dp_rank in range(r.world) for micro in range(r.scenario.grad_accum)
            for x in r.batches[(dp_rank, micro)]]


def rank_share(data, rank: int, world: int):
    """This rank's part of the converted global batch, cut as verl's dispatch cuts it (protocol.py's chunk:
    chunk_tensordict, then contiguous + consolidate). verl converts the whole batch to its no-padding layout in
    the trainer, before the split, so a rank's own samples are never converted on their own."""
    from verl.utils import tensordict_utils as tu

    return tu.contiguous(tu.chunk_tensordict(data, world)[rank]).consolidate()


def _compare(r, handle, result, samples):
    """Log-probs and entropy per response token (positions past a response's end are zero on both sides),
    every parameter's gradient shard, and what the step left resident."""
    import torch

    from harness.rank.parity import compare_gradients, compare_outputs
    from harness.rank.residency import residency_after_step, tensors_held_by

    s = r.scenario
    oracle = r.references["oracle"]
    expected_lp = [oracle.log_probs[(r.rank, m)] for m in range(s.grad_accum)]
    expected_ent = [oracle.entropy[(r.rank, m)] for m in range(s.grad_accum)]
    width = max(len(x.response_ids) for x in samples)
    mask = torch.zeros(len(samples), width)
    for i, x in enumerate(samples):
        mask[i, :len(x.response_ids)] = 1

    def padded(parts):
        out = torch.zeros(len(samples), width)
        row = 0
        for part in parts:
            out[row:row + part.shape[0], :part.shape[1]] = part
            row += part.shape[0]
        return out

    alternatives = oracle.log_prob_alternatives.get((r.rank, 0)) or {}
    entry = {"outputs": {"0": {
        "log_probs": compare_outputs(result["log_probs"][:, :width] * mask, padded(expected_lp),
                                     {name: padded([oracle.log_prob_alternatives[(r.rank, m)][name]
                                                    for m in range(s.grad_accum)]) for name in alternatives}),
        "entropy": (compare_outputs(result["entropy"][:, :width] * mask, padded(expected_ent))
                    if "entropy" in result else {"max_abs": float("inf"), "missing": True}),
    }}}
    if not s.forward_only:
        entry["grads"] = compare_gradients(handle.engine.module.named_parameters(), oracle.grads)
    r.out["parity"] = {"oracle": entry}
    r.out["saved_lm_head_bytes"] = None
    r.out["residency"] = residency_after_step(handle.engine.module, tuple(r.out["lm_head_shape"]),
                                              tensors_held_by(r.references, r.batches))
