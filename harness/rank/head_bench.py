"""The lm_head unit alone, at a real checkpoint's size: one rank of one path of `harness bench --real-size`.

An FSDP2-wrapped Linear(hidden, vocab) (its own unit under a root, as verl wraps an untied lm_head) computes
per-token log-probs and entropy of this rank's tokens one of these ways (--path):
  upstream   verl #6659: lm_head.weight.full_tensor() into verl's FusedLinearForPPO (the installed verl's);
  candidate  FusedLinearForPPO run as an FSDP forward method of lm_head (patches/fsdp2-lmhead-forward.diff);
  unfused    FSDP's own lm_head(hidden) path, log-probs and entropy from the logits in plain torch.
Under bf16-mixed `upstream` meets bf16 activations with the fp32 gathered weight and raises, as the engine cell
does; `upstream-cast` (the cast-full-tensor fixture's gather, then a cast to the activations' dtype) stands for
what #6659 gathers and holds there.

One path per torchrun (commands/bench_head.py launches each path of a cell on its own): a rank's process then
holds one path's memory and nothing any other path left behind, so its peak is that path's; a path that raises
leaves no half-entered FSDP state to another.

Per rank: the collectives' bytes (the torch profiler's trace, rank/measures/collectives.py), the bytes of the
tensors autograd holds from forward to backward (saved-tensor hooks, unique storages, read right after the
forward: FSDP's resharded parameter counts nothing), the peak resident memory over the step (Linux VmHWM, reset
through /proc/self/clear_refs before the step, minus the resident memory at that point: the CPU allocator keeps
no statistics of its own) and over the whole process (VmHWM at the end, the reference's phase included), and the
step's wall time. The gradient shard is judged against a plain fp32 reference of the same head: the master weight,
every rank's tokens one sample at a time, the same loss from its definition, summed into this rank's rows (the
torch.chunk rows FSDP2 gives it). One unmeasured step of the path comes before the measured one (FSDP's lazy
initialisation, first touches of memory).

Writes one JSON per rank into --out. Never imported by the user's side.
"""

from __future__ import annotations

import argparse
import json
import os
import types
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from harness.rank.phases import Phase

ENTROPY_COEFF = 0.01  # verl's entropy bonus; big enough to move the gradient beyond the fp32 tolerance
TEMPERATURE = 0.7
SAMPLE_TOKENS = 64  # the reference's sample: it adds one sample's gradient at a time, as the oracle does
PATHS = ("upstream", "upstream-cast", "candidate", "unfused")


class Head(nn.Module):
    """The root FSDP unit around lm_head (FSDP2 does not reshard a root after forward; verl's lm_head is a child)."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, hidden_states, labels, path: str):
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        if path == "unfused":
            logits = self.lm_head(hidden_states).float() / TEMPERATURE
            log_probs = logits.log_softmax(-1)
            token_log_probs = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            return token_log_probs, entropy
        if path == "candidate":
            return self.lm_head._fused_ppo(hidden_states, labels)
        weight = self.lm_head.weight.full_tensor()
        if path == "upstream-cast":
            weight = weight.to(hidden_states.dtype)
        return FusedLinearForPPO()(hidden_states, weight, labels, TEMPERATURE)


def _fused_ppo(lm_head, hidden_states, labels):
    from verl.utils.experimental.torch_functional import FusedLinearForPPO

    return FusedLinearForPPO()(hidden_states, lm_head.weight, labels, TEMPERATURE)


def rank_data(rank: int, tokens: int, hidden: int, vocab: int, seed: int):
    """(hidden states, labels, advantages) of one rank: any rank can rebuild any other's (the reference needs all)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (
        torch.randn(tokens, hidden, generator=g),
        torch.randint(0, vocab, (tokens,), generator=g),
        torch.randn(tokens, generator=g),
    )


def loss_of(log_probs, entropy, advantages, scale: float):
    """The policy-gradient loss (no clip: the first step's ratio is 1) with verl's entropy bonus, summed and scaled."""
    return (-(advantages * log_probs) - ENTROPY_COEFF * entropy.float()).sum() * scale


