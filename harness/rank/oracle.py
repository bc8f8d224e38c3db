"""The reference a run is judged against, computed without any of verl's code.

It must run before verl is imported: verl's apply_monkey_patch replaces forwards on the *class*, so afterwards
every instance, deep copies included, would run the code under test. The reference sees all ranks' micro-batches
and averages their gradients, which is what FSDP's reduce-scatter (ReduceOp.AVG) should produce.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field

from harness.rank.loss import logprobs_and_entropy_from_logits, micro_batch_loss, next_token_labels


@dataclass
class Reference:
    log_probs: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    entropy: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    grads: dict = field(default_factory=dict)  # parameter name -> averaged gradient (None: gets none)


def reference_forward(model, batch, temperature: float):
    logits = model(**batch.model_inputs(), use_cache=False).logits
    return logprobs_and_entropy_from_logits(logits, next_token_labels(batch.input_ids), temperature)


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


def sample_reference(model, samples: dict, scenario) -> Reference:
    """The oracle of the engine path. samples: (dp_rank, micro) -> [Sample] for every rank.

    Each sample runs alone, unpadded, through the plain fp32 model (never packed: packing is the code under
    test). Its rollout log-probs are set here: the oracle's own, slightly off, so the clip is exercised. The
    loss is the PPO objective over the whole global batch, token-mean over every response token of every rank
    (verl's loss_agg_mode "token-mean"), minus the entropy bonus averaged the same way; its gradient is what
    one optimizer step of verl's actor must see. Log-probs and entropy are kept per (rank, micro) as (B, R)
    with zeros past each response's end."""
    import torch

    from harness.rank.loss import ppo_token_losses

    assert "verl" not in sys.modules, "the oracle must be computed before verl is imported"
    reference_model = copy.deepcopy(model).float()
    reference_model.train()
    ref = Reference()
    total_tokens = sum(len(s.response_ids) for batch in samples.values() for s in batch)
    losses = []
    for key, batch in sorted(samples.items()):
        width = max(len(s.response_ids) for s in batch)
        log_probs, entropy = torch.zeros(len(batch), width), torch.zeros(len(batch), width)
        for i, s in enumerate(batch):
            p, r = len(s.prompt_ids), len(s.response_ids)
            ids = torch.cat([s.prompt_ids, s.response_ids])[None]
            logits = reference_model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     position_ids=s.position_ids[1:, None], pixel_values=s.pixel_values,
                                     image_grid_thw=s.image_grid_thw, use_cache=False).logits
            lp, ent = logprobs_and_entropy_from_logits(logits[0, p - 1:p + r - 1], s.response_ids,
                                                       scenario.temperature)
            s.old_log_probs = lp.detach() + s.old_log_prob_noise
            log_probs[i, :r], entropy[i, :r] = lp.detach(), ent.detach()
            if not scenario.forward_only:
                pg, _ = ppo_token_losses(lp, s.old_log_probs, torch.full_like(lp, s.advantage),
                                         clip_ratio=scenario.loss.clip_ratio, clip_ratio_c=scenario.loss.clip_ratio_c)
                losses.append(pg.sum() - scenario.loss.entropy_coeff * ent.sum())
        ref.log_probs[key], ref.entropy[key] = log_probs, entropy
    if not scenario.forward_only:
        (torch.stack(losses).sum() / total_tokens).backward()
        ref.grads = {name: (None if p.grad is None else p.grad.detach().clone())
                     for name, p in reference_model.named_parameters()}
    return ref
