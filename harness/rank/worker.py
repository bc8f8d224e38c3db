"""One rank of one run: its process lifecycle (process group, phases, its RankResult and result file, errors). The path
module the scenario names (PATHS) builds, computes the references and runs verl; this module sets up the process group
and owns the result file and the errors.

Started by torchrun (see launch/launch.py) as `python -m harness.rank.worker SPEC.json`. The rank's result is a
RankResult (harness/records/results.py) from its first line: every measure is set on it as an attribute
(`r.out.step_s = ...`), checked as it is set. Whatever happens, the rank writes OUT_DIR/rank<R>.json (atomically)
with its phase, error, parity and collective counts, so nothing is lost in torchrun's log. The phases, in order
(rank/phases.py): setup, build, oracle, patch, wrap, compile, forward, backward, compare, bench.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from harness.rank.environment import rank_threads
from harness.rank.phases import Phase, write_whole


def describe_error(exc: BaseException, phase: str, rank: int) -> dict:
    message = str(exc).strip()
    root = exc
    seen = set()
    while (root.__cause__ or root.__context__) is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__ or root.__context__
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    # Where it was raised: a syntax error in a patched file names its own file and line; otherwise the deepest
    # frame (for an import that fails, the patched module's line).
    if isinstance(exc, SyntaxError) and exc.filename:
        location = f"{exc.filename}:{exc.lineno}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        location = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return {
        "type": type(exc).__name__,
        "message": message.splitlines()[0] if message else "",
        "full_message": message[:4000],
        "root_cause": {"type": type(root).__name__, "message": (str(root).strip().splitlines() or [""])[0]},
        "phase": phase,
        "rank": rank,
        "location": location,
        "traceback_tail": "".join(tail)[-3000:],
    }


def write_json_atomic(path: Path, data: dict):
    write_whole(path, json.dumps(data, indent=1, default=str))


@dataclass
class Rank:
    """What the phases of one rank share."""

    launch: dict  # the run directory's launch.json
    scenario: object
    rank: int
    world: int
    phase: Phase
    out: object  # harness.records.results.RankResult: what the rank writes to rank<R>.json
    device: object = None
    device_type: str = "cpu"
    mesh: object = None
    model: object = None
    batches: dict = field(default_factory=dict)  # (dp_rank, micro) -> this path's inputs, every rank's
    references: dict = field(default_factory=dict)  # name -> Reference
    patch_watch: object = None  # rank/measures/line_watch.py PatchLineWatch: the patch's lines this rank ran

    @property
    def out_dir(self) -> Path:
        return Path(self.launch["out_dir"])


def setup(r: Rank, local_rank: int):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.use_deterministic_algorithms(True, warn_only=True)
    threads = rank_threads()
    if threads is not None:  # the other-host variant (rank/environment.py RANK_THREADS)
        torch.set_num_threads(threads)
    r.device_type = r.launch["device"]
    if r.device_type == "cuda":
        torch.cuda.set_device(local_rank)
        r.device = torch.device("cuda", local_rank)
        backend = "cpu:gloo,cuda:nccl"
        r.out.device_name = torch.cuda.get_device_name(r.device)
    else:
        r.device = torch.device("cpu")
        backend = "gloo"
    # An explicit collective timeout (the run's own, see launch.py) instead of the 30-minute default.
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=r.launch["collective_timeout_s"]))
    r.out.backend = backend
    r.mesh = init_device_mesh(r.device_type, (r.world,), mesh_dim_names=("fsdp",))


# scenario.path -> the module that runs it. Each has the same three phases: build(r) (model and every rank's
# inputs), references(r) (the oracle, before verl patches anything), run(r) (verl, the step, the comparison).
PATHS = {
    "direct": "harness.rank.verl_side.direct_path",
    "engine": "harness.rank.verl_side.engine_path",
    "head": "harness.rank.head_bench",  # the lm_head unit alone (`bench --real-size`)
}


def run_rank(r: Rank, local_rank: int):
    import importlib

    from harness.rank.oracle.transformers_compat import adapters_in_use, transformers_major

    setup(r, local_rank)
    path = importlib.import_module(PATHS[r.scenario.path])
    r.out.path = r.scenario.path
    # The transformers 4.x adapters this run's model and batch are built through (none under transformers 5).
    r.out.adapters = adapters_in_use(transformers_major())
    r.phase.enter("build")
    path.build(r)
    r.phase.enter("oracle")
    path.references(r)
    r.phase.enter("patch")
    from harness.rank.measures.line_watch import PatchLineWatch

    # From verl's import on (the oracle, before it, runs none of verl's code): which of the patch's lines run.
    r.patch_watch = PatchLineWatch.for_arm()
    if r.patch_watch is not None:
        r.patch_watch.start()
        if r.device_type == "cuda":
            r.out.patch_lines_unseen = "backward on CUDA runs on autograd's own threads, which the watch does not reach"
    path.run(r)


def stop_patch_watch(watch, out) -> None:
    """The patch's lines this rank ran on its result; where the measurement failed, that they were not measured
    (the rank's own outcome stands)."""
    ran = watch.stop()
    if ran is None:
        out.patch_lines_unseen = f"the patch's lines were not measured on rank {out.rank}: {watch.failed}"
    else:
        out.patch_lines_run = ran
        if watch.arcs is not None:  # the ways out of the changed code's branches taken (plan/changed_code.py)
            out.patch_arcs_run = watch.arcs


def use_rank_private_compile_cache(rank: int, world: int):
    """Inductor's cache key does not include the rank, and a compiled graph can hold rank-specific constants
    (which chunk of a gathered weight this rank keeps). With one cache shared by the ranks, a rank loaded its
    peer's graph and the compiled upstream arm's lm_head gradient changed from rel. error 0.99 to 1.58.
    So each (world size, rank) gets its own cache; a later run of the same rank may reuse it."""
    base = os.environ.get("HARNESS_COMPILE_CACHE")
    if base:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"w{world}-r{rank}")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(base, f"w{world}-r{rank}", "triton")


