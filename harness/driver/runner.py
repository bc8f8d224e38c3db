"""The one runner: every command, the pytest items and the tests run cells through here.

A cell is (scenario, arm). For each: launch it (one torchrun), judge what its ranks wrote, stamp the record with
what is needed to trust and rerun it, append it to the invocation's results file, report progress. Arms are
materialised once per plan, before anything is launched, so a diff that does not apply stops the command with
no run started.
"""
from __future__ import annotations

import sys
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from harness.driver.arms import Arm, arm_fingerprint, materialise
from harness.driver.records import ResultsFile, invocation_info, stamp_record
from harness.paths import ROOT, SCENARIOS_DIR


@dataclass
class PlanResult:
    records: list  # in plan order
    path: Path  # the results file they were appended to


def scenario_file(name: str) -> Path | None:
    """The YAML a scenario was read from, anywhere under scenarios/ (None for one derived in code)."""
    found = sorted(SCENARIOS_DIR.rglob(f"{name}.yaml"))
    return found[0] if found else None


def run_cell(command: str, scenario, arm: Arm, *, results: ResultsFile, arm_dir: Path | None = None,
             invocation: dict | None = None, keep_traces: bool = False, batch_id: str | None = None) -> dict:
    """Launch, judge, stamp and append one cell; returns its record."""
    from harness.driver.launch import launch
    from harness.driver.verdict import judge

    if arm_dir is None:
        arm_dir = materialise(arm)
    record = judge(launch(scenario, arm.name, arm_dir, keep_traces=keep_traces, batch_id=batch_id))
    stamp_record(record, scenario=scenario, scenario_file=scenario_file(scenario.name),
                 arm_fingerprint=arm_fingerprint(arm), invocation=invocation or invocation_info(command))
    results.append(record)
    return record


def progress_line(done: int, total: int, record: dict) -> str:
    return (f"[{done}/{total}] {record['scenario']:<24} {record['arm']:<22} {record['outcome']:<9} "
            f"{record.get('wall_s') or 0:6.1f}s")


def run_plan(command: str, plan: list[tuple], *, jobs: int = 1, keep_traces: bool = False,
             quiet: bool = False) -> PlanResult:
    """plan: (scenario, Arm) cells. Runs them `jobs` at a time; a line per cell as it finishes."""
    arms = {arm.name: arm for _, arm in plan}
    arm_dirs = {name: materialise(arm) for name, arm in arms.items()}  # a diff that does not apply stops us here
    invocation = invocation_info(command)
    results = ResultsFile(command)
    batch_id = uuid.uuid4().hex[:8]
    records: list = [None] * len(plan)
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(run_cell, command, scenario, arm, results=results, arm_dir=arm_dirs[arm.name],
                                   invocation=invocation, keep_traces=keep_traces, batch_id=batch_id): i
                       for i, (scenario, arm) in enumerate(plan)}
            for done, future in enumerate(as_completed(futures), 1):
                record = future.result()
                records[futures[future]] = record
                if not quiet:
                    print(progress_line(done, len(plan), record), file=sys.stderr, flush=True)
    finally:
        results.close()
    return PlanResult(records, results.path)


def shown_path(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
