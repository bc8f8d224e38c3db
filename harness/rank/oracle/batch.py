"""A GRPO-style micro-batch, different on every data-parallel rank, identical wherever it is rebuilt.

Vision-language families: each sample is `text, <image start>, image tokens, <image end>, text` (repeated per
image) followed by the response. Their position ids are M-RoPE ids computed once by the family's own
transformers `get_rope_index` and passed to both the oracle and the model under test: verl's patched forwards do
not build them. Dense (text-only) families get text only and no position ids: both sides build the same 1-D ones.

What differs between families is data, in VISION_FAMILIES below: which tokens open and close an image, and how many
rows of position ids verl's forward wants for that family.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.rank.oracle.transformers_compat import rope_index_kwargs, transformers_major


@dataclass(frozen=True)
class VisionFamily:
    start_token: str  # config attribute naming the token that opens an image
    end_token: str  # ... and the one that closes it
    # 3: transformers' (temporal, height, width) rows. 4: a text row first, as verl's agent loop builds them;
    # verl's qwen2_vl.py and glm4v.py `process_position_ids` raise on anything but 4 rows.
    position_rows: int


VISION_FAMILIES = {
    "qwen3_vl": VisionFamily("vision_start_token_id", "vision_end_token_id", 3),
    "qwen3_vl_moe": VisionFamily("vision_start_token_id", "vision_end_token_id", 3),
    "qwen3_5": VisionFamily("vision_start_token_id", "vision_end_token_id", 3),
    "qwen3_5_moe": VisionFamily("vision_start_token_id", "vision_end_token_id", 3),
    "qwen2_vl": VisionFamily("vision_start_token_id", "vision_end_token_id", 4),
    "qwen2_5_vl": VisionFamily("vision_start_token_id", "vision_end_token_id", 4),
    "glm4v": VisionFamily("image_start_token_id", "image_end_token_id", 4),
}

# Token ids a random text token must never collide with (the ones a config defines among these).
_SPECIAL_TOKENS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "image_start_token_id",
    "image_end_token_id",
    "video_start_token_id",
    "video_end_token_id",
)


def vision_family(config) -> VisionFamily | None:
    """The family's image layout, None for a text-only model; a vision model we do not know is an error."""
    if getattr(config, "vision_config", None) is None:
        return None
    family = VISION_FAMILIES.get(config.model_type)
    if family is None:
        raise ValueError(
            f"no image layout for model_type {config.model_type!r}: add it to harness.rank.oracle.batch.VISION_FAMILIES"
        )
    return family


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # (B, L)
    attention_mask: torch.Tensor  # (B, L)
    position_ids: torch.Tensor | None  # (3 or 4, B, L) for M-RoPE models, None for dense ones
    pixel_values: torch.Tensor | None  # (num_patches, patch_dim)
    image_grid_thw: torch.Tensor | None  # (num_images, 3)
    response_mask: torch.Tensor  # (B, R)
    advantages: torch.Tensor  # (B, R)
    old_log_prob_noise: torch.Tensor  # (B, R): old policy = oracle log-probs + this

    def model_inputs(self) -> dict:
        """The forward's keyword arguments. return_dict=True because verl's FSDP engine passes it whenever fused
        kernels are on, and verl's dense_common.py fused forward raises without it; a plain transformers forward
        returns a dict by default anyway, so the oracle and the unfused baseline see no difference."""
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "return_dict": True}
        if self.position_ids is not None:
            inputs["position_ids"] = self.position_ids
        if self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
            inputs["image_grid_thw"] = self.image_grid_thw
        return inputs

    def to(self, device) -> MicroBatch:
        return MicroBatch(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()})


def _text_vocab(config) -> int:
    """Random text tokens are drawn below every special token id (and below the text vocabulary)."""
    text = getattr(config, "text_config", None) or config
    specials = [getattr(config, name) for name in _SPECIAL_TOKENS if isinstance(getattr(config, name, None), int)]
    return min([text.vocab_size] + specials)


