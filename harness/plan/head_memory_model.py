"""How much of the host a head cell (`harness bench --real-size`, rank/head_bench.py) needs, before it starts.

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

`launch_short` is the check right before any cell's launch that it fits the host's available memory: a head cell by
these lines, a tiny model's cell by plan/cell_memory.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.plan.lm_head_cost import FP32

PRECISIONS = ("fp32", "bf16-mixed")
# Paths in the order they run (each in its own processes; the one that raises, upstream under bf16, last).
PATHS = {
    "fp32": ("candidate", "unfused", "upstream"),
    "bf16-mixed": ("candidate", "unfused", "upstream-cast", "upstream"),
}
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


def tokens_for(precision: str, tokens: int) -> int:
    """A cell's tokens per rank: --head-tokens under fp32, 1/BF16_TOKEN_DIVISOR of it under bf16-mixed."""
    return max(1, tokens // BF16_TOKEN_DIVISOR) if precision == "bf16-mixed" else tokens


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def memory_short(cell: HeadCell, way: str) -> str | None:
    """Why `way`'s launch of the cell should not start now (its estimate x MARGIN is more than the host has
    available: read at this moment, others' use of the host moves), or None where it fits."""
    estimate, available = memory_estimate(cell, way), available_bytes()
    if estimate * MARGIN <= available:
        return None
    return (
        f"needs ~{estimate / GIB:.1f} GiB, {estimate * MARGIN / GIB:.1f} with the x{MARGIN:g} margin; "
        f"{available / GIB:.1f} GiB available"
    )


def cell_of(scenario) -> HeadCell:
    """The size cell a `path: head` scenario is one way of."""
    head = scenario.head
    return HeadCell(scenario.name, head.hidden, head.vocab, scenario.ranks, scenario.precision, head.tokens)


def launch_short(scenario) -> str | None:
    """Why a cell should not start now for the host's memory: a head cell whose way does not fit (memory_short);
    a tiny model's cell whose ranks x (a rank's base + its micro-batch's tokens) does not (plan/cell_memory.py)."""
    if scenario.path == "head":
        return memory_short(cell_of(scenario), scenario.head.way)
    from harness.plan import cell_memory

    return cell_memory.memory_short(scenario, available_bytes())
