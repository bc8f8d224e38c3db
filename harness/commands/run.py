"""repro, run, verify, matrix: plan cells, run them through the one runner, print the verdict table."""
from __future__ import annotations

import json
from pathlib import Path

from harness.driver.arms import resolve_arm
from harness.driver.runner import PlanResult, run_plan, shown_path
from harness.errors import UsageError
from harness.paths import RESULTS_DIR
from harness.spec.scenario import load_all, select

REPRO_ARMS = ("none", "upstream")


def plan_cells(scenarios, arms) -> list[tuple]:
    """(scenario, Arm) cells; a scenario that lists its own arms runs only those of the requested ones."""
    return [(s, a) for s in scenarios for a in arms if s.arms is None or a.name in s.arms]


def finish(result: PlanResult, json_path: str | None) -> str:
    """The table every run command prints, also kept as results/latest.md; --json writes the records."""
    from harness.render.tables import summary_counts, verdict_table, versions_line

    records = result.records
    text = (f"{verdict_table(records)}\n\n{summary_counts(records)}\n{versions_line(records)}\n"
            f"records: {shown_path(result.path)}\n")
    (RESULTS_DIR / "latest.md").write_text(text)
    if json_path:
        Path(json_path).write_text(json.dumps(records, indent=1, default=str))
    print(text)
    return text


def _run(command: str, args, scenarios, arms) -> PlanResult:
    result = run_plan(command, plan_cells(scenarios, arms), jobs=args.jobs, keep_traces=args.keep_traces)
    finish(result, args.json)
    return result


def cmd_repro(args) -> int:
    scenarios = select(load_all(), args.scenario)
    if not args.scenario:
        scenarios = [s for s in scenarios if "repro" in s.tags]
    result = _run("repro", args, scenarios, [resolve_arm(n) for n in REPRO_ARMS])
    return 1 if any(r["outcome"] == "hang" for r in result.records) else 0


def cmd_run(args) -> int:
    result = _run("run", args, select(load_all(), args.scenario), [resolve_arm(n) for n in args.arm or ["upstream"]])
    return 1 if any(r["outcome"] == "hang" for r in result.records) else 0


def cmd_verify(args) -> int:
    target = resolve_arm(args.patch or "upstream")
    beside = [] if args.alone else [n for n in REPRO_ARMS if n != target.name]
    result = _run("verify", args, select(load_all(), args.scenario), [target] + [resolve_arm(n) for n in beside])
    mine = [(r, line) for r, line in zip(result.records, result.lines) if r["arm"] == target.name]
    failing = [(r, line) for r, line in mine if r["outcome"] not in ("pass", "skipped")]
    ran = [r for r, _ in mine if r["outcome"] != "skipped"]
    if failing:
        print(f"verdict: {target.name} FAILS in {len(failing)} of {len(ran)} scenario(s):")
        for r, line in failing:
            detail = (r.get("error") or {}).get("message") or "; ".join(r.get("failures", [])[:3])
            print(f"  {r['scenario']}: {r['outcome']}: {detail}")
            if r.get("why"):
                print(f"    why: {r['why']}")
            if r.get("run_dir"):
                print(f"    rank logs: {r['run_dir']}/torchrun.log")
            if line:
                print(f"    whole error, traceback, diagnosis: python -m harness report --full "
                      f"{shown_path(result.path)}:{line}")
        return 1
    if not ran:
        print(f"verdict: {target.name} could not be run in any scenario here")
        return 1
    print(f"verdict: {target.name} passes all {len(ran)} scenario(s) that ran here")
    return 0


def cmd_matrix(args) -> int:
    """Every scenario x arm named in scenarios/expectations.yaml; exit 1 on any drift from it, either way."""
    from harness.spec.expectations import drift_lines, load_expectations

    expected = load_expectations()
    scenarios = select(load_all(), args.scenario)
    missing = [s.name for s in scenarios if s.name not in expected]
    if missing:
        raise UsageError(f"scenarios/expectations.yaml: no entry for scenario(s) {', '.join(missing)}")
    arm_names = sorted({a for s in scenarios for a in expected[s.name]}, key=lambda a: (a != "none", a))
    arms = {n: resolve_arm(n) for n in arm_names}
    cells = [(s, arms[a]) for s in scenarios for a in arm_names if a in expected[s.name]]
    result = run_plan("matrix", cells, jobs=args.jobs, keep_traces=args.keep_traces)
    finish(result, args.json)
    moved = drift_lines(result.records, expected)
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from scenarios/expectations.yaml:\n" + "\n".join(moved))
        return 1
    print(f"matrix: all {len(result.records)} cells as expected")
    return 0
