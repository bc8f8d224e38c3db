"""verl 0.9.1's own training engine, driven the way its trainer drives it: verl's config dataclasses, its
TrainingWorker (constructed without Ray: torchrun's environment is all Worker needs), FSDPEngineWithLMHead's
initialize / forward_backward_batch / infer_batch, verl's ppo_loss, and verl's own conversion of the trainer's
padded batch to its no-padding layout. This module only builds inputs for it and reads its outputs; the
environment adapters it needs on a CPU-only host are in rank/verl_side/adapters.py.

verl's config objects come from rank/verl_side/verl_config.py. The engine loads the model from a directory
(HFModelConfig):
the seeded tiny model is written there with save_pretrained. verl builds it on the meta device on ranks != 0 and
broadcasts rank 0's weights.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch

from harness.rank.verl_side.adapters import install_host_adapters, offload_without_pinning


@dataclass
class EngineHandle:
    engine: object  # verl FSDPEngineWithLMHead
    worker: object  # verl TrainingWorker that owns it
    loss_fn: object | None  # partial(ppo_loss, config=actor_config), as ActorRolloutRefWorker binds it
    config: object  # rank/verl_config.VerlConfig the worker was built from
    adapters: list[str] = field(default_factory=list)
    init_s: float = 0.0


def build_engine(config, device_type: str) -> EngineHandle:
    """verl's TrainingWorker from the trainer's config objects (rank/verl_side/verl_config.py), then reset(): the
    engine's initialize() (meta init + broadcast, apply_monkey_patch, FSDP2 wrap, optimizer). The loss is bound as
    ActorRolloutRefWorker.init_model binds it (non-distillation branch)."""
    from verl.workers.utils.losses import ppo_loss

    adapters = install_host_adapters(device_type)
    # verl before #7127 unpads every batch through flash_attn.bert_padding (rank/verl_side/bert_padding.py): the
    # plain-torch stand-ins where flash-attn is absent and the tree has no fallbacks of its own.
    from harness.rank.verl_side.bert_padding import install_bert_padding

    adapters = adapters + install_bert_padding()
    if getattr(config.engine, "ulysses_sequence_parallel_size", 1) > 1:
        # verl's Ulysses all-to-all lives in its flash-attention path: the CPU stand-in for the varlen kernel
        # (rank/verl_side/varlen_attention.py), before the model is loaded under its attention implementation.
        from harness.rank.verl_side.varlen_attention import install_varlen_attention

        adapters = adapters + install_varlen_attention()
    t0 = time.perf_counter()
    loss_fn = None if config.engine.forward_only else partial(ppo_loss, config=config.actor)
    from verl.workers.engine_workers import TrainingWorker

    with offload_without_pinning(
        config.engine.forward_only or config.engine.offload_policy, device_type
    ) as pin_adapter:
        worker = TrainingWorker(config=config.training)
        worker.reset()
        if loss_fn is not None:
            worker.set_loss_fn(loss_fn)
    if pin_adapter:
        adapters = adapters + [pin_adapter]
    return EngineHandle(worker.engine, worker, loss_fn, config, adapters, time.perf_counter() - t0)


def make_verl_batch(
    samples: list,
    old_log_probs: list,
    *,
    temperature: float,
    global_batch_size: int,
    calculate_entropy: bool = True,
    pad_token_id: int = 0,
    sample_index: bool = False,
    ref_log_probs: list | None = None,
    trainer: str = "ray",
):
    """The global batch the trainer hands the workers, in the layout of the scenario's `trainer`: ray_batch (the
    padded batch, then verl's left_right_2_no_padding) or v1_batch (one entry per sample, nested).

    samples: rank/batch.Sample; old_log_probs: the rollout policy's log-probs of each sample's response (the
    oracle's, see oracle.sample_reference). sample_index: also a `sample_index` column (each sample's place in
    the global batch), which verl's loss ignores and the training update's watch reads
    (rank/verl_side/engine_update.py). ref_log_probs: the reference policy's log-probs of each response, added as
    the trainer adds compute_ref_log_prob's output (a `ref_log_prob` column) where loss.use_kl_loss asks.
    calculate_entropy: what the trainer asks of the update (verl_config.calculate_entropy: its actor config's
    calculate_entropy or a non-zero entropy_coeff).
    """
    from verl.utils import tensordict_utils as tu

    if trainer == "v1":
        td = v1_batch(samples, old_log_probs, sample_index=sample_index, ref_log_probs=ref_log_probs)
        tu.assign_non_tensor(td, temperature=temperature)  # the v1 trainer's extra_info
    else:
        td = ray_batch(samples, old_log_probs, pad_token_id, temperature, sample_index, ref_log_probs)
    tu.assign_non_tensor(td, calculate_entropy=calculate_entropy, global_batch_size=global_batch_size)
    return td


def ray_batch(
    samples: list, old_log_probs: list, pad_token_id: int, temperature: float, sample_index: bool, ref_log_probs
):
    """ray_trainer.py's batch: padded as verl/experimental/agent_loop/agent_loop.py::_postprocess builds it (prompts
    left-padded, responses right-padded, input_ids = prompts ++ responses, attention_mask, position_ids (B, 4, L),
    response_mask (B, R); non_tensor_batch["multi_modal_inputs"] one dict per sample), then as
    ray_trainer.py::_update_actor converts it: DataProto.to_tensordict() -> left_right_2_no_padding(), which nests
    input_ids and position_ids and keeps response_mask dense, (B, the batch's longest response)."""
    import numpy as np
    from verl import DataProto
    from verl.workers.utils.padding import left_right_2_no_padding

    # A text-only sample's entry is empty, as verl's dataset leaves it for a sample without images.
    multi_modal_inputs = np.array([_multi_modal_inputs(x) for x in samples], dtype=object)
    extra = {"sample_index": torch.arange(len(samples))} if sample_index else {}
    ref = {} if ref_log_probs is None else {"ref_log_prob": padded_rows(ref_log_probs)}
    proto = DataProto.from_dict(
        tensors={**extra, **padded_tensors(samples, old_log_probs, pad_token_id), **ref},
        non_tensors={"multi_modal_inputs": multi_modal_inputs},
        meta_info={"temperature": temperature},
    )
    return left_right_2_no_padding(proto.to_tensordict())


def v1_batch(samples: list, old_log_probs: list, *, sample_index: bool, ref_log_probs):
    """trainer/ppo/v1's batch: each sample's entry as its agent loop puts it in the TransferQueue
    (trainer/ppo/v1/agent_loop_tq.py _agent_loop_postprocess: prompts, responses, response_mask and loss_mask of
    the response's own length, input_ids = prompts ++ responses, position_ids (4, p + r), multi_modal_inputs; no
    attention_mask), stacked by verl's list_of_dict_to_tensordict (nested where the lengths differ, as they do
    here); then the per-sample columns the trainer writes back with verl's own helpers: advantages
    (_compute_advantage: response_to_nested), old_log_probs and ref_log_prob (response_from_nested of the engine's
    output there: the same per-sample rows, here nested by response_to_nested from the rows given)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict
    from verl.workers.utils.padding import response_to_nested

    entries = []
    for i, x in enumerate(samples):
        # as AgentLoopOutput.as_dict makes them: int64 tensors of the ids; every response token is the model's
        entry = {
            "prompts": x.prompt_ids.to(torch.int64),
            "responses": x.response_ids.to(torch.int64),
            "response_mask": torch.ones(len(x.response_ids), dtype=torch.int64),
        }
        entry["loss_mask"] = entry["response_mask"]
        entry["input_ids"] = torch.cat([entry["prompts"], entry["responses"]])
        entry["position_ids"] = x.position_ids
        entry["multi_modal_inputs"] = _multi_modal_inputs(x)
        if sample_index:
            entry["sample_index"] = torch.tensor(i)
        entries.append(entry)
    td = list_of_dict_to_tensordict(entries)
    mask = td["response_mask"]
    td["old_log_probs"] = response_to_nested(padded_rows(old_log_probs), mask)
    td["advantages"] = response_to_nested(
        padded_rows([torch.full((len(x.response_ids),), x.advantage) for x in samples]), mask
    )
    if ref_log_probs is not None:
        td["ref_log_prob"] = response_to_nested(padded_rows(ref_log_probs), mask)
    return td


def batch_layout(trainer: str, data) -> dict:
    """What the record keeps of the batch a trainer handed verl: response_mask's layout and each sample's response
    length (a batch of one length cannot tell the two trainers' layouts apart)."""
    mask = data["response_mask"]
    if getattr(mask, "is_nested", False):
        layout, lengths = "nested", mask.offsets().diff().tolist()
    else:
        layout, lengths = f"dense {mask.shape[0]}x{mask.shape[1]}", mask.sum(-1).tolist()
    return {"trainer": trainer, "response_mask": layout, "response_lengths": [int(n) for n in lengths]}


def _multi_modal_inputs(sample) -> dict:
    if sample.pixel_values is None:
        return {}
    return {"pixel_values": sample.pixel_values, "image_grid_thw": sample.image_grid_thw}


def padded_tensors(samples: list, old_log_probs: list, pad_token_id: int) -> dict:
    """The trainer's padded tensors, in its key order: prompts left-padded, responses right-padded, input_ids =
    prompts ++ responses, attention_mask, position_ids (B, 4, L), response_mask (B, R), old_log_probs, advantages."""
    n = len(samples)
    p_max = max(len(x.prompt_ids) for x in samples)
    r_max = max(len(x.response_ids) for x in samples)
    prompts = torch.full((n, p_max), pad_token_id, dtype=torch.long)
    responses = torch.full((n, r_max), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(n, p_max + r_max, dtype=torch.long)
    rows = samples[0].position_ids.shape[0]  # 4 (a text row and M-RoPE's 3), or 1 for a text-only model
    position_ids = torch.zeros(n, rows, p_max + r_max, dtype=torch.long)
    response_mask = torch.zeros(n, r_max, dtype=torch.long)
    old_log_prob_rows = torch.zeros(n, r_max)
    advantages = torch.zeros(n, r_max)
    for i, x in enumerate(samples):
        p, r = len(x.prompt_ids), len(x.response_ids)
        prompts[i, p_max - p :] = x.prompt_ids
        responses[i, :r] = x.response_ids
        attention_mask[i, p_max - p : p_max + r] = 1
        position_ids[i, :, p_max - p : p_max + r] = x.position_ids
        response_mask[i, :r] = 1
        old_log_prob_rows[i, :r] = old_log_probs[i]
        advantages[i, :r] = x.advantage
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids if rows > 1 else position_ids[:, 0],  # a text-only model's are (B, L)
        "response_mask": response_mask,
        "old_log_probs": old_log_prob_rows,
        "advantages": advantages,
    }


def padded_rows(rows: list) -> torch.Tensor:
    """(B, R) float rows, zeros past each response's end (the trainer's ref_log_prob: compute_ref_log_prob's
    output turned back to padding)."""
    out = torch.zeros(len(rows), max(len(x) for x in rows))
    for i, x in enumerate(rows):
        out[i, : len(x)] = x
    return out


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
        if key not in data:
            tu.assign_non_tensor(data, **{key: val})
    return data


def _response_values(nested, data) -> torch.Tensor:
    """Per-sample response slice of an engine output, (B, R) padded, as the trainer takes it: ray_trainer's
    no_padding_2_padding, or under a nested response_mask (the v1 trainer's) its response_from_nested; on the CPU
    where the oracle's numbers are (on a CUDA run verl's outputs are on the device: the H200 check found the
    comparison mixing cuda:0 and cpu)."""
    from verl.workers.utils.padding import no_padding_2_padding, response_from_nested

    mask = data["response_mask"]
    if getattr(mask, "is_nested", False):
        return response_from_nested(nested, mask).to_padded_tensor(0.0).float().cpu()
    return no_padding_2_padding(nested, data).float().cpu()


# Environment adapter `keep-grads-on-exit`: verl before #6717 (2026-06-14) has no `zero_grad_on_exit`: its train-mode
# context zeroes the gradients whenever it exits (train_batch steps the optimizer inside it). The step under test runs
# forward_backward_batch alone and is judged on the gradients it leaves, as later verl keeps them with
# zero_grad_on_exit=False: the engine's optimizer_zero_grad is held off while that context exits, and only then.
KEEP_GRADS_ON_EXIT = "keep-grads-on-exit"


@contextmanager
def _grads_kept_on_exit(engine, active: bool):
    if active:
        engine.optimizer_zero_grad = lambda: None  # an instance attribute over the class's method
    try:
        yield
    finally:
        if active:
            del engine.optimizer_zero_grad


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
    mode = handle.engine.train_mode(zero_grad_on_exit=False)
    kept = [] if hasattr(mode, "zero_grad_on_exit") else [KEEP_GRADS_ON_EXIT]
    with _grads_kept_on_exit(handle.engine, bool(kept)), mode:
        output = handle.engine.forward_backward_batch(data, handle.loss_fn, forward_only=False)
    wall = time.perf_counter() - t0
    model_output = output["model_output"]
    result = {"loss": float(sum(output["loss"])), "metrics": output["metrics"], "wall_s": wall, "adapters": kept}
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


def rank_share(data, rank: int, world: int):
    """This data-parallel group's part of the converted global batch (rank, world: the group and the number of
    groups; without sequence parallelism each rank is a group), cut as verl's dispatch cuts it (protocol.py's
    chunk: chunk_tensordict, then contiguous + consolidate). verl converts the whole batch to its no-padding
    layout in the trainer, before the split, so a rank's own samples are never converted on their own."""
    from verl.utils import tensordict_utils as tu

    return tu.contiguous(tu.chunk_tensordict(data, world)[rank]).consolidate()
