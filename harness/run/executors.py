"""Where a cell's launch runs, for the one runner (runner.py's run_plan): this host's threads (LocalPool), or a Ray
cluster's tasks (ray_executor.py's RayExecutor, only with --ray). An executor decides where a cell runs and how many
at once (the interface: Executor); the runner does the rest, the same for both: the order, the progress lines,
Ctrl-C, the estimate, stamping and writing the records.

LocalPool runs JOBS cells at a time, CUDA cells on disjoint GPUs (plan/devices.py); `launch_and_judge` is what runs for
one cell wherever it runs.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.errors import HarnessFailure
from harness.plan import tree_seal
from harness.plan.arms import Arm, arm_fingerprint
from harness.plan.devices import DevicePool, cell_devices, default_cell_gpus, default_jobs, planned_device, visible_gpus
from harness.records.measures import ArmFingerprint
from harness.records.results import Record


@dataclass
class Cell:
    """One planned cell: what to run, and what was decided about it before anything runs."""

    scenario: object
    arm: Arm
    device: str  # where it runs, or would have (plan/devices.py planned_device), and
    skip: str | None  # why it cannot run here: both decided when planning
    fingerprint: ArmFingerprint  # the arm's diffs as records carry them (arms.arm_fingerprint), read once per arm
    not_applied: object = None  # the arm's diff does not apply to this verl (diffs.DoesNotApply): a skipped row


@dataclass
class Job:
    """One cell as the runner submits it to an executor."""

    index: int  # its place in the plan
    cell: Cell
    arm_dir: Path | None  # the arm's copy on this host (a Ray node builds its own from cell.fingerprint)
    keep_traces: bool
    batch_id: str  # the run directory the cells of one plan share


@dataclass
class Ran:
    """A judged cell as it came back: its record, and what the place it ran on stamps instead of this host's."""

    record: Record
    facts: dict = field(default_factory=dict)  # invocation fields (a Ray node's host and versions)


class Executor(Protocol):
    """What run_plan asks of where cells run."""

    jobs: int | None  # how many cells run at once, for the estimate (None: it cannot say; no estimate is shown)

    def plan(self, pairs: list[tuple]) -> list[Cell]: ...  # the pairs as cells for where they run (its GPUs)
    def submit(self, job: Job) -> Future: ...  # the cell's launch and judge: a Future of its Ran, None if stopped
    def outcome(self, job: Job, future: Future) -> Ran | None: ...  # the Ran (a lost Ray task's: an error record)
    def running(self) -> dict[int, tuple[float, str]]: ...  # index -> (began, time.monotonic; node, "" here)
    def cancel(self, jobs: list[Job]): ...  # Ctrl-C, after launch.STOP is set: the jobs pending end unrecorded
    def close(self): ...  # nothing of it left running


def planned_cells(plan: list[tuple], gpus: int | None = None) -> list[Cell]:
    """(scenario, Arm) pairs -> cells: skips decided and each arm fingerprinted once, before any launch. gpus:
    how many a cell may count on where it will run (default: this host's)."""
    fingerprints = {name: arm_fingerprint(arm) for name, arm in {arm.name: arm for _, arm in plan}.items()}
    return [Cell(scenario, arm, *planned_device(scenario, gpus), fingerprints[arm.name]) for scenario, arm in plan]


