"""`harness bench --real-size`: the lm_head unit alone at real Qwen3-VL sizes, measured (rank/head_bench.py).

Cells: each (head size, world, precision) runs every path (upstream's full_tensor(), the candidate's FSDP forward
method, FSDP's unfused lm_head(...)) as a torchrun of its own, one after another, each on the same sharded weight
(the same seed): a rank's process holds one path's memory, never what an earlier path left behind, and its peak is
that path's. Each launch is started as a scenario cell's is (processes/client.starter: forked by the preloaded parent
where one serves, else fresh interpreters): at the tiny size a path's launch then costs seconds (make test's two
head cells, seven launches: 67 s under load against 86 s when each cell was one launch of all its paths in fresh
interpreters, 12-03). Each rank writes its figures, and this module adds them into one row per path beside
commands/bench.py's formula for the same size.

Memory. A real-size path needs many GB, so before each launch its estimate is compared with what the host has
available then (psutil): a path whose estimate x MARGIN does not fit is skipped, saying both, and never OOM-killed
halfway; the cell's other paths still run. The estimate is measured, not a formula: MEASURED_PEAK_MIB holds each
path's per-rank peak (VmHWM over its whole process) at W=2 and three hidden sizes of the real vocabulary, and
path_peak draws the line through the two largest, in S = vocab x hidden x 4 (the fp32 master weight), moving its
shard term (S/W) to the cell's world and its token-sized term to the cell's tokens (LOGITS_COPIES). What the lines
say (fp32, W=2, 256 tokens): between hidden 512 and 1,024 the fused head (candidate and #6659 alike) grows over its
step by exactly 3 bytes per byte of S, 3.47 over its process with the shard: its backward holds the gathered weight,
the zero-initialised full-size gradient verl's FusedLinearForPPO allocates and each chunk's full-size product
(dlogits^T h) at once; the earlier formula counted 2 S + 2 S / W. FSDP's unfused path grows by 3.5 over its step and
4.48 over its process. One real-size launch measured (the candidate, Qwen3-VL-8B fp32 W=2): 9,891.0 MiB a rank,
5.4 % above its 512-1,024 line; it is a point of the candidate's line, and the other lines are raised by as much
beyond their largest measured size (BEYOND_MEASURED). Estimates per rank: 8B fp32 9.7 GiB (fused paths), 11.4
(unfused); 32B 11.9-12.5 and 14.1. Under bf16 (32 tokens) the fused head grows by 2.97 over its step but its
processes by 4.4-4.5 (the warm-ups peaked higher on this CPU): 11.8-12.0 GiB a rank at 8B, 14.5-14.8 at 32B.
docs/BENCH.md ("The real head, measured") has the tables; on a 24 GB host with W=2 only the 8B fp32 fused paths fit.

History: when every path of a cell ran in one process, the 8B fp32 W=2 cell's rank 0 was OOM-killed at 11.17 GiB
resident in its second path (the candidate, after #6659's): the step's own peak (9.7 GiB measured alone), the
gradient copy that process kept of its first path for the reference (S/2, 1.16 GiB), and, had it got there, the
reference's whole-shard float64 comparison (10.8 GiB a rank alone; now summed a block of rows at a time). A
multiplier of that one kill (1.36 over the old formula) stood in for a measurement until each path ran alone.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.commands.bench import BF16, FP32, lm_head_bytes, real_models

# The sizes the issue asks for: Qwen3-VL-8B's and 32B's untied heads (models/real/).
REAL_HEAD_MODELS = ("Qwen3-VL-8B", "Qwen3-VL-32B")
REAL_HEAD_WORLDS = (2, 4)
PRECISIONS = ("fp32", "bf16-mixed")
# Paths in the order they run (each in its own processes; the one that raises, upstream under bf16, last).
PATHS = {
    "fp32": ("candidate", "unfused", "upstream"),
    "bf16-mixed": ("candidate", "unfused", "upstream-cast", "upstream"),
}
RANK_MODULE = "harness.rank.head_bench"
FORMULA_PATH = {"upstream": "full_tensor", "upstream-cast": "full_tensor", "candidate": "fsdp", "unfused": "fsdp"}
# 256 tokens per rank: half of one of the fused head's 512-row chunks, so a 2-core CPU finishes a real-size step in
# tens of seconds. Collective bytes and weight-sized memory do not depend on it; compute time grows with it
# (a GPU rank of verl's Qwen3-VL example holds thousands of tokens: max_token_len_per_gpu).
DEFAULT_TOKENS = 256
# bf16 cells take 1/8 of the tokens: a CPU without bf16 matrix units multiplies bf16 about 9x slower than fp32 (a
# 256 x 256 by 256 x 151,936 product on this host: 8.1 s against 0.88 s), and a real-size bf16 step at 256 tokens
# would take minutes per path. Bytes and weight-sized memory do not depend on the token count.
BF16_TOKEN_DIVISOR = 8
# A path's per-rank peak, measured: each rank's VmHWM over its whole process (the build, the warm-up, the measured
# step and the reference's phase), one path per launch, W=2, vocab 151,936, the precision's default tokens, fresh
# interpreters (HARNESS_PRELOAD=0), 12-03 on the 2-core host (memory does not depend on its load). MiB per rank, the
# larger rank's: {precision: {path: ((hidden, MiB), ...)}}, hidden sizes rising (path_peak draws the lines).
MEASURED_PEAK_MIB = {
    "fp32": {
        # 4096: Qwen3-VL-8B's head, the one real-size launch (12-03 13:40, quiet host): its step's VmHWM. Its process
        # then peaked at 11,072.7 MiB in the reference's comparison (whole-shard float64 copies; head_bench now sums
        # a block of rows at a time, below the step's peak).
        "candidate": ((256, 1797.8), (512, 2176.8), (1024, 3206.6), (4096, 9891.0)),
        "unfused": ((256, 1200.3), (512, 1734.3), (1024, 3062.7)),
        "upstream": ((256, 1791.1), (512, 2164.3), (1024, 3203.9)),
    },
    "bf16-mixed": {  # 32 tokens; upstream raises in its warm-up's forward (after its fp32 gather): its peak then
        "candidate": ((256, 1663.8), (512, 2310.3), (1024, 3648.8)),
        "unfused": ((256, 1403.6), (512, 2117.6), (1024, 3332.7)),
        "upstream-cast": ((256, 1501.5), (512, 2308.4), (1024, 3616.1)),
        "upstream": ((256, 742.3), (512, 1113.3), (1024, 1855.1)),
    },
}
# Beyond a path's largest measured size its line is raised by what the candidate's 8B launch measured over the
# line through its hidden 512 and 1,024 launches (9,891.0 MiB against 9,385.4: the peak still bends up there).
BEYOND_MEASURED = 1.054
CALIBRATION_VOCAB = 151936
CALIBRATION_WORLD = 2
# The fused head's temporaries are per chunk of at most this many rows (verl's FusedLinearForPPO chunk_size); the
# unfused path's logits are all of the rank's tokens at once.
FUSED_CHUNK_ROWS = 512
# fp32 token rows x vocab a path holds at its peak for each token row it has, measured at hidden 256 (128 against 256
# tokens, where token-sized tensors set the peak): what the estimate adds for more --head-tokens than measured (upon
# bf16 cells too: the fused head's chunk temporaries are fp32 there as well).
# Measured: candidate 523.4 MiB and #6659 519.3 MiB less at 128 tokens (7.1 and 7.0 x 74.2 MiB, one 128 x 151,936
# fp32 tensor); upstream-cast runs the same fused head (not measured apart). The unfused path's 145.2 MiB (2.0) was
# measured where its peak is still weight-sized: at many more tokens its full logits may raise it faster, so keep
# --head-tokens near the measured count for unfused estimates at real sizes.
LOGITS_COPIES = {"candidate": 7.1, "upstream": 7.0, "upstream-cast": 7.0, "unfused": 2.0}
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


def path_peak(cell: HeadCell, path: str) -> float:
    """Bytes one rank of `path`'s launch holds at its peak, from MEASURED_PEAK_MIB in the weight's size S: from the
    second-largest measured size on, the line through the two largest (where weight-sized tensors set the peak, as
    they do at real sizes); below it, the highest of the lines through neighbouring sizes. Then its shard term (S/W,
    measured at W=2) moved to the cell's world, and its token-sized term to the cell's tokens."""
    points = MEASURED_PEAK_MIB[cell.precision][path]
    s = cell.vocab * cell.hidden * FP32

    def line(first, second):
        (h0, m0), (h1, m1) = first, second
        per_weight = (m1 - m0) * 2**20 / ((h1 - h0) * CALIBRATION_VOCAB * FP32)  # bytes per byte of S, shard included
        return m0 * 2**20 + per_weight * (s - CALIBRATION_VOCAB * h0 * FP32)

    if s >= CALIBRATION_VOCAB * points[-2][0] * FP32:
        at_two_ranks = line(points[-2], points[-1])
        if cell.hidden * cell.vocab > points[-1][0] * CALIBRATION_VOCAB:
            at_two_ranks *= BEYOND_MEASURED
    else:
        at_two_ranks = max(line(a, b) for a, b in zip(points, points[1:]))
    world_shift = s / cell.world - s / CALIBRATION_WORLD
    rows = (lambda t: t) if path == "unfused" else (lambda t: min(t, FUSED_CHUNK_ROWS))
    calibration_tokens = tokens_for(cell.precision, DEFAULT_TOKENS)
    # Only upward: fewer tokens than measured may save less at a large head than at the small one the copies were
    # counted on, so the estimate keeps the measured tokens' figure.
    extra_rows = max(0, rows(cell.tokens) - rows(calibration_tokens))
    token_shift = LOGITS_COPIES[path] * FP32 * cell.vocab * extra_rows
    return at_two_ranks + world_shift + token_shift


def memory_estimate(cell: HeadCell, path: str | None = None) -> int:
    """Bytes `path`'s launch needs of the host at once (its W ranks at their peak); without a path, the cell's
    largest (its paths run one after another, each in processes of its own)."""
    paths = [path] if path else PATHS[cell.precision]
    return int(cell.world * max(path_peak(cell, p) for p in paths))


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


def head_cells(
    real_size: bool, sizes: list[str], worlds: list[int], tokens: int, precisions=PRECISIONS
) -> list[HeadCell]:
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
        for precision in precisions
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


def run_path(cell: HeadCell, path: str, out: Path, timeout_s: float) -> dict:
    """One torchrun of rank/head_bench.py running one path: {"ranks": [each rank's figures]}, or {"error": ...}
    where it did not finish. Started as the harness starts a cell's torchrun (processes/client.starter): forked by
    the preloaded parent where one serves this environment (its imports done: a launch costs seconds, not a fresh
    interpreter's torch import per process), else fresh interpreters; a forked rank is still a process of its own."""
    from harness.launch import run_dir as run_files
    from harness.launch.launch import kill_run
    from harness.processes import client
    from harness.rank.environment import rank_environment

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = rank_environment(None)
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cell.world))
    start = client.starter(env)
    rank_args = [
        f"--hidden={cell.hidden}",
        f"--vocab={cell.vocab}",
        f"--tokens={cell.tokens}",
        f"--precision={cell.precision}",
        f"--out={out}",
        f"--path={path}",
    ]
    command = [
        *start.torchrun(str(out / run_files.LAUNCHER_PID), str(out / run_files.FAILURES)),
        "--standalone",
        f"--nproc-per-node={cell.world}",
        "-m",
        *start.module(RANK_MODULE, *rank_args)[2:],  # [python, -m, MODULE, ...] without the interpreter's part
    ]
    log = out / "torchrun.log"
    with log.open("w") as f:
        # A session of its own, so that a timeout ends torchrun and every rank, and nothing else.
        proc = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_run(proc, out)
            return {"error": f"timed out after {timeout_s:g} s (log: {log})"}
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if returncode != 0 or len(ranks) != cell.world:
        tail = log.read_text()[-400:].strip().splitlines()
        return {"error": f"torchrun exit {returncode}: {tail[-1] if tail else ''} (log: {log})"}
    return {"ranks": [{**r["paths"][path], "pid": r["pid"]} for r in sorted(ranks, key=lambda r: r["rank"])]}


def run_cell(cell: HeadCell, out: Path, timeout_s: float, check=None) -> dict:
    """Every path of the cell, each in a torchrun of its own (a rank then holds one path's memory, never what an
    earlier path left behind): {"ranks": [{"paths": {path: figures}}]}. check(path), where given, says why a path
    should not start (memory, read again before each launch) or None; a path skipped or failed gives every rank its
    reason, the other paths are still measured."""
    by_path = {}
    for path in PATHS[cell.precision]:
        why = check(path) if check else None
        by_path[path] = {"skipped": why} if why else run_path(cell, path, out / path, timeout_s)
    ranks = []
    for rank in range(cell.world):
        ranks.append(
            {
                "paths": {
                    path: result["ranks"][rank] if "ranks" in result else dict(result)
                    for path, result in by_path.items()
                }
            }
        )
    return {"ranks": ranks}


def rows_of(cell: HeadCell, result: dict) -> list[dict]:
    """One row per path: outcome, gradient error against the fp32 reference, every rank's figures combined
    (bytes per rank: rank 0's, all ranks move the same; memory and time: the largest rank's)."""
    from harness.inputs.tolerances import tolerance_for

    base = {"cell": cell}
    tolerance = tolerance_for(cell.precision).grad_rel
    rows = []
    for path in PATHS[cell.precision]:
        per_rank = [r["paths"][path] for r in result["ranks"]]
        skipped = [e["skipped"] for e in per_rank if "skipped" in e]
        if skipped:
            rows.append({**base, "path": path, "skipped": skipped[0]})
            continue
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
                "peak_rss_process": max(e["peak_rss_process"] for e in per_rank),
                "estimate_per_rank": path_peak(cell, path),
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
        "peak RSS MiB/rank: over step / process (VmHWM)",
        "estimate MiB/rank (bench_head.MEASURED_PEAK_MIB)",
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
            f"{_mib(r['peak_over_step'])} / {_mib(r['peak_rss_process'])}",
            _mib(r["estimate_per_rank"]),
            f"{r['step_s']:.2f}",
            f"{r['collective_ms']:.0f}",
        ]
        lines.append(cells)
    return markdown_table(head, lines)


