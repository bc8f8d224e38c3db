"""The ceiling of every size field of a scenario, each with why: one table (docs/SCENARIOS.md "Ceilings" shows it).

A scenario is data anyone can write (a pull request's scenarios/ too): `micro_batch_size: 1000000` or
`grad_accum: 1000000` was accepted and ran away (5 GB in 12 s, issue 71). Each size field's ceiling is its Field's
`le`, so a value above it is the scenario's one-line error (file, field, value, ceiling, why: inputs/scenario.py
validation_message), exit 2, before any cell runs. Every ceiling sits above every scenario of scenarios/ (the margin
is in the why), so none of them changes; a cell that passes them all may still not fit this host's memory:
plan/cell_memory.py refuses it before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ceiling:
    most: float
    why: str


# The tiny models (models/tiny-*.json): 64 hidden, 256 vocab, 2 layers, max_position_embeddings 512.
CEILINGS: dict[str, Ceiling] = {
    "ranks": Ceiling(64, "one torchrun per cell on one host; scenarios use at most 8"),
    "batch.seq_len": Ceiling(512, "the tiny models' max_position_embeddings; scenarios use at most 260"),
    "batch.response_len": Ceiling(511, "below seq_len's ceiling (a response is part of the sequence); at most 250"),
    "batch.micro_batch_size": Ceiling(
        64, "64 x 512 tokens a micro-batch is ~0.5 GiB a rank at ~16 KiB a token; at most 4"
    ),
    "batch.images_per_sample": Ceiling(8, "each image's tokens are part of the prompt; scenarios use at most 1"),
    "batch.image_grid": Ceiling(16, "t, h and w of an image's patch grid (16 x 16 x 16 patches at most); at most 4"),
    "batch.text_only_micro_batches": Ceiling(64, "an index of a micro-batch: below grad_accum's ceiling; at most 1"),
    "grad_accum": Ceiling(
        64, "micro-batches a rank runs per step, each a forward and backward; scenarios use at most 4"
    ),
    "steps": Ceiling(32, "RL steps of the update, each judged after every optimizer step; scenarios use at most 3"),
    "ppo_mini_batches": Ceiling(64, "divides grad_accum, so at most its ceiling; scenarios use at most 2"),
    "ppo_epochs": Ceiling(16, "passes over each step's batch; scenarios use at most 2"),
    "optim.lr_warmup_steps": Ceiling(10_000, "a schedule's length, not a size run; scenarios use at most 1"),
    "engine.max_token_len_per_gpu": Ceiling(65_536, "dynamic batching's cap on a micro-batch's tokens; at most 4096"),
    "engine.fsdp_size": Ceiling(64, "a group of ranks: at most ranks' ceiling; scenarios use at most 3"),
    "engine.ulysses_sequence_parallel_size": Ceiling(64, "divides ranks, so at most its ceiling; at most 2"),
    "head.hidden": Ceiling(16_384, "the lm_head unit's H: the largest real checkpoint of models/real/ has 5120"),
    "head.vocab": Ceiling(262_144, "the lm_head unit's V: the real checkpoints of models/real/ have 151936"),
    "head.tokens": Ceiling(65_536, "the lm_head unit's tokens per rank; bench-head's default is 256"),
    "model_overrides": Ceiling(
        4096,
        "any whole number a model override sets (layers, hidden, vocab, positions): the tiny models' largest is 512",
    ),
    "repeat": Ceiling(1000, "timed steps after the checked one (benchmarks); scenarios use 0"),
    "warmup": Ceiling(100, "untimed steps before the timed ones; scenarios use at most 1"),
    "timeout_s": Ceiling(7200, "a cell's wall-clock limit: two hours; scenarios use at most 600"),
}


def most(field: str) -> float:
    """The ceiling of a field (its dotted path): what its Field's `le` is."""
    return CEILINGS[field].most


def ceiling_words(field_path: tuple) -> str:
    """' (ceiling N: why)' for a validation error's location that is a size field (an item of a tuple field: the
    field's), else ''."""
    named = ".".join(str(part) for part in field_path if not isinstance(part, int))
    ceiling = CEILINGS.get(named)
    return f" (ceiling {ceiling.most:g}: {ceiling.why})" if ceiling else ""
