"""The actor objective of a GRPO/PPO step, written from the algorithm (not taken from verl), plain torch.

The oracle uses it, and so does the direct path's step, where the harness itself plays verl's trainer.

The engine path's objective is the whole family verl's actor config names (loss: in a scenario): the policy term
(`loss_mode` vanilla: PPO's clipped surrogate with clip-higher bounds and the dual clip; gspo: GSPO's sequence-level
ratio), minus `entropy_coeff` times the entropy, plus `kl_loss_coef` times a KL estimator against the reference
policy, each aggregated by `loss_agg_mode` over the whole mini-batch of every rank (sample_weights). What verl computes
was read from its source only to know the quantity (its clamps, which aggregation a mode means); the code is ours.
"""

from __future__ import annotations

import torch

# verl 0.9.1's ActorConfig accepts these five; the weights each gives a sample are in sample_weights.
AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# The KL estimators verl's kl_penalty accepts, by their names (aliases: kl = k1, mse = k2, low_var_kl = k3), each
# also with a '+' suffix: the estimator's value, k2's gradient (straight-through).
KL_BASE_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_TYPES = KL_BASE_TYPES + tuple(f"{k}+" for k in KL_BASE_TYPES)
LOSS_MODES = ("vanilla", "gspo")


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


def clip_bounds(loss) -> tuple[float, float]:
    """(low, high) of the ratio's clip: each its own setting where given, else clip_ratio (verl's rule)."""
    low = loss.clip_ratio if getattr(loss, "clip_ratio_low", None) is None else loss.clip_ratio_low
    high = loss.clip_ratio if getattr(loss, "clip_ratio_high", None) is None else loss.clip_ratio_high
    return low, high


def entropy_asked(loss) -> bool:
    """Whether the trainer asks the actor for entropy in the update: its calculate_entropy, or a non-zero
    entropy_coeff (ray_trainer._update_actor's rule). Without it no entropy term is in the loss."""
    return bool(getattr(loss, "calculate_entropy", False)) or loss.entropy_coeff != 0


def ppo_token_losses(log_prob, old_log_prob, advantages, *, clip_low: float, clip_high: float, clip_ratio_c: float):
    """Per token: PPO's clipped surrogate -A r against -A clip(r, 1 - low, 1 + high), the larger of the two; for a
    negative advantage, at most -A c (the dual clip). The ratio r = exp(log p - old log p), its exponent clamped to
    +-20 as verl clamps it. Returns (losses, ratio)."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    surrogate = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(surrogate, clipped)
    pg = torch.where(advantages < 0, torch.minimum(pg, -advantages * clip_ratio_c), pg)
    return pg, ratio


def ppo_clip_counts(ratio, advantages, *, clip_low: float, clip_high: float, clip_ratio_c: float):
    """Per token, as floats 0/1: whether the clipped surrogate is the larger (pg_clipfrac) and whether the dual
    clip bounds a negative advantage's loss (pg_clipfrac_lower)."""
    with torch.no_grad():
        surrogate = -advantages * ratio
        clipped_surrogate = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        clipped = (clipped_surrogate > surrogate).float()
        lower = ((torch.maximum(surrogate, clipped_surrogate) > -advantages * clip_ratio_c) & (advantages < 0)).float()
    return clipped, lower


def gspo_token_losses(log_prob, old_log_prob, advantage: float, *, clip_low: float, clip_high: float):
    """One sequence's per-token GSPO losses (Qwen's GSPO, arXiv 2507.18071): the sequence ratio s is the geometric
    mean of its token ratios, exp(mean_t(log p_t - old log p_t)). Each token carries s as its value and the gradient
    s * d log p_t (the ratio sg[s] * p_t / sg[p_t]); its log is clamped above at 10, as verl clamps it. Clipped as
    PPO's surrogate with the same low and high bounds, no dual clip. Returns (losses, token ratios, clipped 0/1)."""
    seq_log_ratio = (log_prob - old_log_prob).mean()
    log_ratio = torch.clamp(log_prob - log_prob.detach() + seq_log_ratio.detach(), max=10.0)
    ratio = torch.exp(log_ratio)
    surrogate = -advantage * ratio
    clipped_surrogate = -advantage * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    with torch.no_grad():
        clipped = (clipped_surrogate > surrogate).float()
    return torch.maximum(surrogate, clipped_surrogate), ratio, clipped


def kl_estimate(log_prob, ref_log_prob, kind: str):
    """Per token, the KL estimator `kind` between the policy and the reference (J. Schulman's k1/k2/k3):
    kl/k1 log p - log q; abs |log p - log q|; mse/k2 (log p - log q)^2 / 2; low_var_kl/k3 e^(log q - log p) -
    (log q - log p) - 1 with log q - log p clamped to +-20 and the result to +-10 (verl's clamps). A '+' suffix:
    the estimator's value with k2's gradient."""
    base = kind[:-1] if kind.endswith("+") else kind
    diff = log_prob - ref_log_prob
    if base in ("kl", "k1"):
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base in ("mse", "k2"):
        value = 0.5 * diff.square()
    elif base in ("low_var_kl", "k3"):
        back = torch.clamp(-diff, -20.0, 20.0)
        value = torch.clamp(torch.exp(back) - back - 1.0, -10.0, 10.0)
    else:
        raise ValueError(f"unknown kl_loss_type {kind!r} (known: {', '.join(KL_TYPES)})")
    if not kind.endswith("+"):
        return value
    k2 = 0.5 * diff.square()
    return k2 - k2.detach() + value.detach()


