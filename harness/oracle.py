"""The reference a run is judged against, computed without any of verl's code.

It must run before verl is imported: verl's apply_monkey_patch replaces forwards on the *class*, so afterwards
every instance, deep copies included, would run the code under test. The reference sees all ranks' micro-batches
and averages their gradients, which is what FSDP's reduce-scatter (ReduceOp.AVG) should produce.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field


from harness.loss import (logprobs_and_entropy_from_logits, next_token_labels, ppo_actor_loss,
                          response_slice)


@dataclass
class Reference:
    log_probs: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    entropy: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    grads: dict = field(default_factory=dict)  # parameter name -> averaged gradient (None: gets none)


def reference_forward(model, batch, temperature: float):
    logits = model(**batch.model_inputs(), use_cache=False).logits
    return logprobs_and_entropy_from_logits(logits, next_token_labels(batch.input_ids), temperature)


def old_log_prob(reference_log_probs, batch, response_len: int):
    """The rollout policy's log-probs: the current policy's, slightly off, so the clip is exercised."""
    return response_slice(reference_log_probs, response_len).detach() + batch.old_log_prob_noise


def micro_batch_loss(log_probs, entropy, batch, rollout_log_probs, scenario):
    """The PPO actor loss of one micro-batch, the same for the oracle and for the run under test. The rollout
    policy's log-probs always come from the oracle (see old_log_prob)."""
    response_len = scenario.batch.response_len
    return ppo_actor_loss(response_slice(log_probs, response_len).float(),
                          old_log_prob(rollout_log_probs, batch, response_len),
                          batch.advantages, batch.response_mask, response_slice(entropy, response_len).float(),
                          **scenario.loss.model_dump())


def compute_reference(model, batches: dict, scenario) -> Reference:
    """batches: (dp_rank, micro) -> MicroBatch for every rank of the run."""
    assert "verl" not in sys.modules, "the oracle must be computed before verl is imported"
    reference_model = copy.deepcopy(model).float()
    reference_model.train()
    ref = Reference()
    world = 1 + max(r for r, _ in batches)
    micro_steps = 1 + max(m for _, m in batches)
    for key, batch in sorted(batches.items()):
        log_probs, entropy = reference_forward(reference_model, batch, scenario.temperature)
        ref.log_probs[key] = log_probs.detach()
        ref.entropy[key] = entropy.detach()
        if scenario.forward_only:
            continue
        loss = micro_batch_loss(log_probs, entropy, batch, log_probs, scenario)
        # Each rank's micro-step loss is scaled by 1/micro_steps (gradient accumulation); FSDP averages ranks.
        (loss / (micro_steps * world)).backward()
    if not scenario.forward_only:
        ref.grads = {name: (None if p.grad is None else p.grad.detach().clone())
                     for name, p in reference_model.named_parameters()}
    return ref
