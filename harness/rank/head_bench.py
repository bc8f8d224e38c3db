"""The lm_head unit alone, at a real checkpoint's size: one rank of one path of `harness bench --real-size`.

An FSDP2-wrapped Linear(hidden, vocab) (its own unit under a root, as verl wraps an untied lm_head) computes
per-token log-probs and entropy of this rank's tokens one of these ways (the scenario's `head.way`):
  upstream   verl #6659: lm_head.weight.full_tensor() into verl's FusedLinearForPPO (the installed verl's);
  candidate  FusedLinearForPPO run as an FSDP forward method of lm_head (patches/fsdp2-lmhead-forward.diff);
  unfused    FSDP's own lm_head(hidden) path, log-probs and entropy from the logits in plain torch.
Under bf16-mixed `upstream` meets bf16 activations with the fp32 gathered weight and raises, as the engine cell
does; `upstream-cast` (the cast-full-tensor fixture's gather, then a cast to the activations' dtype) stands for
what #6659 gathers and holds there.

The path module of `path: head` (rank/worker.py runs its build, references and run, as it runs the direct and engine
paths): a head cell is a cell like every other, one torchrun per way (commands/bench_head.py plans one cell per way
of a size), so a rank's process holds one way's memory and nothing any other left behind, and its peak is that
way's; a way that raises (upstream under bf16) is the rank's error, as in any cell.

Per rank: the collectives' bytes (the torch profiler's trace, rank/measures/collectives.py), the bytes of the
tensors autograd holds from forward to backward (saved-tensor hooks, unique storages, read right after the
forward: FSDP's resharded parameter counts nothing), the peak resident memory over the step (Linux VmHWM, reset
through /proc/self/clear_refs before the step, minus the resident memory at that point: the CPU allocator keeps
no statistics of its own) and over the whole process (VmHWM at the end, the reference's phase included), and the
step's wall time. The gradient shard is judged against a plain fp32 reference of the same head: the master weight,
every rank's tokens one sample at a time, the same loss from its definition, summed into this rank's rows (the
torch.chunk rows FSDP2 gives it). One unmeasured step of the path comes before the measured one (FSDP's lazy
initialisation, first touches of memory).

Sets the rank's figures on its RankResult (`r.out.head_step`, records/measures.py HeadStep); judge_cell/head_step.py
merges them over the ranks. Never imported by the user's side.
"""

from __future__ import annotations

import os
import types
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

SAMPLE_TOKENS = 64  # the reference's sample: it adds one sample's gradient at a time, as the oracle does


class Head(nn.Module):
    """The root FSDP unit around lm_head (FSDP2 does not reshard a root after forward; verl's lm_head is a child)."""

    def __init__(self, hidden: int, vocab: int, temperature: float):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.temperature = temperature

    def forward(self, hidden_states, labels, path: str):
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        if path == "unfused":
            logits = self.lm_head(hidden_states).float() / self.temperature
            log_probs = logits.log_softmax(-1)
            token_log_probs = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            return token_log_probs, entropy
        if path == "candidate":
            return self.lm_head._fused_ppo(hidden_states, labels, self.temperature)
        weight = self.lm_head.weight.full_tensor()
        if path == "upstream-cast":
            weight = weight.to(hidden_states.dtype)
        return FusedLinearForPPO()(hidden_states, weight, labels, self.temperature)


def _fused_ppo(lm_head, hidden_states, labels, temperature):
    from verl.utils.experimental.torch_functional import FusedLinearForPPO

    return FusedLinearForPPO()(hidden_states, lm_head.weight, labels, temperature)


