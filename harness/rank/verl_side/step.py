"""The direct path's actor step: forward with the rollout temperature, PPO loss, backward, over this rank's
micro-batches, the model called as verl's patched forward is called (no verl engine in between)."""

from __future__ import annotations

import contextlib

import torch

from harness.rank.measures.around_step import SavedFullWeights
from harness.rank.oracle.loss import logprobs_and_entropy_from_logits, micro_batch_loss, next_token_labels


def actor_step(
    model_fn,
    batches: dict,
    rank: int,
    scenario,
    oracle_log_probs: dict,
    autocast,
    logits_mode: bool = False,
    saved: SavedFullWeights | None = None,
    phase=None,
) -> dict:
    """Forward (+ backward unless forward-only) over this rank's micro-batches; returns per micro-batch
    (log_probs, entropy) detached. logits_mode: the model returns logits (FSDP's unfused path) and log-probs
    and entropy are computed from them in plain torch. phase: called with "forward"/"backward" as they start."""
    outputs = {}
    for micro in range(scenario.grad_accum):
        batch = batches[(rank, micro)]
        if phase:
            phase("forward")
        grad_mode = torch.no_grad() if scenario.forward_only else torch.enable_grad()
        hooks = saved.hooks() if saved is not None and not scenario.forward_only else contextlib.nullcontext()
        with grad_mode, autocast(), hooks:
            if logits_mode:
                logits = model_fn(**batch.model_inputs(), use_cache=False).logits
                # verl divides bf16 logits by the temperature before upcasting; so does this baseline.
                log_probs, entropy = logprobs_and_entropy_from_logits(
                    logits, next_token_labels(batch.input_ids), scenario.temperature, scale_in_logits_dtype=True
                )
            else:
                result = model_fn(**batch.model_inputs(), use_cache=False, temperature=scenario.temperature)
                log_probs, entropy = result.log_probs, result.entropy
        if saved is not None:
            saved.measure()
        outputs[micro] = (log_probs.detach(), entropy.detach())
        if scenario.forward_only:
            continue
        if phase:
            phase("backward")
        loss = micro_batch_loss(log_probs, entropy, batch, oracle_log_probs[(rank, micro)], scenario)
        (loss / scenario.grad_accum).backward()
    return outputs
