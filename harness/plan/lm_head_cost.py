"""What the lm_head unit costs per rank and step, by formula: its collective bytes and what autograd holds, for
FSDP's own path and for verl #6659's full_tensor(); and the real checkpoints' head sizes (models/real/) the
formula is projected onto. Read by `bench` (commands/bench.py) and its head cells (commands/bench_head.py).

Per rank and step, with f = (W-1)/W, V x H the lm_head weight, p the param dtype's bytes, r the reduce dtype's:
  FSDP's own path (lm_head(...); also the fsdp2-lmhead-forward candidate), reshard_after_forward=True:
    train: all-gather f*V*H*p in forward and again in backward, reduce-scatter f*V*H*r of the gradient
    forward-only: all-gather f*V*H*p
  full_tensor() (verl #6659): one all-gather of the fp32 master weight, f*V*H*4, in forward; the gathered copy
    (V*H*4 bytes) is held by autograd until backward; no reduce-scatter (which is the gradient bug).
The formulas are checked against the measured bytes of the tiny model at W = 2 and 4
(tests/distributed/test_determinism_and_gather_bytes.py) and of the head alone
(tests/distributed/test_bench_head_cells.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.paths import MODELS_DIR

REAL_MODELS_DIR = MODELS_DIR / "real"
FP32, BF16 = 4, 2


@dataclass(frozen=True)
class RealModel:
    name: str
    params_b: float
    vocab_size: int
    hidden_size: int
    tie_word_embeddings: bool


def real_models(directory: Path = REAL_MODELS_DIR) -> list[RealModel]:
    models = [RealModel(**json.loads(p.read_text())) for p in sorted(directory.glob("*.json"))]
    return sorted(models, key=lambda m: m.params_b)


def lm_head_bytes(
    path: str,
    vocab: int,
    hidden: int,
    world: int,
    *,
    param_bytes: int,
    reduce_bytes: int = FP32,
    forward_only: bool = False,
) -> dict:
    """Per-rank lm_head collective bytes of one step (see the module docstring) and what autograd holds."""
    f_num, f_den = world - 1, world
    elems = vocab * hidden
    if path == "fsdp":
        gathers = 1 if forward_only else 2
        ag = gathers * elems * param_bytes * f_num // f_den
        rs = 0 if forward_only else elems * reduce_bytes * f_num // f_den
        held = 0
    elif path == "full_tensor":
        ag = elems * FP32 * f_num // f_den
        rs = 0
        held = 0 if forward_only else elems * FP32
    else:
        raise ValueError(f"unknown lm_head path {path!r}")
    return {"all_gather": ag, "reduce_scatter": rs, "total": ag + rs, "held_fwd_to_bwd": held}
