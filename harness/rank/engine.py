"""verl 0.9.1's own training engine, driven the way its trainer drives it: verl's config dataclasses, its
TrainingWorker (constructed without Ray: torchrun's environment is all Worker needs), FSDPEngineWithLMHead's
initialize / forward_backward_batch / infer_batch, verl's ppo_loss, and verl's own conversion of the trainer's
padded batch to its no-padding layout. This module only builds inputs for it and reads its outputs; the
environment adapters it needs on a CPU-only host are in rank/adapters.py.

The engine loads the model from a directory (HFModelConfig): the seeded tiny model is written there with
save_pretrained. verl builds it on the meta device on ranks != 0 and broadcasts rank 0's weights.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from harness.rank.adapters import install_host_adapters, offload_without_pinning


def save_tiny_model(model, directory) -> Path:
    """Write the tiny transformers model so verl's HFModelConfig can load it from a local directory.

    No tokenizer/processor is written: `HFModelConfig(load_tokenizer=False)` skips both (its `tokenizer` and
    `processor` stay None; FSDPCheckpointManager then gets processing_class=None, which it accepts). The attention
    implementation is not taken from config.json: HFModelConfig passes `override_config["attn_implementation"]`
    (default "flash_attention_2") to AutoConfig.from_pretrained, so build_engine sets it to "sdpa".
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    config.architectures = [type(model).__name__]
    config._attn_implementation = "sdpa"
    model.save_pretrained(directory, safe_serialization=True)
    return directory


@dataclass
class EngineSettings:
    world: int
    precision: str = "fp32"  # "fp32" | "bf16-mixed" (verl's default MixedPrecisionPolicy: bf16 params, fp32 reduce)
    use_remove_padding: bool = True
    gradient_checkpointing: bool = False
    fsdp_size: int = -1  # -1: one FSDP group over all ranks; 0 < n < world: HSDP mesh (world//n, n)
    forward_only: bool = False  # the ref engine (verl forces CPU offload for it)
    offload_policy: bool = False  # the actor's FSDP2 CPUOffloadPolicy (fsdp_config.offload_policy)
    use_dynamic_bsz: bool = False
    max_token_len_per_gpu: int = 4096
    micro_batch_size_per_gpu: int = 2  # ppo_micro_batch_size_per_gpu / log_prob_micro_batch_size_per_gpu
    no_sync: bool = False  # use_no_sync_for_gradient_accumulation (verl's yaml default: false)
    use_fused_kernels: bool = True
    fused_kernels_backend: str = "torch"
    strategy: str = "fsdp2"
    ppo_mini_batch_size: int = 8  # global samples per optimizer step (trainer: ppo_mini_batch_size * rollout.n)
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    clip_ratio: float = 0.2
    clip_ratio_c: float = 3.0
    use_torch_compile: bool = False  # only verl's non-fused entropy path compiles; off keeps CPU runs short


@dataclass
class EngineHandle:
    engine: object  # verl FSDPEngineWithLMHead
    worker: object  # verl TrainingWorker that owns it
    loss_fn: object | None  # partial(ppo_loss, config=actor_config), as ActorRolloutRefWorker binds it
    actor_config: object
    settings: EngineSettings
    adapters: list[str] = field(default_factory=list)
    init_s: float = 0.0


