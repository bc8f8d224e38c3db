"""Second reference for mixed precision: FSDP2's own unfused path under the same precision policy.

The fp32 oracle bounds how far a bf16 run may drift at all; this one shows whether a patch behaves like FSDP
itself does under that policy (lm_head called as a module, so FSDP gathers its weight in the param dtype and
reduce-scatters its gradient). It wraps a copy of the model with our own `fully_shard` calls that mirror
verl's wrap policy (each no-split block, the embeddings and lm_head when untied, then the root) and its shard
placement (the first dimension the world size divides), without importing verl.
"""
from __future__ import annotations

import copy
import sys

import torch
from torch import nn

from harness.loss import logprobs_and_entropy_from_logits, next_token_labels, ppo_actor_loss, response_slice
from harness.oracle import Reference, old_log_prob


def shard_placement(world: int):
    from torch.distributed.tensor import Shard

    def place(param):
        for dim, size in enumerate(param.shape):
            if size % world == 0:
                return Shard(dim)
        return Shard(0)

    return place


def wrap_like_verl(model: nn.Module, fsdp_kwargs: dict):
    from torch.distributed.fsdp import fully_shard

    tied = getattr(model.config, "tie_word_embeddings", False)
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if (type(module).__name__ in block_classes
                or (not tied and (isinstance(module, nn.Embedding) or leaf in ("embed_tokens", "lm_head")))):
            fully_shard(module, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    return model


def compute_fsdp_reference(model, batches: dict, scenario, rank: int, fsdp_kwargs: dict, autocast_ctx,
                           oracle: Reference) -> Reference:
    """This rank's log-probs/entropy and the full (gathered) gradients of FSDP's unfused step."""
    assert "verl" not in sys.modules, "the FSDP reference must be computed before verl is imported"
    ref_model = wrap_like_verl(copy.deepcopy(model), fsdp_kwargs)
    ref_model.train()
    ref = Reference()
    response_len = scenario.batch.response_len
    micro_steps = scenario.grad_accum
    for micro in range(micro_steps):
        batch = batches[(rank, micro)]
        grad_mode = torch.no_grad() if scenario.forward_only else torch.enable_grad()
        with grad_mode, autocast_ctx():
            logits = ref_model(**batch.model_inputs(), use_cache=False).logits
        log_probs, entropy = logprobs_and_entropy_from_logits(logits, next_token_labels(batch.input_ids),
                                                              scenario.temperature, scale_in_logits_dtype=True)
        ref.log_probs[(rank, micro)] = log_probs.detach()
        ref.entropy[(rank, micro)] = entropy.detach()
        if scenario.forward_only:
            continue
        loss = ppo_actor_loss(response_slice(log_probs, response_len),
                              old_log_prob(oracle.log_probs[(rank, micro)], batch, response_len),
                              batch.advantages, batch.response_mask, response_slice(entropy, response_len),
                              **scenario.loss.model_dump())
        (loss / micro_steps).backward()
    if not scenario.forward_only:
        from torch.distributed.tensor import DTensor

        ref.grads = {}
        for name, p in ref_model.named_parameters():
            g = p.grad
            ref.grads[name] = None if g is None else (g.full_tensor() if isinstance(g, DTensor) else g).detach().float()
    del ref_model
    return ref