def row_range(vocab: int, n: int, coordinate: int) -> tuple[int, int]:
    """The rows FSDP2 gives shard `coordinate` of n: torch.chunk's pieces, the last shorter (or none)."""
    per = -(-vocab // n)
    start = min(per * coordinate, vocab)
    return start, min(start + per, vocab)


class SavedBytes:
    """Bytes of the distinct storages autograd saved for backward, read after the forward: a storage freed (or
    resized to nothing, as FSDP's reshard does) by then is not held."""

    def __init__(self):
        self.saved = []

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor):
        self.saved.append(tensor)
        return tensor

    def held(self, shape=None) -> int:
        seen, total = set(), 0
        for t in self.saved:
            if shape is not None and tuple(t.shape) != tuple(shape):
                continue
            s = t.untyped_storage()
            if s.nbytes() and s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                total += s.nbytes()
        return total


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current resident size (Linux 4.0+); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def step(model, path: str, hidden_states, labels, advantages, scale: float, world: int, trace: Path) -> dict:
    """One forward and backward of `path`, measured."""
    from harness.rank.measures.around_step import profiled

    saved = SavedBytes()
    held = {}

    def run():
        with saved.hooks():
            log_probs, entropy = model(hidden_states, labels, path)
        held["all"] = saved.held()
        held["weight_sized"] = saved.held(model.lm_head.weight.shape)
        saved.saved.clear()
        loss_of(log_probs, entropy, advantages, scale).backward()

    reset = reset_peak_rss()
    rss_before = _status_kb("VmRSS")
    _, comm, wall = profiled(run, trace, world, "cpu")
    peak = _status_kb("VmHWM")
    return {
        "step_s": round(wall, 3),
        "bytes": {kind: comm[kind]["bytes"] for kind in ("all_gather", "reduce_scatter", "all_reduce")},
        "dtypes": sorted({d for kind in ("all_gather", "reduce_scatter") for d in comm[kind]["dtypes"]}),
        "collective_ms": round(sum(comm[kind]["time_ms"] for kind in ("all_gather", "reduce_scatter")), 1),
        "held_fwd_to_bwd": held.get("all", 0),
        "held_weight_sized": held.get("weight_sized", 0),
        "peak_rss_over_step": (peak - rss_before) * 1024 if reset else None,
        "peak_rss": peak * 1024,
    }