def _mixed_precision(precision: str):
    if precision == "fp32":
        return {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    if precision == "bf16-mixed":
        return None  # verl's default: MixedPrecision(param bf16, reduce fp32, buffer fp32) + bf16 autocast
    raise ValueError(f"unknown precision {precision!r}")


def build_engine(model_dir, s: EngineSettings) -> EngineHandle:
    """verl's config dataclasses -> TrainingWorkerConfig -> TrainingWorker -> FSDPEngineWithLMHead.initialize().

    Mirrors verl/workers/engine_workers.py::ActorRolloutRefWorker.init_model (actor branch, "2. build actor
    model", and the ref branch for forward_only) and TrainingWorker.__init__ / reset():
      - model_config -> actor_config.model_config                       (init_model: `actor_config.model_config = model_config`)
      - TrainingWorkerConfig(model_type, model_config, engine_config=actor_config.engine,
        optimizer_config=actor_config.optim, checkpoint_config=actor_config.checkpoint)
      - engine_config.use_dynamic_bsz / infer_max_token_len_per_gpu / infer_micro_batch_size_per_gpu /
        max_token_len_per_gpu / micro_batch_size_per_gpu / use_remove_padding   (init_model "assign engine configs")
      - loss_fn = partial(ppo_loss, config=actor_config)                 (init_model, non-distillation branch)
      - TrainingWorker.__init__ copies model_config.use_remove_padding and model_config.use_fused_kernels into the
        engine config, then EngineRegistry.new(...); reset() calls engine.initialize().
    """
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import (
        FSDPActorConfig,
        FSDPEngineConfig,
        FSDPOptimizerConfig,
        HFModelConfig,
        TrainingWorkerConfig,
    )
    from verl.workers.utils.losses import ppo_loss

    adapters = install_host_adapters()
    t0 = time.perf_counter()

    model_config = HFModelConfig(
        path=str(model_dir),
        load_tokenizer=False,
        override_config={"attn_implementation": "sdpa"},
        enable_gradient_checkpointing=s.gradient_checkpointing,
        use_remove_padding=s.use_remove_padding,
        use_fused_kernels=s.use_fused_kernels,
        fused_kernel_options={"impl_backend": s.fused_kernels_backend},
    )
    fsdp_config = FSDPEngineConfig(
        strategy=s.strategy,
        wrap_policy={"min_num_params": 0},
        fsdp_size=s.fsdp_size,
        model_dtype="fp32",
        mixed_precision=_mixed_precision(s.precision),
        use_torch_compile=s.use_torch_compile,
        use_no_sync_for_gradient_accumulation=s.no_sync,
        forward_only=s.forward_only,
        offload_policy=s.offload_policy,
    )
    actor_config = FSDPActorConfig(
        strategy=s.strategy,
        rollout_n=1,
        ppo_mini_batch_size=s.ppo_mini_batch_size,
        ppo_micro_batch_size_per_gpu=s.micro_batch_size_per_gpu,
        use_dynamic_bsz=s.use_dynamic_bsz,
        ppo_max_token_len_per_gpu=s.max_token_len_per_gpu,
        loss_agg_mode=s.loss_agg_mode,
        entropy_coeff=s.entropy_coeff,
        clip_ratio=s.clip_ratio,
        clip_ratio_low=s.clip_ratio,
        clip_ratio_high=s.clip_ratio,
        clip_ratio_c=s.clip_ratio_c,
        use_fused_kernels=s.use_fused_kernels,
        use_remove_padding=s.use_remove_padding,
        use_torch_compile=s.use_torch_compile,
        optim=FSDPOptimizerConfig(lr=1e-6),
        checkpoint=CheckpointConfig(),
        fsdp_config=fsdp_config,
    )
    actor_config.model_config = model_config
    training_config = TrainingWorkerConfig(
        model_type=model_config.get("model_type", "language_model"),
        model_config=actor_config.model_config,
        engine_config=actor_config.engine,
        optimizer_config=None if s.forward_only else actor_config.optim,
        checkpoint_config=actor_config.checkpoint,
        profiler_config=None,
    )
    engine_config = training_config.engine_config
    engine_config.use_dynamic_bsz = s.use_dynamic_bsz
    engine_config.infer_max_token_len_per_gpu = s.max_token_len_per_gpu
    engine_config.infer_micro_batch_size_per_gpu = s.micro_batch_size_per_gpu
    if not s.forward_only:  # the ref branch of init_model only assigns the infer_* fields
        engine_config.max_token_len_per_gpu = s.max_token_len_per_gpu
        engine_config.micro_batch_size_per_gpu = s.micro_batch_size_per_gpu
    engine_config.use_remove_padding = model_config.get("use_remove_padding", False)

    loss_fn = None if s.forward_only else partial(ppo_loss, config=actor_config)
    from verl.workers.engine_workers import TrainingWorker

    with offload_without_pinning(s.forward_only or s.offload_policy) as pin_adapter:
        worker = TrainingWorker(config=training_config)
        worker.reset()  # engine.initialize(): meta init + broadcast, apply_monkey_patch, FSDP2 wrap, optimizer
        if loss_fn is not None:
            worker.set_loss_fn(loss_fn)
    if pin_adapter:
        adapters = adapters + [pin_adapter]
    return EngineHandle(worker.engine, worker, loss_fn, actor_config, s, adapters, time.perf_counter() - t0)


@dataclass
class Sample:
    prompt_ids: torch.Tensor  # (p,)
    response_ids: torch.Tensor  # (r,)
    position_ids: torch.Tensor  # (4, p + r): text row + 3 M-RoPE rows
    pixel_values: torch.Tensor  # (patches, patch_dim)
    image_grid_thw: torch.Tensor  # (1, 3)
    advantage: float
    old_log_probs: torch.Tensor  # (r,)


def make_verl_batch(samples: list[Sample], *, temperature: float, global_batch_size: int,
                    calculate_entropy: bool = True, pad_token_id: int = 0):
    """The padded GRPO batch the PPO trainer hands the workers, then verl's own conversion to no-padding.

    Padded layout as built by verl/experimental/agent_loop/agent_loop.py::_postprocess: prompts left-padded,
    responses right-padded, input_ids = prompts ++ responses, attention_mask, position_ids (B, 4, L),
    response_mask (B, R); non_tensor_batch["multi_modal_inputs"] one dict per sample; meta_info temperature.
    Then ray_trainer.py::_update_actor: DataProto.to_tensordict() -> left_right_2_no_padding() -> assign_non_tensor.
    """
    import numpy as np

    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    n = len(samples)
    p_max = max(len(x.prompt_ids) for x in samples)
    r_max = max(len(x.response_ids) for x in samples)
    prompts = torch.full((n, p_max), pad_token_id, dtype=torch.long)
    responses = torch.full((n, r_max), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(n, p_max + r_max, dtype=torch.long)
    position_ids = torch.zeros(n, 4, p_max + r_max, dtype=torch.long)
    response_mask = torch.zeros(n, r_max, dtype=torch.long)
    old_log_probs = torch.zeros(n, r_max)
    advantages = torch.zeros(n, r_max)
    for i, x in enumerate(samples):
        p, r = len(x.prompt_ids), len(x.response_ids)
        prompts[i, p_max - p:] = x.prompt_ids
        responses[i, :r] = x.response_ids
        attention_mask[i, p_max - p: p_max + r] = 1
        position_ids[i, :, p_max - p: p_max + r] = x.position_ids
        response_mask[i, :r] = 1
        old_log_probs[i, :r] = x.old_log_probs
        advantages[i, :r] = x.advantage
    input_ids = torch.cat([prompts, responses], dim=1)
    multi_modal_inputs = np.array(
        [{"pixel_values": x.pixel_values, "image_grid_thw": x.image_grid_thw} for x in samples], dtype=object)
    proto = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": input_ids,
                 "attention_mask": attention_mask, "position_ids": position_ids, "response_mask": response_mask,
                 "old_log_probs": old_log_probs, "advantages": advantages},
        non_tensors={"multi_modal_inputs": multi_modal_inputs},
        meta_info={"temperature": temperature},
    )
    td = left_right_2_no_padding(proto.to_tensordict())
    tu.assign_non_tensor(td, calculate_entropy=calculate_entropy, global_batch_size=global_batch_size)
    return td


