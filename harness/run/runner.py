"""The one runner: every command, the pytest items and the tests run cells through here.

A cell is (scenario, arm). For each: launch it (one torchrun), judge what its ranks wrote, stamp the record with
what is needed to trust and rerun it, append it to the invocation's results file, report progress. Arms are
materialised once per plan, before anything is launched: an arm whose diff does not apply to this verl (one written
for another verl) has its cells recorded as skipped rows naming the diff, file and hunk, and the other arms run.
Where each launch runs is an executor's choice (executors.py): this host's threads, or with --ray a Ray cluster's
tasks (ray_executor.py); everything else is decided here, the same for both.

The one function every caller calls: `run_plan`.
"""

from __future__ import annotations

import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, wait
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import HarnessFailure
from harness.launch import sandboxing
from harness.paths import SCENARIOS_DIR, results_dir
from harness.plan.arms import Arm, materialise, merge_lines, merged_into
from harness.records.results import Record
from harness.records.reuse_key import Invocation
from harness.records.store import RecordNotWritten, ResultsFile, invocation_info, stamp_record
from harness.run.executors import Cell, Job, LocalPool, launch_and_judge, not_applied_reason, planned_cells
from harness.run.interrupt import Interrupted, StopOnSignal

# A line naming the runs still going when none has finished for this long.
STILL_RUNNING_AFTER_S = 30.0
_POLL_S = 0.5  # how soon a Ctrl-C reaches the executor (a Ray task ends only when cancelled)


@dataclass
class PlanResult:
    records: list  # in plan order
    path: Path  # the results file they were appended to
    lines: list  # in plan order: each record's line in that file (FILE:N names it), None where none was recorded


def scenario_file(name: str) -> Path | None:
    """The YAML a scenario was read from, anywhere under scenarios/ (None for one derived in code)."""
    found = sorted(SCENARIOS_DIR.rglob(f"{name}.yaml"))
    return found[0] if found else None


def run_cell(
    command: str,
    scenario,
    arm: Arm,
    *,
    results: ResultsFile,
    invocation: Invocation | None = None,
    keep_traces: bool = False,
    batch_id: str | None = None,
) -> tuple[Record | None, int | None]:
    """One cell on this host outside a plan (the tests' cells): planned, launched and judged as run_plan's local
    cells are (executors.launch_and_judge), stamped and appended. Its record and its line in the results file, or
    (None, None) when the user stopped it."""
    [cell] = planned_cells([(scenario, arm)])
    arm_dir = materialise(arm)
    sandboxing.require([arm_dir])
    merged_into(cell.fingerprint, arm_dir)
    record = launch_and_judge(cell, arm_dir, keep_traces=keep_traces, batch_id=batch_id)
    if record is None:
        return None, None
    invocation = invocation or invocation_info(command)
    return record, stamp_and_append(record, cell, results=results, invocation=invocation)


def stamp_and_append(record: Record, cell: Cell, *, results: ResultsFile, invocation: Invocation) -> int:
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
    line = f"{line}  ({left})" if left else line
    return f"{line}  on {record.node}" if record.node else line


def run_plan(
    command: str,
    plan: list[tuple],
    *,
    jobs: int | None = 1,
    keep_traces: bool = False,
    quiet: bool = False,
    reuse: frozenset[str] = frozenset(),
    executor=None,
) -> PlanResult:
    """plan: (scenario, Arm) cells. Runs them through `executor` (default: LocalPool(jobs), this host's threads,
    `jobs` at a time, None: as many as fit); a line per cell as it finishes, and a line naming the runs still
    going when none has finished for a while, each with how many are left and about how long they take
    (plan/estimate.py) where the executor says how many run at once. reuse: arm names whose cells take an earlier
    command's record where one has the same inputs (plan/reuse.py) instead of running. Raises Interrupted on
    Ctrl-C/SIGTERM, after the executor cancelled what was in flight."""
    arm_dirs, not_applied = materialised_arms([arm for _, arm in plan])
    sandboxing.require(list(arm_dirs.values()))
    executor = LocalPool(jobs) if executor is None else executor
    with closing(executor):
        return _run(command, plan, executor, arm_dirs, not_applied, keep_traces, quiet, reuse)


