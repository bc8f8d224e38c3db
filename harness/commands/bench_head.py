"""`harness bench --real-size`: the lm_head unit alone at real Qwen3-VL sizes, measured (rank/head_bench.py).

Cells: each (head size, world, precision) is one torchrun of rank/head_bench.py that runs every path in turn on
the same sharded weight (upstream's full_tensor(), the candidate's FSDP forward method, FSDP's unfused
lm_head(...)); each rank writes its figures, and this module adds them into one row per path beside
commands/bench.py's formula for the same size.

Memory. A real-size cell needs many GB, so each states its estimate before it starts and is skipped, with the
estimate, where the estimate exceeds what the host has available (psutil): never an OOM kill halfway. Per rank,
with S = vocab x hidden x 4 (the fp32 master weight), W ranks, T tokens per rank:
  the shard and its gradient shard, 2 S / W; the gathered weight and the full-size gradient before it is
  reduce-scattered (or, under #6659, the gathered fp32 weight held to backward and its gradient), 2 S; the fused
  head's and the unfused path's logits temporaries, 16 T x vocab bytes (four fp32 tokens x vocab tensors); the
  process itself (torch and verl imported, the profiler), 0.7 GiB.
The reference's phase (the gathered master weight, the shard, its gradient and this rank's reference rows) stays
below that. Measured against it (2026-12-03): the 8B fp32 W=2 cell's rank 0 held 11.17 GiB resident in its second
path, where the formula says 8.25 GiB per rank, and the kernel's OOM killer ended it on a 23 GiB host; the paths run
one after another in one process, and what the first path freed is not all given back. So the estimate is the
formula times that measured ratio (MEASURED_OVER_FORMULA), and a cell runs only when estimate x 1.1 fits the
available memory.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.commands.bench import BF16, FP32, lm_head_bytes, real_models

# The sizes the issue asks for: Qwen3-VL-8B's and 32B's untied heads (models/real/).
REAL_HEAD_MODELS = ("Qwen3-VL-8B", "Qwen3-VL-32B")
REAL_HEAD_WORLDS = (2, 4)
PRECISIONS = ("fp32", "bf16-mixed")
# Paths in the order they run: the one that raises (upstream under bf16) last, so that no FSDP state it leaves
# half-entered can touch the others.
PATHS = {
    "fp32": ("candidate", "unfused", "upstream"),
    "bf16-mixed": ("candidate", "unfused", "upstream-cast", "upstream"),
}
FORMULA_PATH = {"upstream": "full_tensor", "upstream-cast": "full_tensor", "candidate": "fsdp", "unfused": "fsdp"}
# 256 tokens per rank: half of one of the fused head's 512-row chunks, so a 2-core CPU finishes a real-size step in
# tens of seconds. Collective bytes and weight-sized memory do not depend on it; compute time grows with it
# (a GPU rank of verl's Qwen3-VL example holds thousands of tokens: max_token_len_per_gpu).
DEFAULT_TOKENS = 256
# bf16 cells take 1/8 of the tokens: a CPU without bf16 matrix units multiplies bf16 about 9x slower than fp32 (a
# 256 x 256 by 256 x 151,936 product on this host: 8.1 s against 0.88 s), and a real-size bf16 step at 256 tokens
# would take minutes per path. Bytes and weight-sized memory do not depend on the token count.
BF16_TOKEN_DIVISOR = 8
PROCESS_BYTES = int(0.7 * 2**30)
# What a rank held at its peak over what the formula counts: 11.17 GiB (rank 0's anon-rss when the 8B fp32 W=2 cell
# was OOM-killed in its second path) / 8.25 GiB, rounded up.
MEASURED_OVER_FORMULA = 1.36
MARGIN = 1.1
GIB = 2**30


@dataclass(frozen=True)
class HeadCell:
    name: str  # the model the size is of, or "H x V" for a size given by hand
    hidden: int
    vocab: int
    world: int
    precision: str
    tokens: int

    @property
    def label(self) -> str:
        return f"{self.name} W={self.world} {self.precision}"


def memory_estimate(cell: HeadCell) -> int:
    """Bytes the whole cell (all W ranks) needs at its peak: the module docstring's formula, times what a real cell
    was measured to hold over it."""
    s = cell.vocab * cell.hidden * FP32
    per_rank = 2 * s / cell.world + 2 * s + 16 * cell.tokens * cell.vocab + PROCESS_BYTES
    return int(per_rank * cell.world * MEASURED_OVER_FORMULA)


def parse_size(text: str) -> tuple[int, int]:
    """'HIDDENxVOCAB' -> (hidden, vocab)."""
    from harness.errors import UsageError

    try:
        hidden, vocab = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--head-size: {text!r} is not HIDDENxVOCAB (e.g. 4096x151936)") from None
    if hidden < 1 or vocab < 1:
        raise UsageError(f"--head-size: {text!r} needs positive sizes")
    return hidden, vocab


def head_cells(real_size: bool, sizes: list[str], worlds: list[int], tokens: int) -> list[HeadCell]:
    from harness.errors import UsageError

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
        for precision in PRECISIONS
    ]
    if any(c.vocab == c.tokens for c in cells):
        # The weight-sized count goes by shape: a tokens x hidden activation of the weight's shape would count.
        raise UsageError(f"--head-tokens: {tokens} gives a cell as many tokens as vocabulary rows; choose another")
    return cells


def tokens_for(precision: str, tokens: int) -> int:
    """A cell's tokens per rank: --head-tokens under fp32, 1/BF16_TOKEN_DIVISOR of it under bf16-mixed."""
    return max(1, tokens // BF16_TOKEN_DIVISOR) if precision == "bf16-mixed" else tokens


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def run_cell(cell: HeadCell, out: Path, timeout_s: float) -> dict:
    """One torchrun of rank/head_bench.py; the ranks' JSON, or {"error": ...} where it did not finish."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    threads = max(1, (os.cpu_count() or 1) // cell.world)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={cell.world}",
        "-m",
        "harness.rank.head_bench",
        f"--hidden={cell.hidden}",
        f"--vocab={cell.vocab}",
        f"--tokens={cell.tokens}",
        f"--precision={cell.precision}",
        f"--out={out}",
        "--paths",
        *PATHS[cell.precision],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    log = out / "torchrun.log"
    try:
        with log.open("w") as f:
            done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s (log: {log})"}
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if done.returncode != 0 or len(ranks) != cell.world:
        tail = log.read_text()[-400:].strip().splitlines()
        return {"error": f"torchrun exit {done.returncode}: {tail[-1] if tail else ''} (log: {log})"}
    return {"ranks": ranks}


def rows_of(cell: HeadCell, result: dict) -> list[dict]:
    """One row per path: outcome, gradient error against the fp32 reference, every rank's figures combined
    (bytes per rank: rank 0's, all ranks move the same; memory and time: the largest rank's)."""
    from harness.inputs.tolerances import tolerance_for

    base = {"cell": cell}
    if "skipped" in result or "error" in result:
        return [{**base, "path": "-", **result}]
    tolerance = tolerance_for(cell.precision).grad_rel
    rows = []
    for path in PATHS[cell.precision]:
        per_rank = [r["paths"][path] for r in result["ranks"]]
        errors = [e["error"] for e in per_rank if "error" in e]
        if errors:
            rows.append({**base, "path": path, "outcome": "error", "error": errors[0]})
            continue
        diff = sum(e["diff_sq"] for e in per_rank)
        ref = sum(e["ref_sq"] for e in per_rank)
        rel = math.sqrt(diff / ref) if ref else math.inf
        first = per_rank[0]
        param_bytes = BF16 if cell.precision == "bf16-mixed" else FP32
        formula = lm_head_bytes(FORMULA_PATH[path], cell.vocab, cell.hidden, cell.world, param_bytes=param_bytes)
        if path == "upstream-cast":
            # The gathered fp32 weight is cast before the fused head saves it: what autograd holds is the cast.
            formula["held_fwd_to_bwd"] = cell.vocab * cell.hidden * param_bytes
        moved = first["bytes"]["all_gather"] + first["bytes"]["reduce_scatter"]
        peaks = [e["peak_rss_over_step"] for e in per_rank if e.get("peak_rss_over_step") is not None]
        rows.append(
            {
                **base,
                "path": path,
                "outcome": "pass" if rel <= tolerance else "mismatch",
                "grad_rel": rel,
                "tolerance": tolerance,
                "moved": moved,
                "all_gather": first["bytes"]["all_gather"],
                "reduce_scatter": first["bytes"]["reduce_scatter"],
                "formula": formula,
                "dtypes": first["dtypes"],
                "held_weight_sized": max(e["held_weight_sized"] for e in per_rank),
                "held_all": max(e["held_fwd_to_bwd"] for e in per_rank),
                "peak_over_step": max(peaks) if peaks else None,
                "peak_rss": max(e["peak_rss"] for e in per_rank),
                "step_s": max(e["step_s"] for e in per_rank),
                "collective_ms": max(e["collective_ms"] for e in per_rank),
            }
        )
    return rows


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def table(rows: list[dict]) -> str:
    from harness.render.tables import markdown_table

    head = [
        "head (H x V)",
        "W",
        "precision",
        "tokens/rank",
        "path",
        "outcome",
        "grad rel err (fp32 ref)",
        "AG+RS MiB/rank",
        "formula MiB",
        "gather dtype",
        "held fwd->bwd MiB: weight-sized / all",
        "formula held MiB",
        "peak RSS over step MiB (all: VmHWM)",
        "step s",
        "collective ms",
    ]
    lines = []
    for r in rows:
        c = r["cell"]
        cells = [f"{c.name} ({c.hidden} x {c.vocab})", str(c.world), c.precision, str(c.tokens), r["path"]]
        if "skipped" in r or r.get("outcome") == "error" or "error" in r:
            why = r.get("skipped") or r.get("error", "")
            cells += ["skipped" if "skipped" in r else "error", why] + ["-"] * (len(head) - len(cells) - 2)
            lines.append(cells)
            continue
        f = r["formula"]
        cells += [
            r["outcome"],
            f"{r['grad_rel']:.2g}",
            f"{_mib(r['moved'])} ({_mib(r['all_gather'])}+{_mib(r['reduce_scatter'])})",
            "=" if f["total"] == r["moved"] else _mib(f["total"]),
            ",".join(r["dtypes"]) or "-",
            f"{_mib(r['held_weight_sized'])} / {_mib(r['held_all'])}",
            _mib(f["held_fwd_to_bwd"]),
            f"{_mib(r['peak_over_step'])} ({_mib(r['peak_rss'])})",
            f"{r['step_s']:.2f}",
            f"{r['collective_ms']:.0f}",
        ]
        lines.append(cells)
    return markdown_table(head, lines)


def run_head_bench(cells: list[HeadCell], cache_dir: Path, timeout_s: float, say=print) -> list[dict]:
    """Every cell in turn (one at a time: each may take most of the host's memory), checked for memory first."""
    rows = []
    for i, cell in enumerate(cells, 1):
        estimate, available = memory_estimate(cell), available_bytes()
        head = f"[{i}/{len(cells)}] lm_head {cell.label}, {cell.tokens} tokens/rank: estimate {estimate / GIB:.1f} GiB"
        if estimate * MARGIN > available:
            why = f"needs ~{estimate / GIB:.1f} GiB (x{MARGIN:g} margin), {available / GIB:.1f} GiB available"
            say(f"{head}: skipped, {why}", flush=True)
            rows += rows_of(cell, {"skipped": why})
            continue
        say(f"{head}, {available / GIB:.1f} GiB available: running", flush=True)
        out = cache_dir / f"{cell.hidden}x{cell.vocab}-w{cell.world}-{cell.precision}"
        rows += rows_of(cell, run_cell(cell, out, timeout_s))
    return rows