def launch_and_judge(
    cell: Cell, arm_dir: Path | None, *, keep_traces=False, batch_id=None, cuda_devices=None
) -> Record | None:
    """What runs for one cell wherever it runs: its launch (none for a cell planned as skipped) judged into a
    record; None when the user stopped it (an interrupted run proves nothing about the code under test, so nothing
    is recorded for it). cuda_devices: the GPUs a CUDA cell holds (default: the first `ranks` of this host's)."""
    from harness.judge_cell.verdict import judge
    from harness.launch.launch import RawRun, launch
    from harness.plan.head_memory_model import launch_short

    scenario = cell.scenario
    # Memory is read right before the launch: others' use of the host moves between the plan and the launch.
    skip = cell.skip or launch_short(scenario)
    if skip:
        raw = RawRun(scenario, cell.arm.name, cell.device, scenario.ranks, None, skipped_reason=skip)
    else:
        if cuda_devices is None:
            cuda_devices = default_cell_gpus(cell)
        trees = tree_seal.watched([arm_dir, _tree_environment()])
        gone = tree_seal.changed_under_run(trees)  # before the launch too: a tree gone since it was materialised
        if gone is None:
            try:
                raw = launch(
                    scenario,
                    cell.arm.name,
                    arm_dir,
                    keep_traces=keep_traces,
                    batch_id=batch_id,
                    cuda_devices=cuda_devices,
                )
            except Exception:  # a launch that failed on a tree gone under it: said as that, in one line
                if tree_seal.changed_under_run(trees) is None:
                    raise
            gone = tree_seal.changed_under_run(trees)
        if gone is not None:  # the cell's failure would be the harness's, never a finding about the code
            raise HarnessFailure(f"{gone}: the cell {scenario.name} x {cell.arm.name} is not judged")
    if raw.interrupted:
        return None
    record = judge(raw)
    if cell.not_applied is not None:
        record.verdict.not_applied = not_applied_record(cell.not_applied)
    if raw.cuda_devices is not None:
        record.cuda_devices = raw.cuda_devices
    return record


def _tree_environment() -> Path | None:
    """The verl tree's environment this command runs in (plan/verl_trees.py: its python is sys.executable), if any."""
    from harness.plan.verl_trees import TREES_DIR

    prefix = Path(sys.prefix).resolve()
    return prefix if prefix.parent == TREES_DIR.resolve() else None


def not_applied_record(exc):
    """A diffs.DoesNotApply as the record's typed field."""
    from harness.plan.verl_trees import port_words
    from harness.records.results import NotApplied, VerlTree

    na = NotApplied(patch=exc.patch, file=exc.file, hunk=exc.hunk, why=exc.why, already_there=exc.already_there)
    if not exc.already_there:  # a change this verl has already needs no patch for it
        na.port = port_words(VerlTree.of_this_command())
    return na


def not_applied_reason(exc) -> str:
    """The skipped row's reason for an arm whose diff does not apply: the diff, the hunk and the file (and, where
    that hunk's result is already in place, diffs.py says so: for `none`, nothing to undo)."""
    return f"does not apply: {exc}"


class LocalPool:
    """This host's threads, `jobs` cells at once (None: as many as fit, default_jobs); CUDA cells hold disjoint
    GPUs of this host's (cell_devices)."""

    def __init__(self, jobs: int | None = 1):
        self.jobs = jobs
        self.gpus: DevicePool | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.started: dict[int, float] = {}

    def plan(self, pairs: list[tuple]) -> list[Cell]:
        cells = planned_cells(pairs)
        if any(c.device == "cuda" and not c.skip for c in cells):
            self.gpus = DevicePool(visible_gpus())
        if self.jobs is None:
            self.jobs = default_jobs(cells, len(self.gpus.ids) if self.gpus else 0)
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.jobs))
        return cells

    def submit(self, job: Job) -> Future:
        return self.pool.submit(self._run, job)

    def _run(self, job: Job) -> Ran | None:
        from harness.launch.launch import STOP

        with cell_devices(self.gpus, job.cell, STOP) as held:
            if STOP.is_set():  # Ctrl-C came before the cell started, or while it waited for GPUs
                return None
            self.started[job.index] = time.monotonic()
            record = launch_and_judge(
                job.cell, job.arm_dir, keep_traces=job.keep_traces, batch_id=job.batch_id, cuda_devices=held
            )
        return None if record is None else Ran(record)

    def outcome(self, job: Job, future: Future) -> Ran | None:
        return future.result()

    def running(self) -> dict[int, tuple[float, str]]:
        return {i: (at, "") for i, at in self.started.items()}

    def cancel(self, jobs: list[Job]):
        pass  # launch.STOP, set by the signal, ends every launch in flight here, and a waiting cell never starts

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