def make_micro_batch(config, settings, seed: int, dp_rank: int, micro_index: int) -> MicroBatch:
    """settings: the scenario's batch section (BatchSettings: micro_batch_size, seq_len, response_len,
    images_per_sample, image_grid)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank * 1_009 + micro_index)
    batch_size, seq_len, response_len = settings.micro_batch_size, settings.seq_len, settings.response_len
    input_ids = torch.randint(0, _text_vocab(config), (batch_size, seq_len), generator=gen)

    pixel_values = image_grid_thw = None
    family = vision_family(config)
    n_images = settings.images_per_sample if family is not None else 0
    if n_images:
        vision = config.vision_config
        start_id, end_id = getattr(config, family.start_token), getattr(config, family.end_token)
        t, h, w = settings.image_grid
        tokens_per_image = t * h * w // vision.spatial_merge_size**2
        prompt_len = seq_len - response_len
        block = tokens_per_image + 2
        if n_images * block + 1 > prompt_len:
            raise ValueError(f"prompt of {prompt_len} tokens cannot hold {n_images} image(s) of {block} tokens")
        for row in range(batch_size):
            start = 1
            for _ in range(n_images):
                input_ids[row, start] = start_id
                input_ids[row, start + 1 : start + 1 + tokens_per_image] = config.image_token_id
                input_ids[row, start + 1 + tokens_per_image] = end_id
                start += block
        patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        num_images = batch_size * n_images
        pixel_values = torch.randn(num_images * t * h * w, patch_dim, generator=gen)
        image_grid_thw = torch.tensor([[t, h, w]] * num_images, dtype=torch.long)

    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    response_mask = torch.ones(batch_size, response_len)
    # Responses that stopped early: the tail of every other sample is padding for the loss.
    response_mask[1::2, response_len - max(1, response_len // 4) :] = 0
    # GRPO: one normalised advantage per sample, the same for each of its tokens.
    adv = torch.randn(batch_size, generator=gen)
    adv = (adv - adv.mean()) / (adv.std() + 1e-6) if batch_size > 1 else adv
    advantages = adv[:, None].expand(batch_size, response_len).clone()
    old_log_prob_noise = 0.1 * torch.randn(batch_size, response_len, generator=gen)
    return MicroBatch(
        input_ids, attention_mask, None, pixel_values, image_grid_thw, response_mask, advantages, old_log_prob_noise
    )


def text_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L) 0, 1, 2, ... over the attended tokens (verl's compute_position_id_with_mask)."""
    return torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0)


def with_position_ids(model, batch: MicroBatch) -> MicroBatch:
    """M-RoPE ids from the family's own transformers implementation, in the layout verl's forward expects."""
    family = vision_family(model.config)
    inner = getattr(model, "model", None)
    if family is None or batch.image_grid_thw is None or not hasattr(inner, "get_rope_index"):
        return batch
    config = model.config
    # transformers 5.x builds M-RoPE ids from token types (text 0, image 1, video 2), not from token ids.
    mm_token_type_ids = torch.zeros_like(batch.input_ids, dtype=torch.int)
    mm_token_type_ids[batch.input_ids == config.image_token_id] = 1
    mm_token_type_ids[batch.input_ids == config.video_token_id] = 2
    # Under transformers 4.x get_rope_index reads the image's place from the token ids (adapter rope-index-ids).
    position_ids, _ = inner.get_rope_index(
        batch.input_ids,
        image_grid_thw=batch.image_grid_thw,
        attention_mask=batch.attention_mask,
        **rope_index_kwargs(mm_token_type_ids, transformers_major()),
    )
    if family.position_rows == 4:
        position_ids = torch.cat([text_position_ids(batch.attention_mask)[None].to(position_ids), position_ids])
    batch.position_ids = position_ids
    return batch


@dataclass
class Sample:
    """One rollout as verl's trainer holds it before padding: a prompt with an image, a response of its own
    length, its advantage, and how far the rollout policy's log-probs sit from the oracle's (the oracle turns
    that into the rollout log-probs, see oracle.sample_reference; nothing here is changed by it)."""

    prompt_ids: torch.Tensor  # (p,)
    response_ids: torch.Tensor  # (r,)
    position_ids: torch.Tensor  # (4, p + r): a text row, then transformers' 3 M-RoPE rows; (1, p + r) text-only
    pixel_values: torch.Tensor | None  # (patches, patch_dim); None for a text-only sample
    image_grid_thw: torch.Tensor | None  # (1, 3)
    advantage: float
    old_log_prob_noise: torch.Tensor  # (r,)


