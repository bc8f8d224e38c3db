"""The actor objective of a GRPO/PPO step, written from the algorithm (not taken from verl), plain torch.

The oracle uses it, and so does the direct path's step, where the harness itself plays verl's trainer."""

from __future__ import annotations

import torch


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float, scale_in_logits_dtype: bool = False
):
    """Per-token log p(label) and entropy of softmax(logits / temperature), in fp32.

    scale_in_logits_dtype: divide by the temperature before the fp32 upcast, as verl's actor does with bf16
    logits; the fp32 oracle divides in fp32.
    """
    scaled = (logits / temperature).float() if scale_in_logits_dtype else logits.float() / temperature
    log_p = torch.log_softmax(scaled, dim=-1)
    token_log_p = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return token_log_p, entropy


def next_token_labels(input_ids: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1; the last position wraps around, as in verl's rolled labels."""
    return torch.roll(input_ids, shifts=-1, dims=-1)


def response_slice(per_token: torch.Tensor, response_len: int) -> torch.Tensor:
    """The positions whose next token is a response token."""
    return per_token[:, -response_len - 1 : -1]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def ppo_token_losses(log_prob, old_log_prob, advantages, *, clip_ratio: float, clip_ratio_c: float):
    """Per token: the clipped surrogate with dual clip for negative advantages, and the ratio."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    surrogate = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = torch.maximum(surrogate, clipped)
    pg = torch.where(advantages < 0, torch.minimum(pg, -advantages * clip_ratio_c), pg)
    return pg, ratio


def ppo_actor_loss(
    log_prob,
    old_log_prob,
    advantages,
    response_mask,
    entropy,
    *,
    clip_ratio: float,
    clip_ratio_c: float,
    entropy_coeff: float,
) -> torch.Tensor:
    """Token-mean of the clipped surrogate over one micro-batch, minus an entropy bonus."""
    pg, _ = ppo_token_losses(log_prob, old_log_prob, advantages, clip_ratio=clip_ratio, clip_ratio_c=clip_ratio_c)
    return masked_mean(pg, response_mask) - entropy_coeff * masked_mean(entropy, response_mask)


def old_log_prob(reference_log_probs, batch, response_len: int):
    """The rollout policy's log-probs: the current policy's, slightly off, so the clip is exercised."""
    return response_slice(reference_log_probs, response_len).detach() + batch.old_log_prob_noise


def micro_batch_loss(log_probs, entropy, batch, rollout_log_probs, scenario):
    """The PPO actor loss of one micro-batch, the same for the oracle and for the run under test. The rollout
    policy's log-probs always come from the oracle (see old_log_prob)."""
    response_len = scenario.batch.response_len
    return ppo_actor_loss(
        response_slice(log_probs, response_len).float(),
        old_log_prob(rollout_log_probs, batch, response_len),
        batch.advantages,
        batch.response_mask,
        response_slice(entropy, response_len).float(),
        **scenario.loss.model_dump(),
    )
