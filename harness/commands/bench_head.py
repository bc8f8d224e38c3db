"""`harness bench --real-size`: the lm_head unit alone at real Qwen3-VL sizes, measured (rank/head_bench.py).

Each (head size, world, precision) runs every way of computing the head (upstream's full_tensor(), the candidate's
FSDP forward method, FSDP's unfused lm_head(...)) as a cell of its own: a scenario with `path: head` built here, run
through the one runner (run/runner.py run_plan) one cell at a time, as every other cell is: its torchrun started by
processes/client.starter (forked by the preloaded parent where one serves), its timeout, Ctrl-C (every rank ended,
the finished cells' records kept, exit 130), its RankResult and a stamped record in results/, rerunnable with
`harness rerun FILE:N`. A rank's process holds one way's memory, never what an earlier one left behind, and its peak
is that way's. Before each launch the way's memory estimate (plan/head_memory_model.py) is compared with what the
host has available then: one that does not fit is skipped, saying both, never OOM-killed halfway.

This module plans the cells and turns their records into one row per way beside the formula for the same size
(plan/lm_head_cost.py); render/head_table.py draws the table.
"""

from __future__ import annotations

from harness.plan.head_memory_model import (
    DEFAULT_TOKENS,
    GIB,
    PATHS,
    PRECISIONS,
    HeadCell,
    available_bytes,
    memory_estimate,
    path_peak,
    tokens_for,
)
from harness.plan.lm_head_cost import BF16, FP32, lm_head_bytes, real_models

# The sizes the issue asks for: Qwen3-VL-8B's and 32B's untied heads (models/real/).
REAL_HEAD_MODELS = ("Qwen3-VL-8B", "Qwen3-VL-32B")
REAL_HEAD_WORLDS = (2, 4)
FORMULA_PATH = {"upstream": "full_tensor", "upstream-cast": "full_tensor", "candidate": "fsdp", "unfused": "fsdp"}
__all__ = ["DEFAULT_TOKENS", "PRECISIONS", "REAL_HEAD_WORLDS", "head_cells", "run_head_bench"]


def parse_size(text: str) -> tuple[int, int]:
    """'HIDDENxVOCAB' -> (hidden, vocab)."""
    from harness.errors import UsageError

    try:
        hidden, vocab = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--head-size: {text!r} is not HIDDENxVOCAB (e.g. 4096x151936)") from None
    if hidden < 1 or vocab < 1:
        raise UsageError(f"--head-size: {text!r} needs positive sizes")
    for field, value in (("head.hidden", hidden), ("head.vocab", vocab)):
        _under_ceiling("--head-size", field, value)
    return hidden, vocab


def _under_ceiling(flag: str, field: str, value: int) -> None:
    """A size from the command line over its scenario field's ceiling (inputs/size_ceilings.py): one line."""
    from harness.errors import UsageError
    from harness.inputs.size_ceilings import CEILINGS

    ceiling = CEILINGS[field]
    if value > ceiling.most:
        raise UsageError(f"{flag}: {field} {value} is above its ceiling {ceiling.most:g} ({ceiling.why})")


def head_cells(
    real_size: bool, sizes: list[str], worlds: list[int], tokens: int, precisions=PRECISIONS
) -> list[HeadCell]:
    from harness.errors import UsageError

    _under_ceiling("--head-tokens", "head.tokens", tokens)
    named = []
    if real_size:
        by_name = {m.name: m for m in real_models()}
        named += [(n, by_name[n].hidden_size, by_name[n].vocab_size) for n in REAL_HEAD_MODELS]
    for text in sizes:
        hidden, vocab = parse_size(text)
        named.append((f"{hidden} x {vocab}", hidden, vocab))
    cells = [
        HeadCell(name, hidden, vocab, world, precision, tokens_for(precision, tokens))
        for name, hidden, vocab in named
        for world in worlds
        for precision in precisions
    ]
    if any(c.vocab == c.tokens for c in cells):
        # The weight-sized count goes by shape: a tokens x hidden activation of the weight's shape would count.
        raise UsageError(f"--head-tokens: {tokens} gives a cell as many tokens as vocabulary rows; choose another")
    return cells