def rank_data(rank: int, tokens: int, hidden: int, vocab: int, seed: int):
    """(hidden states, labels, advantages) of one rank: any rank can rebuild any other's (the reference needs all)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (
        torch.randn(tokens, hidden, generator=g),
        torch.randint(0, vocab, (tokens,), generator=g),
        torch.randn(tokens, generator=g),
    )


def loss_of(log_probs, entropy, advantages, scale: float, entropy_coeff: float):
    """The policy-gradient loss (no clip: the first step's ratio is 1) with verl's entropy bonus (the scenario's
    loss.entropy_coeff, 0.01: big enough to move the gradient beyond the fp32 tolerance), summed and scaled."""
    return (-(advantages * log_probs) - entropy_coeff * entropy.float()).sum() * scale


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


@dataclass
class HeadRun:
    """What one rank's head cell works with: the wrapped head, the way it is computed, this rank's tokens (every
    rank can rebuild every other's: rank_data) and the loss's settings, all from the scenario."""

    model: nn.Module
    way: str
    rank: int
    world: int
    rows: tuple[int, int]  # the lm_head rows FSDP2 gives this rank
    tokens: int
    seed: int
    temperature: float
    entropy_coeff: float

    @property
    def scale(self) -> float:
        # Each rank's loss is its share of the global sum over W * tokens; FSDP averages over ranks, hence x W.
        return self.world / (self.world * self.tokens)

    def data(self, rank: int | None = None):
        head = self.model.lm_head.weight
        return rank_data(self.rank if rank is None else rank, self.tokens, head.shape[1], head.shape[0], self.seed)

    def forward_backward(self, hidden_states, labels, advantages, saved=None):
        """One forward and backward of the way; `saved` (SavedBytes) reads what autograd holds between them."""
        held = {}
        with saved.hooks() if saved else nullcontext():
            log_probs, entropy = self.model(hidden_states, labels, self.way)
        if saved:
            held["all"] = saved.held()
            held["weight_sized"] = saved.held(self.model.lm_head.weight.shape)
            saved.saved.clear()
        loss_of(log_probs, entropy, advantages, self.scale, self.entropy_coeff).backward()
        return held


def step(run: HeadRun, trace: Path) -> dict:
    """One forward and backward of the way, measured."""
    from harness.rank.measures.around_step import profiled

    hidden_states, labels, advantages = run.data()
    held = {}

    def measured():
        held.update(run.forward_backward(hidden_states, labels, advantages, SavedBytes()))

    reset = reset_peak_rss()
    rss_before = _status_kb("VmRSS")
    _, comm, wall = profiled(measured, trace, run.world, "cpu")
    peak = _status_kb("VmHWM")
    return {
        "step_s": round(wall, 3),
        "bytes": {kind: comm[kind]["bytes"] for kind in ("all_gather", "reduce_scatter", "all_reduce")},
        "dtypes": sorted({d for kind in ("all_gather", "reduce_scatter") for d in comm[kind]["dtypes"]}),
        "collective_ms": round(sum(comm[kind]["time_ms"] for kind in ("all_gather", "reduce_scatter")), 1),
        "held_fwd_to_bwd": held.get("all", 0),
        "held_weight_sized": held.get("weight_sized", 0),
        "peak_rss_over_step": (peak - rss_before) * 1024 if reset else None,
    }


def reference_rows(full_weight, run: HeadRun):
    """This rank's rows of the fp32 reference gradient: every rank's tokens, one sample at a time, the loss scaled
    to the global mean."""
    start, end = run.rows
    grad = torch.zeros(end - start, full_weight.shape[1])
    scale = 1.0 / (run.world * run.tokens)
    for r in range(run.world):
        h_all, y_all, a_all = run.data(r)
        for s in range(0, run.tokens, SAMPLE_TOKENS):
            h, y, a = h_all[s : s + SAMPLE_TOKENS], y_all[s : s + SAMPLE_TOKENS], a_all[s : s + SAMPLE_TOKENS]
            logits = (h @ full_weight.t()).requires_grad_()
            log_probs = (logits / run.temperature).log_softmax(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            token_log_probs = log_probs.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            (d_logits,) = torch.autograd.grad(loss_of(token_log_probs, entropy, a, scale, run.entropy_coeff), logits)
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


def build(r):
    """The head, FSDP2-wrapped as verl wraps an untied lm_head (its own unit under a root), on the meta device and
    sharded before any memory is taken: no rank ever holds the whole master weight before the step (verl's engine
    loads a full state dict into the shards the same way). Each rank draws the same full-size stream block by block
    and keeps its own rows."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    s, head = r.scenario, r.scenario.head
    # The host's cores shared by the cell's ranks (a real-size step is compute-bound; one rank a core on 2 cores).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // r.world))
    torch.manual_seed(s.seed)
    mixed = s.precision == "bf16-mixed"
    fsdp = {
        "mesh": r.mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if mixed else torch.float32, reduce_dtype=torch.float32
        ),
        "reshard_after_forward": True,
    }
    with torch.device("meta"):
        model = Head(head.hidden, head.vocab, s.temperature)
    fully_shard(model.lm_head, **fsdp)
    fully_shard(model, **fsdp)
    model.to_empty(device="cpu")
    rows = row_range(head.vocab, r.world, r.rank)
    with torch.no_grad():
        g = torch.Generator().manual_seed(s.seed)
        local = model.lm_head.weight.to_local()
        block = 8192
        for first in range(0, head.vocab, block):
            part = torch.randn(min(block, head.vocab - first), head.hidden, generator=g) * 0.02
            lo, hi = max(first, rows[0]), min(first + part.shape[0], rows[1])
            if lo < hi:
                local[lo - rows[0] : hi - rows[0]].copy_(part[lo - first : hi - first])
            del part
    model.lm_head._fused_ppo = types.MethodType(_fused_ppo, model.lm_head)
    register_fsdp_forward_method(model.lm_head, "_fused_ppo")
    # verl's module imported before any step: the first way measured must not pay it.
    import verl.utils.experimental.torch_functional  # noqa: F401

    r.model = HeadRun(model, head.way, r.rank, r.world, rows, head.tokens, s.seed, s.temperature, s.loss.entropy_coeff)


def references(r):
    """Nothing before the step: the reference needs the master weight gathered whole, which the step must not pay
    for; run() computes it after the measured step."""


def run(r):
    """One unmeasured step first (FSDP's lazy initialisation and the first touch of every large buffer's pages are
    then not the measured step's cost: a first step measured took 30 s against 14-19 s, 256 x 151936), the measured
    step, then the reference: the master weight gathered once, outside the measured step; the step's gradient shard
    stays where FSDP put it (no copy: the reference's phase then holds less than the step)."""
    run_ = r.model
    r.phase.enter("forward")
    run_.forward_backward(*run_.data())
    run_.model.zero_grad(set_to_none=True)
    warm_peak_kb = _status_kb("VmHWM")  # the build and the warm-up (step() resets the peak before its own)
    figures = step(run_, r.out_dir / f"trace_{run_.way}_{r.rank}.json")
    r.phase.enter("compare")
    grad = run_.model.lm_head.weight.grad
    got = grad.to_local().detach() if grad is not None else None
    with torch.no_grad():
        full_weight = run_.model.lm_head.weight.full_tensor().float()
    expected = reference_rows(full_weight, run_)
    del full_weight
    figures["ref_sq"], figures["diff_sq"] = squared_sums(got, expected)
    # The process's own peak: the build, the warm-up, the step and the reference's phase, the most of them: what the
    # way needs of the host per rank (plan/head_memory_model.py's estimate is calibrated on it).
    figures["peak_rss_process"] = max(warm_peak_kb, _status_kb("VmHWM")) * 1024
    head = r.scenario.head
    r.out.head_step = {"way": head.way, "hidden": head.hidden, "vocab": head.vocab, "tokens": head.tokens, **figures}
    dist.barrier()