def run_head_bench(cells: list[HeadCell], cache_dir: Path, timeout_s: float, say=print) -> list[dict]:
    """Every cell in turn, each path of it in a torchrun of its own, one at a time (each may take most of the host's
    memory); before each launch its estimate is checked against what the host has available then (others' use of
    the host moves): a path that does not fit is skipped, saying both, and the cell's other paths still run."""
    rows = []
    for i, cell in enumerate(cells, 1):
        estimates = {path: memory_estimate(cell, path) for path in PATHS[cell.precision]}
        each = ", ".join(f"{path} {e / GIB:.1f}" for path, e in estimates.items())
        say(
            f"[{i}/{len(cells)}] lm_head {cell.label}, {cell.tokens} tokens/rank: estimate GiB ({cell.world} ranks) "
            f"{each}; {available_bytes() / GIB:.1f} GiB available",
            flush=True,
        )

        def check(path, cell=cell, estimates=estimates):
            estimate, available = estimates[path], available_bytes()
            if estimate * MARGIN <= available:
                say(f"  {cell.label} {path}: running", flush=True)
                return None
            why = (
                f"needs ~{estimate / GIB:.1f} GiB, {estimate * MARGIN / GIB:.1f} with the x{MARGIN:g} margin; "
                f"{available / GIB:.1f} GiB available"
            )
            say(f"  {cell.label} {path}: skipped, {why}", flush=True)
            return why

        out = cache_dir / f"{cell.hidden}x{cell.vocab}-w{cell.world}-{cell.precision}"
        rows += rows_of(cell, run_cell(cell, out, timeout_s, check=check))
    return rows
