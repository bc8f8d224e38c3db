"""The one runner: every command, the pytest items and the tests run cells through here.

A cell is (scenario, arm). For each: launch it (one torchrun), judge what its ranks wrote, stamp the record with
what is needed to trust and rerun it, append it to the invocation's results file, report progress. Arms are
materialised once per plan, before anything is launched, so a diff that does not apply stops the command with
no run started.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.paths import RESULTS_DIR, SCENARIOS_DIR
from harness.plan.arms import Arm, arm_fingerprint, materialise
from harness.plan.devices import DevicePool, fitting_jobs, visible_gpus
from harness.records.results import Record
from harness.records.store import ResultsFile, invocation_info, stamp_record
from harness.run.interrupt import Interrupted, StopOnSignal

# A line naming the runs still going when none has finished for this long.
STILL_RUNNING_AFTER_S = 30.0


@dataclass
class PlanResult:
    records: list  # in plan order
    path: Path  # the results file they were appended to
    lines: list  # in plan order: each record's line in that file (FILE:N names it), None where none was recorded


def scenario_file(name: str) -> Path | None:
    """The YAML a scenario was read from, anywhere under scenarios/ (None for one derived in code)."""
    found = sorted(SCENARIOS_DIR.rglob(f"{name}.yaml"))
    return found[0] if found else None


@dataclass
class Cell:
    """One planned cell: what to run, and what was decided about it before anything runs."""

    scenario: object
    arm: Arm
    device: str  # where it runs, or would have (launch.planned_device), and
    skip: str | None  # why it cannot run here: both decided when planning
    fingerprint: dict  # the arm's diffs as records carry them (arms.arm_fingerprint), read once per arm


def planned_cells(plan: list[tuple], gpus: int | None = None) -> list[Cell]:
    """(scenario, Arm) pairs -> cells: skips decided and each arm fingerprinted once, before any launch. gpus:
    how many a cell may count on where it will run (default: this host's)."""
    from harness.launch.launch import planned_device

    fingerprints = {}
    for _, arm in plan:
        if arm.name not in fingerprints:
            fingerprints[arm.name] = arm_fingerprint(arm)
    return [Cell(scenario, arm, *planned_device(scenario, gpus), fingerprints[arm.name]) for scenario, arm in plan]


def run_cell(
    command: str,
    scenario,
    arm: Arm,
    *,
    results: ResultsFile,
    arm_dir: Path | None = None,
    invocation: dict | None = None,
    keep_traces: bool = False,
    batch_id: str | None = None,
) -> Record | None:
    """Plan, launch, judge, stamp and append one cell (see run_planned); returns its record."""
    [cell] = planned_cells([(scenario, arm)])
    record, _ = run_planned(
        command,
        cell,
        results=results,
        arm_dir=arm_dir if arm_dir is not None else materialise(arm),
        invocation=invocation or invocation_info(command),
        keep_traces=keep_traces,
        batch_id=batch_id,
    )
    return record


def run_planned(
    command: str,
    cell: Cell,
    *,
    results: ResultsFile,
    arm_dir: Path | None,
    invocation: dict,
    keep_traces: bool = False,
    batch_id: str | None = None,
    cuda_devices: list[str] | None = None,
) -> tuple[Record | None, int | None]:
    """Launch (unless the cell was planned as skipped), judge, stamp and append one cell; returns its record and
    its line in the results file, or (None, None) when the user stopped it (an interrupted run proves nothing
    about the code under test, so nothing is recorded for it). cuda_devices: the GPUs a CUDA cell holds (default:
    the first `ranks` of this host's)."""
    from harness.judge.verdict import judge
    from harness.launch.launch import RawRun, launch

    scenario = cell.scenario
    if cell.skip:
        raw = RawRun(scenario, cell.arm.name, cell.device, scenario.ranks, None, skipped_reason=cell.skip)
    else:
        if cell.device == "cuda" and cuda_devices is None:
            cuda_devices = visible_gpus()[: scenario.ranks]
        raw = launch(
            scenario, cell.arm.name, arm_dir, keep_traces=keep_traces, batch_id=batch_id, cuda_devices=cuda_devices
        )
    if raw.interrupted:
        return None, None
    record = judge(raw)
    if raw.cuda_devices is not None:
        record.cuda_devices = raw.cuda_devices
    return record, stamp_and_append(record, cell, results=results, invocation=invocation)


def stamp_and_append(record: Record, cell: Cell, *, results: ResultsFile, invocation: dict) -> int:
    """The judged record stamped (records.stamp_record) and appended; its line in the results file."""
    stamp_record(
        record,
        scenario=cell.scenario,
        scenario_file=scenario_file(cell.scenario.name),
        arm_fingerprint=cell.fingerprint,
        invocation=invocation,
        device=cell.device,
    )
    return results.append(record)


def progress_line(done: int, total: int, record: Record, left: str = "") -> str:
    line = f"[{done}/{total}] {record.scenario:<24} {record.arm:<22} {record.outcome:<9} {record.wall_s or 0:6.1f}s"
    return f"{line}  ({left})" if left else line


def run_plan(
    command: str,
    plan: list[tuple],
    *,
    jobs: int | None = 1,
    keep_traces: bool = False,
    quiet: bool = False,
    reuse: frozenset[str] = frozenset(),
) -> PlanResult:
    """plan: (scenario, Arm) cells. Runs them `jobs` at a time (None: as many as fit, default_jobs); a line per
    cell as it finishes, and a line naming the runs still going when none has finished for a while, each with how
    many are left and about how long they take (plan/estimate.py). CUDA cells hold disjoint GPUs (cell_devices).
    reuse: arm names whose cells take an earlier command's record where one has the same inputs (plan/reuse.py)
    instead of running. Raises Interrupted on Ctrl-C/SIGTERM."""
    arms = {arm.name: arm for _, arm in plan}
    arm_dirs = {name: materialise(arm) for name, arm in arms.items()}  # a diff that does not apply stops us here
    cells = planned_cells(plan)
    gpus = DevicePool(visible_gpus()) if any(c.device == "cuda" and not c.skip for c in cells) else None
    jobs = default_jobs(cells, len(gpus.ids) if gpus else 0) if jobs is None else jobs
    invocation = invocation_info(command)
    results = ResultsFile(command)
    batch_id = uuid.uuid4().hex[:8]
    records: list = [None] * len(plan)
    lines: list = [None] * len(plan)
    reused = _reused(cells, reuse, invocation)
    for i, record in reused.items():
        records[i], lines[i] = record, results.append(record)
    progress = _Progress(plan, jobs, {} if quiet else _previous_durations(plan, invocation["host"]), quiet)
    started = progress.started

    def cell(i, scenario, arm):
        if stop.stop.is_set():
            return None, None
        with cell_devices(gpus, cells[i], stop.stop) as held:
            if held is STOPPED:
                return None, None
            started[i] = time.monotonic()
            return run_planned(
                command,
                cells[i],
                results=results,
                arm_dir=arm_dirs[arm.name],
                invocation=invocation,
                keep_traces=keep_traces,
                batch_id=batch_id,
                cuda_devices=held,
            )

    with StopOnSignal() as stop, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        try:
            pending = {pool.submit(cell, i, s, a): i for i, (s, a) in enumerate(plan) if i not in reused}
            done_count = len(reused)
            if reused:
                progress.say(_reused_line(reused, len(plan)))
            progress.say(progress.left(pending, "cell(s) to run"))
            while pending:
                finished, _ = wait(pending, timeout=STILL_RUNNING_AFTER_S, return_when=FIRST_COMPLETED)
                if not finished and not stop.stop.is_set():
                    progress.say_still_running(pending)
                for future in finished:
                    i = pending.pop(future)
                    record, lines[i] = future.result()
                    if record is not None:
                        records[i] = record
                        done_count += 1
                        progress.say(progress_line(done_count, len(plan), record, progress.left(pending)))
        finally:
            results.close()
    recorded = [r for r in records if r is not None]
    if stop.stop.is_set() and len(recorded) < len(plan):
        raise Interrupted(len(recorded), len(plan), results.path)
    return PlanResult(records, results.path, lines)


def _reused(cells: list[Cell], arms: frozenset[str], invocation: dict) -> dict[int, Record]:
    """Plan index -> the record reused for it: cells of the `arms` (not planned as skipped) whose reuse_key an
    earlier command's record carries, each record as it was written, with reused_from naming its line."""
    import json

    from harness.plan.reuse import earlier_records, key_for

    keys = {}
    for i, c in enumerate(cells):
        if c.arm.name in arms and not c.skip:
            spec = json.loads(c.scenario.model_dump_json())
            key = key_for(spec, c.device, c.arm.name, c.fingerprint.get("patches", []), invocation)
            if key is not None:
                keys[i] = key
    found = earlier_records(set(keys.values())) if keys else {}
    reused = {}
    for i, key in keys.items():
        if key in found:
            data, where = found[key]
            reused[i] = Record.model_validate({**data, "reused_from": where})
    return reused


def _reused_line(reused: dict[int, Record], total: int) -> str:
    """What was not run again, and from where (the newest results file named), and how to run it anyway."""
    files = sorted({r.reused_from.rpartition(":")[0] for r in reused.values()})
    arms = sorted({r.arm for r in reused.values()})
    return (
        f"{len(reused)} of {total} cells ({', '.join(arms)}) not run again: an earlier run on this host had the same "
        f"inputs (code, environment, scenario, arm); their records are reused from {', '.join(files[-2:])}"
        f"{f' and {len(files) - 2} more' if len(files) > 2 else ''} (--fresh runs them)"
    )


class _Progress:
    """What run_plan says as it goes: the cells left and about how long they take (plan/estimate.py, from each
    cell's previous duration on this host), and the runs still going when none has finished for a while."""

    def __init__(self, plan: list[tuple], jobs: int, durations: dict, quiet: bool):
        self.plan, self.jobs, self.durations, self.quiet = plan, jobs, durations, quiet
        self.keys = [(s.name, a.name) for s, a in plan]
        self.started: dict[int, float] = {}  # plan index -> when its launch began (time.monotonic)

    def say(self, line: str):
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def left(self, pending: dict, words: str = "left") -> str:
        from harness.plan.estimate import time_left

        now = time.monotonic()
        open_ = [i for f, i in pending.items() if not f.done()]
        waiting = [self.keys[i] for i in open_ if i not in self.started]
        running = [(self.keys[i], now - self.started[i]) for i in open_ if i in self.started]
        return time_left(waiting, running, self.durations, self.jobs).words(words)

    def say_still_running(self, pending: dict):
        now = time.monotonic()
        running = [
            f"{self.plan[i][0].name} x {self.plan[i][1].name} ({now - self.started[i]:.0f}s)"
            for f, i in pending.items()
            if i in self.started and not f.done()
        ]
        self.say("  still running: " + ", ".join(running) + f"  ({self.left(pending)})")


def _previous_durations(plan: list[tuple], host: str) -> dict:
    """Each planned cell's duration the last time it ran on this host (plan/estimate.py)."""
    import json

    from harness.plan.estimate import previous_durations

    scenarios = {s.name: json.loads(s.model_dump_json()) for s, _ in plan}
    return previous_durations(RESULTS_DIR, host, scenarios, {(s.name, a.name) for s, a in plan})


def default_jobs(cells: list[Cell], gpus: int) -> int:
    """JOBS when none is given: one at a time on CPU, as before; with CUDA cells, this host's GPUs divided by the
    largest CUDA cell's ranks."""
    return fitting_jobs([c.scenario.ranks for c in cells if c.device == "cuda" and not c.skip], gpus)


STOPPED = object()  # cell_devices' answer when Ctrl-C came while the cell waited for GPUs


@contextmanager
def cell_devices(gpus: DevicePool | None, cell: Cell, stop: threading.Event):
    """The GPUs a CUDA cell holds for its launch, waited for until free (never shared with another cell), given
    back when it ends; None for a CPU or skipped cell; STOPPED when stopped while waiting."""
    if gpus is None or cell.device != "cuda" or cell.skip:
        yield None
        return
    with gpus.held(cell.scenario.ranks, stop) as taken:
        yield STOPPED if taken is None else taken