def _with_worker_defaults(handle: EngineHandle, data, *, infer: bool):
    """The keys TrainingWorker.train_batch / infer_batch inject when the caller did not set them."""
    from verl.utils import tensordict_utils as tu

    ec = handle.engine.engine_config
    defaults = dict(
        use_remove_padding=handle.engine.model_config.get("use_remove_padding", False),
        use_dynamic_bsz=ec.use_dynamic_bsz,
        max_token_len_per_gpu=ec.infer_max_token_len_per_gpu if infer else ec.max_token_len_per_gpu,
        micro_batch_size_per_gpu=ec.infer_micro_batch_size_per_gpu if infer else ec.micro_batch_size_per_gpu,
        use_fused_kernels=ec.use_fused_kernels,
    )
    for key, val in defaults.items():
        if key not in data.keys():
            tu.assign_non_tensor(data, **{key: val})
    return data


def _response_values(nested, data) -> torch.Tensor:
    """Per-sample response slice of an engine output (verl's own no_padding_2_padding), (B, R) padded."""
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(nested, data).float()


def actor_update(handle: EngineHandle, data) -> dict:
    """forward_backward_batch(data, ppo_loss) inside the engine's train mode; no optimizer step, no zero_grad on
    exit, so the FSDP parameters keep the gradients. `return_model_output` asks verl to keep the per-micro-batch
    outputs (it drops them by default after backward)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.tensordict_utils import maybe_fix_3d_position_ids

    data = _with_worker_defaults(handle, data.clone(), infer=False)
    tu.assign_non_tensor(data, return_model_output=True)
    maybe_fix_3d_position_ids(data)  # as BaseEngine.train_batch does before forward_backward_batch
    t0 = time.perf_counter()
    with handle.engine.train_mode(zero_grad_on_exit=False):
        output = handle.engine.forward_backward_batch(data, handle.loss_fn, forward_only=False)
    wall = time.perf_counter() - t0
    model_output = output["model_output"]
    result = {"loss": float(sum(output["loss"])), "metrics": output["metrics"], "wall_s": wall}
    if "log_probs" in model_output:
        result["log_probs"] = _response_values(model_output["log_probs"], data)
    if "entropy" in model_output:
        result["entropy"] = _response_values(model_output["entropy"], data)
    return result


def infer(handle: EngineHandle, data, *, calculate_entropy: bool = True) -> dict:
    """infer_batch as the worker runs it for old-log-prob (actor) or ref passes: eval mode, no loss."""
    from verl.utils import tensordict_utils as tu

    data = _with_worker_defaults(handle, data.clone(), infer=True)
    tu.assign_non_tensor(data, calculate_entropy=calculate_entropy, compute_loss=False)
    t0 = time.perf_counter()
    with handle.engine.eval_mode():
        output = handle.engine.infer_batch(data, loss_function=None)
    wall = time.perf_counter() - t0
    model_output = output["model_output"]
    result = {"wall_s": wall, "log_probs": _response_values(model_output["log_probs"], data)}
    if "entropy" in model_output:
        result["entropy"] = _response_values(model_output["entropy"], data)
    return result
