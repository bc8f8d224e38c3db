"""A GRPO-style multimodal micro-batch, different on every data-parallel rank, identical wherever it is rebuilt.

Each sample is `text, <vision_start>, image tokens, <vision_end>, text` (repeated per image) followed by the
response. Position ids are M-RoPE ids computed once by transformers' own `get_rope_index` and passed to both
the oracle and the model under test: verl's patched forward does not build them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # (B, L)
    attention_mask: torch.Tensor  # (B, L)
    position_ids: torch.Tensor | None  # (3, B, L) for M-RoPE models
    pixel_values: torch.Tensor | None  # (num_patches, patch_dim)
    image_grid_thw: torch.Tensor | None  # (num_images, 3)
    response_mask: torch.Tensor  # (B, R)
    advantages: torch.Tensor  # (B, R)
    old_log_prob_noise: torch.Tensor  # (B, R): old policy = oracle log-probs + this

    def model_inputs(self) -> dict:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.position_ids is not None:
            inputs["position_ids"] = self.position_ids
        if self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
            inputs["image_grid_thw"] = self.image_grid_thw
        return inputs

    def to(self, device) -> "MicroBatch":
        return MicroBatch(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()})


def make_micro_batch(config, spec, seed: int, dp_rank: int, micro_index: int) -> MicroBatch:
    """spec: the scenario's batch section (micro_batch_size, seq_len, response_len, images_per_sample, image_grid)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank * 1_009 + micro_index)
    text_vocab = min(config.image_token_id, config.video_token_id, config.vision_start_token_id,
                     config.vision_end_token_id) if hasattr(config, "image_token_id") else config.vocab_size
    batch_size, seq_len, response_len = spec.micro_batch_size, spec.seq_len, spec.response_len
    input_ids = torch.randint(0, text_vocab, (batch_size, seq_len), generator=gen)

    pixel_values = image_grid_thw = None
    n_images = spec.images_per_sample if hasattr(config, "vision_config") else 0
    if n_images:
        vision = config.vision_config
        t, h, w = spec.image_grid
        tokens_per_image = t * h * w // vision.spatial_merge_size**2
        prompt_len = seq_len - response_len
        block = tokens_per_image + 2
        if n_images * block + 1 > prompt_len:
            raise ValueError(f"prompt of {prompt_len} tokens cannot hold {n_images} image(s) of {block} tokens")
        for row in range(batch_size):
            start = 1
            for _ in range(n_images):
                input_ids[row, start] = config.vision_start_token_id
                input_ids[row, start + 1: start + 1 + tokens_per_image] = config.image_token_id
                input_ids[row, start + 1 + tokens_per_image] = config.vision_end_token_id
                start += block
        patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        num_images = batch_size * n_images
        pixel_values = torch.randn(num_images * t * h * w, patch_dim, generator=gen)
        image_grid_thw = torch.tensor([[t, h, w]] * num_images, dtype=torch.long)

    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    response_mask = torch.ones(batch_size, response_len)
    # Responses that stopped early: the tail of every other sample is padding for the loss.
    response_mask[1::2, response_len - max(1, response_len // 4):] = 0
    # GRPO: one normalised advantage per sample, the same for each of its tokens.
    adv = torch.randn(batch_size, generator=gen)
    adv = (adv - adv.mean()) / (adv.std() + 1e-6) if batch_size > 1 else adv
    advantages = adv[:, None].expand(batch_size, response_len).clone()
    old_log_prob_noise = 0.1 * torch.randn(batch_size, response_len, generator=gen)
    return MicroBatch(input_ids, attention_mask, None, pixel_values, image_grid_thw, response_mask, advantages,
                      old_log_prob_noise)


def with_position_ids(model, batch: MicroBatch) -> MicroBatch:
    """M-RoPE ids from transformers' own implementation, for models that have one."""
    inner = getattr(model, "model", None)
    if batch.image_grid_thw is None or not hasattr(inner, "get_rope_index"):
        return batch
    config = model.config
    mm_token_type_ids = torch.zeros_like(batch.input_ids, dtype=torch.int)
    mm_token_type_ids[batch.input_ids == config.image_token_id] = 1
    position_ids, _ = inner.get_rope_index(batch.input_ids, image_grid_thw=batch.image_grid_thw,
                                           attention_mask=batch.attention_mask, mm_token_type_ids=mm_token_type_ids)
    batch.position_ids = position_ids
    return batch