def materialised_arms(arms: list[Arm]) -> tuple[dict, dict]:
    """({arm name: its copy (None: verl as is)}, {arm name: DoesNotApply}) for the plan's arms, each built once.
    A malformed diff still stops the command (a UsageError); one that does not apply to this verl is a fact about
    the arm, kept for its cells' rows."""
    from harness.plan.diffs import DoesNotApply

    dirs, not_applied = {}, {}
    for arm in {arm.name: arm for arm in arms}.values():
        try:
            dirs[arm.name] = materialise(arm)
        except DoesNotApply as exc:
            dirs[arm.name], not_applied[arm.name] = None, exc
    return dirs, not_applied


def _run(command, plan, executor, arm_dirs, not_applied, keep_traces, quiet, reuse) -> PlanResult:
    cells = executor.plan(plan)
    merged = {}
    for cell in cells:
        if cell.arm.name in not_applied:
            cell.skip, cell.not_applied = not_applied_reason(not_applied[cell.arm.name]), not_applied[cell.arm.name]
        else:  # an arm's diff carried onto this verl by a merge: its records say so (stamp.arm_patches)
            merged[cell.arm.name] = merge_lines(merged_into(cell.fingerprint, arm_dirs.get(cell.arm.name)))
    for line in (line for lines in merged.values() for line in lines) if not quiet else ():
        print(f"arm {line}", flush=True)
    invocation = invocation_info(command)
    results = ResultsFile(command)
    batch_id = uuid.uuid4().hex[:8]
    records: list = [None] * len(plan)
    lines: list = [None] * len(plan)
    reused = _reused(cells, reuse, invocation)
    for i, record in reused.items():
        records[i], lines[i] = record, results.append(record)
    estimated = not quiet and executor.jobs is not None
    progress = _Progress(plan, executor, _previous_durations(plan, invocation.host) if estimated else None, quiet)
    with StopOnSignal() as stop:
        try:
            pending = {}
            for i, cell in enumerate(cells):
                if i not in reused and not stop.stop.is_set():
                    job = Job(i, cell, arm_dirs[cell.arm.name], keep_traces, batch_id)
                    pending[executor.submit(job)] = job
            done_count = len(reused)
            if reused:
                progress.say(_reused_line(reused, len(plan)))
            if estimated:
                progress.say(progress.left(pending, "cell(s) to run"))
            quiet_since, cancelled = time.monotonic(), False
            while pending:
                finished, _ = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=lambda f: pending[f].index):  # those done together: in plan order
                    job = pending.pop(future)
                    try:
                        ran = executor.outcome(job, future)
                    except HarnessFailure:  # a cached tree gone under a cell (run/executors.py): no cell runs on
                        executor.cancel(list(pending.values()))
                        raise
                    if ran is not None:
                        stamped = replace(invocation, **ran.facts)
                        try:
                            lines[job.index] = stamp_and_append(
                                ran.record, job.cell, results=results, invocation=stamped
                            )
                        except RecordNotWritten:  # a full disk: no cell runs on that cannot be recorded
                            executor.cancel(list(pending.values()))
                            raise
                        records[job.index] = ran.record
                        done_count += 1
                        progress.say(progress_line(done_count, len(plan), ran.record, progress.left(pending)))
                if stop.stop.is_set():
                    if not cancelled:
                        cancelled = True
                        executor.cancel(list(pending.values()))
                elif finished:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > STILL_RUNNING_AFTER_S:
                    progress.say_still_running(pending)
                    quiet_since = time.monotonic()
        finally:
            results.close()
    recorded = [r for r in records if r is not None]
    if stop.stop.is_set() and len(recorded) < len(plan):
        raise Interrupted(len(recorded), len(plan), results.path)
    return PlanResult(records, results.path, lines)