def reference_rows(full_weight, rows: tuple[int, int], world: int, tokens: int, seed: int, scale: float):
    """This rank's rows of the fp32 reference gradient: every rank's tokens, one sample at a time."""
    start, end = rows
    grad = torch.zeros(end - start, full_weight.shape[1])
    vocab, hidden = full_weight.shape
    for r in range(world):
        h_all, y_all, a_all = rank_data(r, tokens, hidden, vocab, seed)
        for s in range(0, tokens, SAMPLE_TOKENS):
            h, y, a = h_all[s : s + SAMPLE_TOKENS], y_all[s : s + SAMPLE_TOKENS], a_all[s : s + SAMPLE_TOKENS]
            logits = (h @ full_weight.t()).requires_grad_()
            log_probs = (logits / TEMPERATURE).log_softmax(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            token_log_probs = log_probs.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            (d_logits,) = torch.autograd.grad(loss_of(token_log_probs, entropy, a, scale), logits)
            # logits = h W^T: the weight's gradient is d_logits^T h, of which this rank keeps its rows.
            grad += d_logits[:, start:end].t() @ h
    return grad


def squared_sums(got, expected, rows: int = 4096) -> tuple[float, float]:
    """(sum of expected^2, sum of (got - expected)^2) in float64, a block of rows at a time: whole-shard float64
    copies held 4.5 weight-sized tensors a rank (8B fp32 W=2: the process's peak, 10.8 GiB against the step's 9.7)."""
    ref_sq = diff_sq = 0.0
    for first in range(0, expected.shape[0], rows):
        want = expected[first : first + rows].double()
        ref_sq += float(want.pow(2).sum())
        if got is not None:
            diff_sq += float((got[first : first + rows].double() - want).pow(2).sum())
    return ref_sq, float("inf") if got is None else diff_sq


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--precision", choices=("fp32", "bf16-mixed"), required=True)
    p.add_argument("--path", choices=PATHS, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)

    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    from torch.distributed.tensor import init_device_mesh

    a.out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    Phase(a.out / f"progress_rank{rank}")  # its pid in the run directory, for the driver's kill path at its timeout
    torch.manual_seed(a.seed)
    mixed = a.precision == "bf16-mixed"
    fsdp = {
        "mesh": init_device_mesh("cpu", (world,)),
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if mixed else torch.float32, reduce_dtype=torch.float32
        ),
        "reshard_after_forward": True,
    }
    # Built on the meta device and sharded before any memory is taken: no rank ever holds the whole master weight
    # before the step (verl's engine loads a full state dict into the shards the same way).
    with torch.device("meta"):
        model = Head(a.hidden, a.vocab)
    fully_shard(model.lm_head, **fsdp)
    fully_shard(model, **fsdp)
    model.to_empty(device="cpu")
    rows = row_range(a.vocab, world, rank)
    with torch.no_grad():
        g = torch.Generator().manual_seed(a.seed)
        # Each rank draws the same full-size stream block by block and keeps its own rows.
        local = model.lm_head.weight.to_local()
        block = 8192
        for first in range(0, a.vocab, block):
            part = torch.randn(min(block, a.vocab - first), a.hidden, generator=g) * 0.02
            lo, hi = max(first, rows[0]), min(first + part.shape[0], rows[1])
            if lo < hi:
                local[lo - rows[0] : hi - rows[0]].copy_(part[lo - first : hi - first])
            del part
    model.lm_head._fused_ppo = types.MethodType(_fused_ppo, model.lm_head)
    register_fsdp_forward_method(model.lm_head, "_fused_ppo")

    # verl's module imported before any step: the first path measured must not pay it.
    import verl.utils.experimental.torch_functional  # noqa: F401

    hidden_states, labels, advantages = rank_data(rank, a.tokens, a.hidden, a.vocab, a.seed)
    # Each rank's loss is its share of the global sum over W * tokens; FSDP averages over ranks, hence x W.
    scale = world / (world * a.tokens)
    warm_peak_kb = 0
    try:
        # One unmeasured step first: FSDP's lazy initialisation and the first touch of every large buffer's pages
        # are then not the measured step's cost (a first step measured took 30 s against 14-19 s, 256 x 151936).
        warm_log_probs, warm_entropy = model(hidden_states, labels, a.path)
        loss_of(warm_log_probs, warm_entropy, advantages, scale).backward()
        del warm_log_probs, warm_entropy
        model.zero_grad(set_to_none=True)
        warm_peak_kb = _status_kb("VmHWM")  # the build and the warm-up (step() resets the peak before its own)
        result = step(
            model, a.path, hidden_states, labels, advantages, scale, world, a.out / f"trace_{a.path}_{rank}.json"
        )
    except Exception as exc:  # a path that raises is a finding (upstream under bf16), not the bench's end
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    dist.barrier()

    if "error" not in result:
        # The reference, after the step: the master weight gathered once (outside the measured step). The step's
        # gradient shard stays where FSDP put it (no copy: the reference's phase then holds less than the step).
        grad = model.lm_head.weight.grad
        got = grad.to_local().detach() if grad is not None else None
        with torch.no_grad():
            full_weight = model.lm_head.weight.full_tensor().float()
        expected = reference_rows(full_weight, rows, world, a.tokens, a.seed, 1.0 / (world * a.tokens))
        del full_weight
        result["ref_sq"], result["diff_sq"] = squared_sums(got, expected)
    # The process's own peak: the build, the warm-up, the step and the reference's phase, the most of them. This is
    # what the path needs of the host per rank (commands/bench_head.py's memory estimate is calibrated on it).
    result["peak_rss_process"] = max(warm_peak_kb, _status_kb("VmHWM")) * 1024
    results = {a.path: result}
    (a.out / f"rank{rank}.json").write_text(
        json.dumps({"rank": rank, "world": world, "rows": list(rows), "paths": results, "pid": os.getpid()})
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