def head_scenario(cell: HeadCell, way: str, timeout_s: float):
    """One way of one head cell as a scenario of `path: head`: what its ranks read, its record stores, and
    `harness rerun` runs again."""
    from harness.inputs.scenario import HeadSettings, Scenario

    return Scenario(
        name=f"head-{cell.hidden}x{cell.vocab}-w{cell.world}-{cell.precision}-{way}",
        description=f"the lm_head unit alone at {cell.name}'s size, {way}",
        path="head",
        head=HeadSettings(hidden=cell.hidden, vocab=cell.vocab, tokens=cell.tokens, way=way),
        ranks=cell.world,
        device="cpu",
        precision=cell.precision,
        timeout_s=timeout_s,
    )


def head_plan(cells: list[HeadCell], timeout_s: float) -> tuple[list[tuple], list[tuple[HeadCell, str]]]:
    """(the runner's plan: every way of every cell under the installed verl, in the order they run; each planned
    cell's (HeadCell, way)). The way that raises (upstream under bf16) runs last in its cell."""
    from harness.plan.arms import resolve_arm

    arm = resolve_arm("upstream")
    ways = [(cell, way) for cell in cells for way in PATHS[cell.precision]]
    return [(head_scenario(cell, way, timeout_s), arm) for cell, way in ways], ways


def estimate_line(i: int, n: int, cell: HeadCell) -> str:
    each = ", ".join(f"{way} {memory_estimate(cell, way) / GIB:.1f}" for way in PATHS[cell.precision])
    return (
        f"[{i}/{n}] lm_head {cell.label}, {cell.tokens} tokens/rank: estimate GiB ({cell.world} ranks) "
        f"{each}; {available_bytes() / GIB:.1f} GiB available"
    )


def run_head_bench(cells: list[HeadCell], timeout_s: float, say=print) -> tuple[list[dict], object]:
    """Every way of every cell through run_plan, one at a time (each may take most of the host's memory; the
    memory check before each launch: run/executors.py launch_and_judge). (One row per way, the PlanResult.)"""
    from harness.run.runner import run_plan

    for i, cell in enumerate(cells, 1):
        say(estimate_line(i, len(cells), cell), flush=True)
    plan, ways = head_plan(cells, timeout_s)
    result = run_plan("bench-head", plan, jobs=1)
    return [row_of(cell, way, record) for (cell, way), record in zip(ways, result.records)], result


def row_of(cell: HeadCell, way: str, record) -> dict:
    """One way's row: its outcome, the gradient error against the fp32 reference, its merged figures beside the
    formula for the same size, W and precision, and the memory estimate it was checked with."""
    base = {"cell": cell, "path": way}
    if record.outcome == "skipped":
        return {**base, "skipped": record.verdict.skipped_reason}
    if record.outcome in ("error", "hang"):
        error = record.verdict.error
        return {**base, "outcome": record.outcome, "error": f"{error.type}: {error.message}" if error else "?"}
    step = record.measures.head_step
    param_bytes = BF16 if cell.precision == "bf16-mixed" else FP32
    formula = lm_head_bytes(FORMULA_PATH[way], cell.vocab, cell.hidden, cell.world, param_bytes=param_bytes)
    if way == "upstream-cast":
        # The gathered fp32 weight is cast before the fused head saves it: what autograd holds is the cast.
        formula["held_fwd_to_bwd"] = cell.vocab * cell.hidden * param_bytes
    grad_rel = record.measures.parity.grad_worst_rel
    return {
        **base,
        "outcome": record.outcome,
        "grad_rel": float(grad_rel),
        "tolerance": record.tolerance.grad_rel,
        "moved": step.bytes["all_gather"] + step.bytes["reduce_scatter"],
        "all_gather": step.bytes["all_gather"],
        "reduce_scatter": step.bytes["reduce_scatter"],
        "formula": formula,
        "dtypes": step.dtypes,
        "held_weight_sized": step.held_weight_sized,
        "held_all": step.held_fwd_to_bwd,
        "peak_over_step": step.peak_rss_over_step,
        "peak_rss_process": step.peak_rss_process,
        "estimate_per_rank": path_peak(cell, way),
        "step_s": step.step_s,
        "collective_ms": step.collective_ms,
    }