def _reused(cells: list[Cell], arms: frozenset[str], invocation: Invocation) -> dict[int, Record]:
    """Plan index -> the record reused for it: cells of the `arms` (not planned as skipped) whose reuse_key an
    earlier command's record carries, each record as it was written, with reused_from naming its line."""
    import json

    from harness.plan.reuse import earlier_records, key_for

    keys = {}
    for i, c in enumerate(cells):
        if c.arm.name in arms and not c.skip:
            spec = json.loads(c.scenario.model_dump_json())
            key = key_for(spec, c.device, c.arm.name, c.fingerprint.patches, invocation)
            if key is not None:
                keys[i] = key
    if not keys:
        return {}
    earlier = earlier_records(set(keys.values()))
    for note in earlier.notes():  # records not reused for their MAC (plan/reuse.py): said once per command
        print(f"note: {note}", file=sys.stderr, flush=True)
    found = earlier.found
    reused = {}
    for i, key in keys.items():
        if key in found:
            data, where = found[key]
            reused[i] = Record.model_validate(data)
            reused[i].stamp.reused_from = where
    return reused


def _reused_line(reused: dict[int, Record], total: int) -> str:
    """What was not run again, and from where, and how to run it anyway: a line in all, then a line per cell naming
    the record it stands on (a reviewer of a pull request's verdict sees which base cells were not run for it)."""
    files = sorted({r.stamp.reused_from.rpartition(":")[0] for r in reused.values()})
    arms = sorted({r.arm for r in reused.values()})
    head = (
        f"{len(reused)} of {total} cells ({', '.join(arms)}) not run again: an earlier run on this host had the same "
        f"inputs (code, environment, scenario, arm); their records are reused from {', '.join(files[-2:])}"
        f"{f' and {len(files) - 2} more' if len(files) > 2 else ''} (--fresh runs them)"
    )
    cells = [f"  {r.scenario} x {r.arm}: reused from {r.stamp.reused_from}" for _, r in sorted(reused.items())]
    return "\n".join([head, *cells])


class _Progress:
    """What run_plan says as it goes: the cells left and about how long they take (plan/estimate.py, from each
    cell's previous duration on this host; durations None: no estimate), and the runs still going when none has
    finished for a while, with the node each runs on where that is not this host."""

    def __init__(self, plan: list[tuple], executor, durations: dict | None, quiet: bool):
        self.plan, self.executor, self.durations, self.quiet = plan, executor, durations, quiet
        self.keys = [(s.name, a.name) for s, a in plan]

    def say(self, line: str):
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    def left(self, pending: dict, words: str = "left") -> str:
        from harness.plan.estimate import time_left

        if self.durations is None:
            return ""
        now, started = time.monotonic(), self.executor.running()
        open_ = [job.index for f, job in pending.items() if not f.done()]
        waiting = [self.keys[i] for i in open_ if i not in started]
        running = [(self.keys[i], now - started[i][0]) for i in open_ if i in started]
        return time_left(waiting, running, self.durations, self.executor.jobs).words(words)

    def say_still_running(self, pending: dict):
        now, started = time.monotonic(), self.executor.running()
        running = []
        for i in [job.index for f, job in pending.items() if not f.done() and job.index in started]:
            at, node = started[i]
            running.append(f"{self.keys[i][0]} x {self.keys[i][1]} ({now - at:.0f}s)" + (f" on {node}" if node else ""))
        left = self.left(pending)
        named = ", ".join(running) or f"{len(pending)} cell(s) waiting to start"
        self.say(f"  still running: {named}" + (f"  ({left})" if left else ""))


def _previous_durations(plan: list[tuple], host: str) -> dict:
    """Each planned cell's duration the last time it ran on this host (plan/estimate.py)."""
    import json

    from harness.plan.estimate import previous_durations

    scenarios = {s.name: json.loads(s.model_dump_json()) for s, _ in plan}
    return previous_durations(results_dir(), host, scenarios, {(s.name, a.name) for s, a in plan})
