"""repro, run, verify, matrix: plan cells, run them through the one runner, print the verdict table."""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import UsageError
from harness.inputs.scenario import load_all, select
from harness.paths import RESULTS_DIR, shown_path
from harness.plan.arms import resolve_arm
from harness.records.results import Record
from harness.run.runner import PlanResult, run_plan

REPRO_ARMS = ("none", "upstream")


def plan_cells(scenarios, arms) -> list[tuple]:
    """(scenario, Arm) cells; a scenario that lists its own arms runs only those of the requested ones."""
    return [(s, a) for s in scenarios for a in arms if s.arms is None or a.name in s.arms]


def finish(result: PlanResult, json_path: str | None) -> str:
    """The table every run command prints, also kept as results/latest.md; --json writes the records."""
    from harness.render.tables import summary_counts, terminal_report, verdict_table, versions_line

    records = result.records
    text = (
        f"{verdict_table(records)}\n\n{summary_counts(records)}\n{versions_line(records)}\n"
        f"records: {shown_path(result.path)}\n"
    )
    (RESULTS_DIR / "latest.md").write_text(text)
    if json_path:
        Path(json_path).write_text(json.dumps([r.written() for r in records], indent=1, default=str))
    print(terminal_report(records, text))
    return text


def run_cells(command: str, args, cells: list[tuple], reuse: frozenset[str] = frozenset()) -> PlanResult:
    """The cells through the runner, on this host's threads, or with --ray ADDRESS as tasks of that Ray cluster
    (ray is imported only then). reuse: the arms whose cells may stand on an earlier record with the same inputs
    (plan/reuse.py); none on Ray (a node's environment is its own)."""
    executor = None
    if getattr(args, "ray", None):
        from harness.run.ray_executor import RayExecutor

        executor, reuse = RayExecutor(args.ray), frozenset()
    return run_plan(command, cells, jobs=args.jobs, keep_traces=args.keep_traces, reuse=reuse, executor=executor)


def _run(command: str, args, scenarios, arms, reuse: frozenset[str] = frozenset()) -> PlanResult:
    result = run_cells(command, args, plan_cells(scenarios, arms), reuse)
    finish(result, args.json)
    return result


def checked_inputs(names: list[str] | None) -> tuple[list, dict]:
    """(the selected scenarios, scenarios/expectations.yaml), every file read and validated now, before the first
    cell starts: a typo in either stops the command in a second, not after every cell has run."""
    from harness.inputs.expectations import check_scenario_names, load_expectations

    scenarios = load_all()
    expected = load_expectations()
    check_scenario_names(expected, {s.name for s in scenarios})
    return select(scenarios, names), expected


def print_stub(records: list[Record], expected: dict) -> None:
    """For the cells without an expectation: what was observed, as a paste-ready expectations.yaml entry."""
    from harness.inputs.expectations import EXPECTATIONS_FILE, stub_yaml

    stub = stub_yaml(records, expected)
    if stub:
        print(f"no expectation for some cells; observed, for {shown_path(EXPECTATIONS_FILE)} (write each reason):")
        print(stub, end="")


def cmd_repro(args) -> int:
    """README's headline: the repro scenarios under none, upstream and the candidate (scenarios/releases.yaml's
    `candidate`), closed by how many cells are as scenarios/expectations.yaml says. Exit 1 on a hang or drift."""
    from harness.inputs.releases import load_release_plan

    scenarios, expected = checked_inputs(args.scenario)
    if not args.scenario:
        scenarios = [s for s in scenarios if "repro" in s.tags]
    arms = [resolve_arm(n) for n in (*REPRO_ARMS, load_release_plan().candidate)]
    result = _run("repro", args, scenarios, arms)
    line = expectation_line(result.records, expected)
    print(line)
    print_stub(result.records, expected)
    return 1 if not line.startswith("as expected:") or any(r.outcome == "hang" for r in result.records) else 0