def make_samples(model, settings, seed: int, dp_rank: int, micro_index: int) -> list[Sample]:
    """micro_batch_size samples whose prompt and response lengths differ from sample to sample and from rank to
    rank, so that a wrong token normalisation shows. Responses are 1/2 to all of settings.response_len long."""
    config = model.config
    family = vision_family(config)
    if family is None:
        return _text_samples(config, settings, seed, dp_rank, micro_index)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank * 1_009 + micro_index + 7)
    vision = config.vision_config
    t, h, w = settings.image_grid
    n_image_tokens = t * h * w // vision.spatial_merge_size**2
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    grid = torch.tensor([[t, h, w]], dtype=torch.long)
    start_id, end_id = getattr(config, family.start_token), getattr(config, family.end_token)
    text_vocab = _text_vocab(config)
    adv = torch.randn(settings.micro_batch_size, generator=gen)
    adv = (adv - adv.mean()) / (adv.std() + 1e-6) if settings.micro_batch_size > 1 else adv
    lengths = []  # (text before the image, text after it, response) per sample
    for _ in range(settings.micro_batch_size):
        lengths.append(
            [
                int(torch.randint(1, 4, (), generator=gen)),
                int(torch.randint(1, 5, (), generator=gen)),
                int(torch.randint(max(1, settings.response_len // 2), settings.response_len + 1, (), generator=gen)),
            ]
        )
    if settings.same_length:
        lengths = [[2, 2, settings.response_len]] * settings.micro_batch_size
    elif settings.micro_batch_size > 1 and len({sum(x) for x in lengths}) == 1:
        # Samples of one length are a layout of their own (same_length); a scenario that does not ask for it
        # must not fall into it by chance.
        lengths[-1][2] += -1 if lengths[-1][2] > 1 else 1
    with_image = micro_index not in settings.text_only_micro_batches
    image = [start_id] + [config.image_token_id] * n_image_tokens + [end_id] if with_image else []
    samples = []
    for i, (before, after, r) in enumerate(lengths):
        prompt = torch.cat(
            [
                torch.randint(0, text_vocab, (before,), generator=gen),
                torch.tensor(image, dtype=torch.long),
                torch.randint(0, text_vocab, (after,), generator=gen),
            ]
        )
        response = torch.randint(0, text_vocab, (r,), generator=gen)
        ids = torch.cat([prompt, response])[None]
        types = torch.zeros_like(ids, dtype=torch.int)
        types[ids == config.image_token_id] = 1
        rope, _ = model.model.get_rope_index(
            ids,
            image_grid_thw=grid if with_image else None,
            attention_mask=torch.ones_like(ids),
            **rope_index_kwargs(types, transformers_major()),
        )
        position_ids = torch.cat([torch.arange(ids.shape[1])[None], rope[:, 0]])
        pixels = torch.randn(t * h * w, patch_dim, generator=gen)  # drawn either way: the other samples stay put
        samples.append(
            Sample(
                prompt,
                response,
                position_ids,
                pixels if with_image else None,
                grid if with_image else None,
                float(adv[i]),
                0.1 * torch.randn(r, generator=gen),
            )
        )
    return samples


def _text_samples(config, settings, seed: int, dp_rank: int, micro_index: int) -> list[Sample]:
    """A text-only model's samples (dense Qwen3, Llama: verl's dense_common.py): prompts and responses of lengths
    that differ as make_samples' do, one row of position ids 0, 1, 2, ... (verl's compute_position_id_with_mask of
    an unpadded sample)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank * 1_009 + micro_index + 7)
    text_vocab = _text_vocab(config)
    adv = torch.randn(settings.micro_batch_size, generator=gen)
    adv = (adv - adv.mean()) / (adv.std() + 1e-6) if settings.micro_batch_size > 1 else adv
    low = max(1, settings.response_len // 2)
    lengths = [
        [
            int(torch.randint(2, 9, (), generator=gen)),
            int(torch.randint(low, settings.response_len + 1, (), generator=gen)),
        ]
        for _ in range(settings.micro_batch_size)
    ]
    if settings.same_length:
        lengths = [[4, settings.response_len]] * settings.micro_batch_size
    elif settings.micro_batch_size > 1 and len({sum(x) for x in lengths}) == 1:
        lengths[-1][1] += -1 if lengths[-1][1] > 1 else 1  # as make_samples: one length is a layout of its own
    samples = []
    for i, (p, r) in enumerate(lengths):
        prompt = torch.randint(0, text_vocab, (p,), generator=gen)
        response = torch.randint(0, text_vocab, (r,), generator=gen)
        position_ids = torch.arange(p + r)[None]
        samples.append(
            Sample(prompt, response, position_ids, None, None, float(adv[i]), 0.1 * torch.randn(r, generator=gen))
        )
    return samples


def ref_log_prob_offsets(seed: int, dp_rank: int, micro_index: int, samples: list[Sample]) -> list[torch.Tensor]:
    """How far the reference policy's log-probs sit from the seeded weights' in each sample of one micro-batch
    (r,) each: the trainer's reference is a frozen earlier policy, which the actor has moved away from; on the
    seeded weights the two would agree and every KL estimator but k1 would have no gradient (abs: the sign of
    rounding). Both sides add the same offsets: the oracle to its frozen model's log-probs, the engine path to what
    verl's own ref engine returns. Drawn from a generator of their own, so the samples' draws stay as they were."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank * 1_009 + micro_index + 7_919)
    return [0.1 * torch.randn(len(s.response_ids), generator=gen) for s in samples]