def main(argv: list[str]) -> int:
    launch = json.loads(Path(argv[0]).read_text())
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    use_rank_private_compile_cache(rank, world)
    from harness.rank.stacks import dump_stacks_on_signal
    from harness.records.results import RankResult

    # The rank's result, typed from its first line: a field set on it is checked as it is set, and a name the model
    # does not declare raises here, in the rank, as an error its record shows.
    out = RankResult(rank=rank, world_size=world, device=launch["device"], error=None, pid=os.getpid())
    from harness.rank.warning_log import WarningLog

    # Before the progress file names this pid to the driver, which may then signal it for its stacks.
    dump_stacks_on_signal(Path(launch["out_dir"]) / f"stacks_rank{rank}.txt")
    warning_log = WarningLog().start()
    phase = Phase(Path(launch["out_dir"]) / f"progress_rank{rank}")
    code = 0
    this_rank = None
    try:
        from harness.inputs.scenario import Scenario

        scenario = Scenario.model_validate_json(json.dumps(launch["scenario"]))
        this_rank = Rank(launch, scenario, rank, world, phase, out)
        run_rank(this_rank, int(os.environ.get("LOCAL_RANK", 0)))
    except BaseException as exc:  # noqa: BLE001 - every failure is a result to record
        out.error = describe_error(exc, phase.name, rank)
        code = 1
    if this_rank is not None and this_rank.patch_watch is not None:
        stop_patch_watch(this_rank.patch_watch, out)
    out.warnings = warning_log.stop()
    out.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux counts KiB
    phase.enter("done")
    out.phase_times_s = phase.times
    out.phase = "done" if code == 0 else out.error.phase
    # Only the fields the rank set (a field set to None stays written): what its plain dict used to hold.
    write_json_atomic(Path(launch["out_dir"]) / f"rank{rank}.json", out.model_dump(exclude_unset=True))
    if code == 0:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    sys.stdout.flush()
    # os._exit: a failed rank must not wait in interpreter shutdown for peers that will never answer.
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