def expectation_line(records: list[Record], expected: dict) -> str:
    """One line: "as expected: 12/12 (scenarios/expectations.yaml)", or the cells that drifted, each named."""
    from harness.inputs.expectations import EXPECTATIONS_FILE, drift

    where = shown_path(EXPECTATIONS_FILE)
    moved, unknown = [], []
    for r in records:
        entry = (expected.get(r.scenario) or {}).get(r.arm)
        if entry is None:
            unknown.append(f"{r.scenario} x {r.arm}")
        elif drift(r, entry):
            moved.append(f"{r.scenario} x {r.arm}: {drift(r, entry)[0]}")
    same = len(records) - len(moved) - len(unknown)
    if not moved and not unknown:
        return f"as expected: {same}/{len(records)} ({where})"
    parts = [f"DRIFT: {same}/{len(records)} as expected ({where})"]
    parts += [f"  drift: {m}" for m in moved] + [f"  no expectation: {u}" for u in unknown]
    return "\n".join(parts)


def cmd_run(args) -> int:
    scenarios, expected = checked_inputs(args.scenario)
    result = _run("run", args, scenarios, [resolve_arm(n) for n in args.arm or ["upstream"]])
    print_stub(result.records, expected)
    return 1 if any(r.outcome == "hang" for r in result.records) else 0


def _record_lines(path: Path) -> dict:
    """(run_dir, finished_at) -> the record's line in its results file (records land in the order runs end)."""
    from harness.records.store import read_records

    try:
        return {(r.run_dir, r.finished_at): i + 1 for i, r in enumerate(read_records(path))}
    except OSError:
        return {}


def cmd_verify(args) -> int:
    """The patch beside none and upstream; the verdict counts what the patch breaks or leaves broken, not a verl
    defect it does not touch (judge/patch_verdict.py). Exit 0: nothing counted against it; 1: something is."""
    from harness.judge.patch_verdict import judge_patch

    scenarios, expected = checked_inputs(args.scenario)
    target = resolve_arm(args.patch or "upstream")
    beside = [] if args.alone else [n for n in REPRO_ARMS if n != target.name]
    scenarios, left_out = verify_scenarios(scenarios, args.nightly)
    from harness.render.pictures import import_in_background

    import_in_background()  # the picture's matplotlib, while the cells run
    # The arms beside the patch are the same cells from one patch to the next: an earlier run's records stand
    # where every input is the same (plan/reuse.py); the patch itself always runs.
    result = _run("verify", args, scenarios, [target] + [resolve_arm(n) for n in beside], reused_arms(args, beside))
    verdict = judge_patch(target.name, result.records, expected)
    print_verdict(verdict, result.path)
    print(verify_picture(result.records, target.name))
    print_stub([r for r in result.records if r.arm in ("none", "upstream")], expected)
    if left_out:  # the closing lines: what was left out and how to run it
        print(left_out_lines(left_out))
    return verdict.exit_code


def reused_arms(args, beside: list[str]) -> frozenset[str]:
    """The arms whose cells verify may take from an earlier run: those beside the patch, unless --fresh or
    --keep-traces (a reused record has no trace)."""
    return frozenset() if args.fresh or args.keep_traces else frozenset(beside)


def verify_scenarios(chosen: list, nightly: bool) -> tuple[list, list]:
    """(scenarios verify runs, those it leaves out): what `make test` runs, so scenarios tagged nightly (minutes
    a cell) only with --nightly, named with --scenario or not. Nothing left to run is a usage error."""
    if nightly:
        return chosen, []
    kept = [s for s in chosen if "nightly" not in s.tags]
    left_out = [s for s in chosen if "nightly" in s.tags]
    if not kept:
        names = ", ".join(s.name for s in left_out)
        raise UsageError(f"verify: every scenario chosen is tagged nightly ({names}): add --nightly to run them")
    return kept, left_out


def left_out_lines(left_out: list) -> str:
    """The closing lines of a verify that left scenarios out: which, and how to run them."""
    names = ", ".join(s.name for s in left_out)
    return (
        f"left out: {len(left_out)} scenario(s) tagged nightly, as make test leaves them ({names})\n"
        f"  run them too: python -m harness verify --nightly (make verify ARGS=--nightly), or make matrix"
    )