def sample_weights(mode: str, lengths: list[int], *, global_batch_size: int, horizon: int) -> list[float]:
    """Each sample's weight on its summed per-token losses, so that sum_s w_s sum_t l_st is the mode's value over
    the whole (mini-)batch of every rank: what verl's per-micro-batch losses add up to once FSDP averages the
    ranks' gradients (each micro-batch's part is scaled by the data-parallel size and normalised by the global
    token count or batch size). lengths: every sample's response tokens, all ranks; global_batch_size: the trainer's
    global_batch_size (its mini-batch of sequences); horizon: seq-mean-token-sum-norm's divisor, the response width
    the trainer pads to."""
    if mode == "token-mean":
        total = sum(lengths)
        return [1.0 / total] * len(lengths)
    if mode == "token-sum":
        return [1.0] * len(lengths)
    if mode == "seq-mean-token-sum":
        return [1.0 / global_batch_size] * len(lengths)
    if mode == "seq-mean-token-sum-norm":
        return [1.0 / (global_batch_size * horizon)] * len(lengths)
    if mode == "seq-mean-token-mean":
        return [1.0 / (global_batch_size * n) for n in lengths]
    raise ValueError(f"unknown loss_agg_mode {mode!r} (known: {', '.join(AGG_MODES)})")


def sample_terms(log_prob, entropy, old_log_prob, ref_log_prob, advantage: float, loss) -> dict:
    """One sample's per-token terms of the objective (each a tensor over its response tokens): "pg" the policy term
    of loss.loss_mode, "entropy" (None where the trainer asks for none), "kl" (None without use_kl_loss), and
    "total" = pg - entropy_coeff * entropy + kl_loss_coef * kl; with the per-token counts of the metrics
    ("clipped", "clipped_lower", "approx_kl": old log p - log p)."""
    low, high = clip_bounds(loss)
    mode = getattr(loss, "loss_mode", "vanilla")
    if mode == "gspo":
        pg, _, clipped = gspo_token_losses(log_prob, old_log_prob, advantage, clip_low=low, clip_high=high)
        clipped_lower = torch.zeros_like(clipped)
        approx_kl = (old_log_prob - log_prob).detach()
    elif mode == "vanilla":
        advantages = torch.full_like(log_prob, advantage)
        pg, ratio = ppo_token_losses(
            log_prob, old_log_prob, advantages, clip_low=low, clip_high=high, clip_ratio_c=loss.clip_ratio_c
        )
        clipped, clipped_lower = ppo_clip_counts(
            ratio, advantages, clip_low=low, clip_high=high, clip_ratio_c=loss.clip_ratio_c
        )
        approx_kl = -torch.clamp(log_prob - old_log_prob, -20.0, 20.0).detach()
    else:
        raise ValueError(f"unknown loss_mode {mode!r} (known: {', '.join(LOSS_MODES)})")
    total = pg
    ent = entropy if entropy_asked(loss) else None
    if ent is not None:
        total = total - loss.entropy_coeff * ent
    kl = None
    if getattr(loss, "use_kl_loss", False):
        kl = kl_estimate(log_prob, ref_log_prob, loss.kl_loss_type)
        total = total + loss.kl_loss_coef * kl
    return {
        "pg": pg,
        "entropy": ent,
        "kl": kl,
        "total": total,
        "clipped": clipped,
        "clipped_lower": clipped_lower,
        "approx_kl": approx_kl,
    }


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
    """Token-mean of the clipped surrogate over one micro-batch, minus an entropy bonus (the direct path's loss:
    vanilla PPO, one clip ratio both ways)."""
    pg, _ = ppo_token_losses(
        log_prob, old_log_prob, advantages, clip_low=clip_ratio, clip_high=clip_ratio, clip_ratio_c=clip_ratio_c
    )
    return masked_mean(pg, response_mask) - entropy_coeff * masked_mean(entropy, response_mask)


def old_log_prob(reference_log_probs, batch, response_len: int):
    """The rollout policy's log-probs: the current policy's, slightly off, so the clip is exercised."""
    return response_slice(reference_log_probs, response_len).detach() + batch.old_log_prob_noise


def micro_batch_loss(log_probs, entropy, batch, rollout_log_probs, scenario):
    """The PPO actor loss of one micro-batch on the direct path, the same for the oracle and for the run under test.
    The rollout policy's log-probs always come from the oracle (see old_log_prob)."""
    response_len = scenario.batch.response_len
    loss = scenario.loss
    return ppo_actor_loss(
        response_slice(log_probs, response_len).float(),
        old_log_prob(rollout_log_probs, batch, response_len),
        batch.advantages,
        batch.response_mask,
        response_slice(entropy, response_len).float(),
        clip_ratio=loss.clip_ratio,
        clip_ratio_c=loss.clip_ratio_c,
        entropy_coeff=loss.entropy_coeff,
    )
