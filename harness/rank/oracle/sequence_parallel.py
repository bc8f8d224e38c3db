"""What Ulysses sequence parallelism (SP) changes on the engine path's rank side: who gets which data, and where
each response token's log-prob sits relative to the SP shards verl cut the packed sequence into.

verl's engine builds a (dp, sp) device mesh (rank = dp_rank * sp + sp_rank, transformer_impl.py) and its dispatch
hands each data-parallel group, not each rank, a share of the batch: the sp ranks of a group get the same
samples, pack them into one (1, nnz) sequence, pad it to a multiple of sp (verl's ulysses_pad) and each compute
one contiguous 1/sp of it. A log-prob at packed position j scores the token at j + 1 from the hidden state at j.
"""

from __future__ import annotations


def data_parallel_rank(rank: int, sp: int) -> int:
    return rank // sp


def data_parallel_size(world: int, sp: int) -> int:
    return world // sp


def response_positions(samples: list, micro_batch_size: int, sp: int) -> list[tuple[int, int, int]]:
    """Per response token of `samples` (in order): (SP shard, offset in the shard, shard length) of the packed
    position its log-prob is computed at. Micro-batches are `micro_batch_size` consecutive samples (verl's split
    without dynamic batch size), each packed and padded on its own."""
    out = []
    for start in range(0, len(samples), micro_batch_size):
        micro = samples[start : start + micro_batch_size]
        lengths = [len(s.prompt_ids) + len(s.response_ids) for s in micro]
        nnz = sum(lengths)
        shard_len = (nnz + (sp - nnz % sp) % sp) // sp
        offset = 0
        for s, length in zip(micro, lengths):
            first = offset + len(s.prompt_ids) - 1  # the hidden state before the first response token
            for t in range(len(s.response_ids)):
                j = first + t
                out.append((j // shard_len, j % shard_len, shard_len))
            offset += length
    return out


def logprob_errors_by_position(actual, expected, samples: list, micro_batch_size: int, sp: int, group: int) -> dict:
    """|log p - log p_oracle| of every response token with where it sits: {"sp": sp, "group": data-parallel
    group, "tokens": [[shard, offset, shard_len, error], ...]}, for judge_cell/diagnosis.py to tell errors at shard
    boundaries from others (the ranks of one group report the same gathered log-probs)."""
    positions = response_positions(samples, micro_batch_size, sp)
    tokens = []
    k = 0
    for i, s in enumerate(samples):
        for t in range(len(s.response_ids)):
            shard, offset, shard_len = positions[k]
            tokens.append([shard, offset, shard_len, float((actual[i, t] - expected[i, t]).abs())])
            k += 1
    return {"sp": sp, "group": group, "tokens": tokens}


def token_ranks(samples: dict, micro_batch_size: int, sp: int) -> dict:
    """group -> the rank that computes each of the group's response tokens, in sample order (samples: the
    oracle's (group, micro) -> [Sample]): the SP rank whose shard holds the token's log-prob position."""
    out = {}
    for group in sorted({g for g, _ in samples}):
        ordered = [x for key in sorted(k for k in samples if k[0] == group) for x in samples[key]]
        out[group] = [group * sp + shard for shard, _, _ in response_positions(ordered, micro_batch_size, sp)]
    return out