def verify_picture(records: list[Record], arm: str) -> str:
    """The picture of a verify a reviewer pastes under a PR: per scenario none / upstream / the patch, each failing
    cell with its why (render/pictures.py), SVG and PNG in the results directory; the line that says where."""
    from harness.render.pictures import outcome_grid

    try:
        path = outcome_grid(records, RESULTS_DIR / f"verify-{arm}.svg", title=f"verify {arm}")
    except ImportError as exc:  # matplotlib is in the dev group; pictures.py imports it only to draw
        return f"picture: not drawn ({exc})"
    return f"picture: {shown_path(path.with_suffix('.png'))} (and .svg)"


def print_verdict(verdict, results_path: Path) -> None:
    """The closing lines of verify: what is not counted and why, changes, head memory, then the verdict."""
    from harness.judge.head_memory import flag_sizes

    name = verdict.arm
    if verdict.as_upstream:
        print(f"not counted against {name}: it fails there exactly as upstream does, for a known verl defect:")
        for r, known, against in verdict.as_upstream:
            print(f"  {r.scenario}: {r.outcome}: same as upstream: {known}")
            print(f"    compared with {against}")
    if verdict.changes:
        print(f"{name} changes upstream's outcome where upstream fails for a known verl defect:")
        for r, text in verdict.changes:
            print(f"  {r.scenario}: {text}")
    if verdict.memory:
        print(f"head memory ({verdict.memory_basis}): {name} builds larger logits than that:")
        for r, text in verdict.memory:
            print(f"  {r.scenario}: {text}")
    memory_note = (
        f"; FLAG: larger tokens x vocab logits than upstream's fused head in {len(verdict.memory)} "
        f"scenario(s) ({', '.join(f'{r.scenario}: {flag_sizes(r)}' for r, _ in verdict.memory)})"
        if verdict.memory
        else ""
    )
    not_counted = (
        f"; {len(verdict.as_upstream)} more fail(s) exactly as upstream does (not counted, above)"
        if verdict.as_upstream
        else ""
    )
    if verdict.failing:
        print(
            f"verdict: {name} FAILS in {len(verdict.failing)} of {len(verdict.ran)} scenario(s){not_counted}"
            f"{memory_note}:"
        )
        lines = _record_lines(results_path)
        for r, note in verdict.failing:
            detail = (r.error.message if r.error else None) or "; ".join(r.failures[:3])
            print(f"  {r.scenario}: {r.outcome}: {detail}")
            if r.why:
                print(f"    why: {r.why}")
            if note:
                print(f"    {note}")
            if r.run_dir:
                print(f"    rank logs: {r.run_dir}/torchrun.log")
            line = lines.get((r.run_dir, r.finished_at))
            if line:
                print(
                    f"    whole error, traceback, diagnosis: python -m harness report --full "
                    f"{shown_path(results_path)}:{line}"
                )
        return
    if not verdict.ran:
        print(f"verdict: {name} could not be run in any scenario here")
        return
    judged = len(verdict.ran) - len(verdict.as_upstream)
    print(f"verdict: {name} passes all {judged} scenario(s) it is judged on here{not_counted}{memory_note}")


def cmd_matrix(args) -> int:
    """Every scenario x arm named in scenarios/expectations.yaml; exit 1 on any drift from it, either way."""
    from harness.inputs.expectations import drift_lines

    scenarios, expected = checked_inputs(args.scenario)
    missing = [s.name for s in scenarios if s.name not in expected]
    if missing:
        raise UsageError(f"scenarios/expectations.yaml: no entry for scenario(s) {', '.join(missing)}")
    arm_names = sorted({a for s in scenarios for a in expected[s.name]}, key=lambda a: (a != "none", a))
    arms = {n: resolve_arm(n) for n in arm_names}
    cells = [(s, arms[a]) for s in scenarios for a in arm_names if a in expected[s.name]]
    result = run_cells("matrix", args, cells)
    finish(result, args.json)
    moved = drift_lines(result.records, expected)
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from scenarios/expectations.yaml:\n" + "\n".join(moved))
        return 1
    print(f"matrix: all {len(result.records)} cells as expected")
    return 0
