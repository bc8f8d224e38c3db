"""What a patch's lm_head costs in memory, from the records' head_memory (rank/measures.py LargestTensors).

verl's fused head exists so that a [tokens x vocab] logits tensor is never built whole: it computes the logits
512 tokens at a time (FusedLinearForPPOFunction, chunk_size). An arm whose largest logits-shaped tensor is larger
than upstream's in the same scenario builds more of them at once than verl's own head does; the figure is
compared per scenario, never looked up by the arm's name.
"""

from __future__ import annotations

import math

from harness.spec.results import Record


def _measured(record: Record | None) -> dict | None:
    memory = (record.head_memory if record else None) or {}
    return memory if memory.get("measured") and memory.get("largest_vocab_tensor_shape") else None


def logits_cell(record: Record) -> str:
    """The largest logits-shaped tensor as rows x vocab and bytes, "-" where there is no figure."""
    memory = _measured(record)
    if not memory:
        return "-"
    shape = memory["largest_vocab_tensor_shape"]
    return f"{math.prod(shape[:-1])}x{shape[-1]} {_size(memory['largest_vocab_tensor_bytes'])}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def head_memory_flag(record: Record, upstream: Record | None) -> str | None:
    """A line when `record`'s largest tokens x vocab tensor is larger than upstream's in the same scenario; None
    when it is not, or when either has no figure (an error before the step ended, torch.compile)."""
    mine, theirs = _measured(record), _measured(upstream)
    if not mine or not theirs or mine["largest_vocab_tensor_bytes"] <= theirs["largest_vocab_tensor_bytes"]:
        return None
    rows = math.prod(mine["largest_vocab_tensor_shape"][:-1])
    their_rows = math.prod(theirs["largest_vocab_tensor_shape"][:-1])
    vocab = mine["largest_vocab_tensor_shape"][-1]
    ratio = mine["largest_vocab_tensor_bytes"] / theirs["largest_vocab_tensor_bytes"]
    return (
        f"builds a {rows} x {vocab} tokens x vocab tensor ({mine['largest_vocab_tensor_bytes']:,} bytes per rank, "
        f"{mine['largest_vocab_tensor_dtype']}) where upstream's largest is {their_rows} x {vocab} "
        f"({theirs['largest_vocab_tensor_bytes']:,} bytes): {ratio:.2g}x the fused head's logits memory"
    )
