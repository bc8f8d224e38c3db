"""The actor objective of a GRPO/PPO step, written from the algorithm (not taken from verl), plain torch."""
from __future__ import annotations

import torch


def logprobs_and_entropy_from_logits(logits: torch.Tensor, labels: torch.Tensor, temperature: float,
                                     scale_in_logits_dtype: bool = False):
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
    return per_token[:, -response_len - 1:-1]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def ppo_actor_loss(log_prob, old_log_prob, advantages, response_mask, entropy, *, clip_ratio: float,
                   clip_ratio_c: float, entropy_coeff: float) -> torch.Tensor:
    """Clipped surrogate with dual clip for negative advantages, token-mean, minus an entropy bonus."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    surrogate = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = torch.maximum(surrogate, clipped)
    pg = torch.where(advantages < 0, torch.minimum(pg, -advantages * clip_ratio_c), pg)
    return masked_mean(pg, response_mask) - entropy_coeff * masked_mean(entropy, response_mask)
