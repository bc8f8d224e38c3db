"""Whether a tiny model's cell fits this host's memory, before it starts (a head cell: plan/head_memory_model.py).

Every size of a scenario is under its ceiling (inputs/size_ceilings.py), but a scenario at several ceilings at once
(64 ranks, 64 samples of 512 tokens a micro-batch) is still more than a host holds. So right before a launch, as for
a head cell, the cell's estimate is compared with the memory available then; a cell that does not fit is skipped,
saying both, and never OOM-killed halfway (issue 71: 5 GB in 12 s, no limit on a rank).

The estimate, per rank: RANK_BASE_BYTES (the interpreter with torch, transformers and verl imported, the tiny model
built and wrapped) plus BYTES_PER_TOKEN for each token of one micro-batch (activations, logits, gradients, the
oracle's references). Both from records of this project's 2-core host, 12-06, peak RSS of the largest rank: the
tiny cells (2 samples of 32 tokens a micro-batch; 17 scenarios, direct and engine, 1 to 4 ranks, updates included)
532-717 MiB a rank; engine-long-sequences-1gpu (4 samples of 125-263 tokens, up to 1,052 in its micro-batch) 647 MiB
against 628-635 for the same engine path at 64 tokens (fsdp2-multigpu, engine-padded, engine-v1): ~20 KiB a token,
within the tiny cells' own spread. BYTES_PER_TOKEN takes 64 KiB, three times that, for the noise it stands in.
"""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30
RANK_BASE_BYTES = 768 * MIB  # above the 717 MiB largest measured tiny rank
BYTES_PER_TOKEN = 64 * 1024  # ~20 KiB measured (above), x3
# The engine path's prompt is a few tokens beside the response (rank/oracle/batch.py make_samples): at most 8 of
# text, or 7 around an image's tokens.
ENGINE_PROMPT_TOKENS = 16


def tokens_per_micro_batch(scenario) -> int:
    """The most tokens one micro-batch of a rank holds: the direct path pads every sample to seq_len; the engine's
    samples are a response and its prompt (an image's tokens added)."""
    batch = scenario.batch
    if scenario.path == "direct":
        return batch.micro_batch_size * batch.seq_len
    t, h, w = batch.image_grid
    image = batch.images_per_sample * (t * h * w + 2)  # before the spatial merge: an upper bound
    return batch.micro_batch_size * (batch.response_len + ENGINE_PROMPT_TOKENS + image)


def cell_bytes(scenario) -> int:
    """The cell's estimate, all ranks together."""
    return scenario.ranks * (RANK_BASE_BYTES + tokens_per_micro_batch(scenario) * BYTES_PER_TOKEN)


def memory_short(scenario, available: int) -> str | None:
    """Why the cell should not start with `available` bytes free (its estimate is more), or None where it fits."""
    needs = cell_bytes(scenario)
    if needs <= available:
        return None
    per_rank = needs / scenario.ranks
    return (
        f"needs ~{needs / GIB:.1f} GiB ({scenario.ranks} ranks x {per_rank / GIB:.2f} GiB: "
        f"{tokens_per_micro_batch(scenario)} tokens a micro-batch); {available / GIB:.1f} GiB available"
    )
