"""What a patch's lm_head costs in memory, from the records' head_memory (rank/measures/around_step.py LargestTensors).

verl's fused head exists so that a [tokens x vocab] logits tensor is never built whole: it computes the logits
one chunk of tokens at a time (FusedLinearForPPOFunction, chunk_size). That bound is read from the installed
verl's source (fused_head_chunk), so it is known without running upstream: an arm whose largest logits-shaped
tensor has more rows than one chunk builds more of them at once than verl's own head does, whichever arms ran
beside it (`verify --alone` included). The figure is the record's own, never looked up by the arm's name.
"""

from __future__ import annotations

import ast
import functools
import math
from typing import NamedTuple

from harness.python_ast import parse
from harness.records.measures import RecordedEngine, RecordedScenario
from harness.records.results import Record, measured_head_memory

# Where verl 0.9.x defines its torch fused head and where its models construct it (read as text, never imported:
# the user's process does not import torch).
FUSED_HEAD_FILE = "utils/experimental/torch_functional.py"
FUSED_HEAD_CLASS = "FusedLinearForPPO"
MODELS_DIR = "models/transformers"


@functools.lru_cache(maxsize=1)
def fused_head_chunk() -> tuple[int, str] | None:
    """(tokens per chunk, where it was read) of the installed verl's torch fused head: FusedLinearForPPO's
    default chunk_size, or the largest one a model file passes it; None where the code is not as expected."""
    from harness.errors import UsageError
    from harness.plan.arms import installed_verl_dir

    try:
        root = installed_verl_dir()  # found without running its __init__
    except UsageError:  # no verl package, or a materialised arm shadowing it: no chunk read
        return None
    try:
        tree = parse((root / FUSED_HEAD_FILE).read_text())
    except (OSError, SyntaxError):
        return None
    default = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == FUSED_HEAD_CLASS:
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            args = init.args if init else None
            if args:
                named = args.args[len(args.args) - len(args.defaults) :]
                default = next(
                    (ast.literal_eval(d) for a, d in zip(named, args.defaults) if a.arg == "chunk_size"), None
                )
    if not isinstance(default, int):
        return None
    chunk, where = default, f"{FUSED_HEAD_CLASS}'s default chunk_size, verl/{FUSED_HEAD_FILE}"
    for model_file in sorted((root / MODELS_DIR).glob("*.py")):
        try:
            calls = [n for n in ast.walk(parse(model_file.read_text())) if isinstance(n, ast.Call)]
        except SyntaxError:
            continue
        for call in calls:
            if getattr(call.func, "id", getattr(call.func, "attr", None)) != FUSED_HEAD_CLASS:
                continue
            for kw in call.keywords:
                if kw.arg == "chunk_size" and isinstance(kw.value, ast.Constant) and kw.value.value > chunk:
                    chunk, where = kw.value.value, f"chunk_size passed in verl/{MODELS_DIR}/{model_file.name}"
    return chunk, where


def fused_head_bound(record: Record) -> tuple[int, str] | None:
    """(rows, where read) of the largest tokens x vocab tensor verl's own head builds in the record's scenario:
    one chunk, where the scenario runs the torch fused head; None where it does not (use_fused_kernels off:
    verl's unfused head builds the whole logits; the triton backend chunks otherwise)."""
    spec = record.stamp.scenario_spec or RecordedScenario()
    if not (spec.engine or RecordedEngine()).use_fused_kernels or (spec.fused_backend or "torch") != "torch":
        return None
    return fused_head_chunk()


def head_memory_flag(record: Record) -> str | None:
    """A line when `record`'s largest tokens x vocab tensor has more rows than verl's fused head computes at once
    (fused_head_bound); None when it has not, or there is no figure (an error before the step ended,
    torch.compile) or no bound (fused kernels off)."""
    mine, bound = measured_head_memory(record), fused_head_bound(record)
    if not mine or bound is None:
        return None
    rows = math.prod(mine.largest_vocab_tensor_shape[:-1])
    chunk, where = bound
    if rows <= chunk:
        return None
    vocab = mine.largest_vocab_tensor_shape[-1]
    return (
        f"builds a {rows} x {vocab} tokens x vocab tensor ({mine.largest_vocab_tensor_bytes:,} bytes per rank, "
        f"{mine.largest_vocab_tensor_dtype}) where verl's fused head builds at most {chunk} x {vocab} at once "
        f"({where}): {rows / chunk:.2g}x the fused head's logits memory"
    )


class HeadMemoryFlag(NamedTuple):
    """A record flagged for its head memory, as the closing block and the verdict line say it (render/ reads it)."""

    record: Record
    text: str  # head_memory_flag's line
    sizes: str  # flag_sizes: "1052 x 256 > 512 x 256"


def flag_sizes(record: Record) -> str:
    """The sizes of a flagged record in a few characters: "1052 x 256 > 512 x 256"."""
    mine, (chunk, _) = measured_head_memory(record), fused_head_bound(record)
    shape = mine.largest_vocab_tensor_shape
    return f"{math.prod(shape[:-1])} x {shape[-1]} > {chunk} x {shape[-1]}"
