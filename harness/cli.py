"""python -m harness repro|verify|run|list|report — the one entry point; Makefile targets call it."""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.errors import UsageError
from harness.paths import RESULTS_DIR, ROOT, SCENARIOS_DIR
from harness.scenario import load_all, scenario_files, select

REPRO_ARMS = ("none", "upstream")


def _plan(scenarios, arm_names):
    """(scenario, arm name) pairs; a scenario that lists its own arms runs only those of the requested ones."""
    return [(s, a) for s in scenarios for a in arm_names if s.arms is None or a in s.arms]


def execute(command: str, scenarios, arms: list, *, jobs: int = 1, keep_traces: bool = False,
            quiet: bool = False, plan=None) -> tuple[list[dict], Path]:
    """Materialise arms, launch every run, judge it, append its record; returns (records, results file)."""
    from harness.arms import arm_fingerprint, materialise
    from harness.launch import launch
    from harness.record import ResultsFile, attach_scenario, invocation_info, stamp_record
    from harness.verdict import judge

    arm_dirs = {arm.name: materialise(arm) for arm in arms}  # a diff that does not apply stops us here
    fingerprints = {arm.name: arm_fingerprint(arm) for arm in arms}
    files = {s.name: p for p in scenario_files(SCENARIOS_DIR) for s in scenarios if p.stem == s.name}
    invocation = invocation_info(command)
    results = ResultsFile(command)
    batch_id = uuid.uuid4().hex[:8]
    plan = plan if plan is not None else _plan(scenarios, [a.name for a in arms])

    def one(item):
        scenario, arm_name = item
        raw = launch(scenario, arm_name, arm_dirs[arm_name], keep_traces=keep_traces, batch_id=batch_id)
        record = judge(raw)
        attach_scenario(record, scenario)
        return stamp_record(record, scenario_file=files.get(scenario.name),
                            arm_fingerprint=fingerprints[arm_name], invocation=invocation)

    records = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for record in pool.map(one, plan):
            results.append(record)
            records.append(record)
            if not quiet:
                print(f"  {record['scenario']:<24} {record['arm']:<22} {record['outcome']:<9} "
                      f"{record.get('wall_s', 0):6.1f}s", file=sys.stderr, flush=True)
    results.close()
    return records, results.path


def _write_latest(records: list[dict], results_path: Path) -> str:
    from harness.report import markdown_table, summary_counts, versions_line

    text = (f"{markdown_table(records)}\n\n{summary_counts(records)}\n{versions_line(records)}\n"
            f"records: {results_path.relative_to(ROOT) if results_path.is_relative_to(ROOT) else results_path}\n")
    (RESULTS_DIR / "latest.md").write_text(text)
    return text


def _arms(names):
    from harness.arms import resolve_arm

    return [resolve_arm(n) for n in names]


def cmd_list(args) -> int:
    if getattr(args, "names", False):  # one scenario name a line: the nightly workflow's matrix is built from it
        print("\n".join(s.name for s in load_all()))
        return 0
    from harness.arms import known_arms

    for s in load_all():
        extras = [k for k in ("compile", "cpu_offload", "forward_only") if getattr(s, k)]
        print(f"{s.name:<24} ranks={s.ranks} device={s.device} precision={s.precision} "
              f"{' '.join(extras)}  {s.description}".rstrip())
    print("arms: " + ", ".join(known_arms()))
    return 0


def cmd_run(args, arm_names, command) -> int:
    scenarios = select(load_all(), args.scenario)
    if command == "repro" and not args.scenario:
        scenarios = [s for s in scenarios if "repro" in s.tags]
    records, path = execute(command, scenarios, _arms(arm_names), jobs=args.jobs, keep_traces=args.keep_traces)
    print(_write_latest(records, path))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    hung = [r for r in records if r["outcome"] == "hang"]
    return 1 if hung else 0


def cmd_verify(args) -> int:
    from harness.arms import resolve_arm

    target = resolve_arm(args.patch) if args.patch else resolve_arm("upstream")
    beside = [] if args.alone else [n for n in REPRO_ARMS if n != target.name]
    scenarios = select(load_all(), args.scenario)
    records, path = execute("verify", scenarios, [target] + _arms(beside), jobs=args.jobs,
                            keep_traces=args.keep_traces)
    print(_write_latest(records, path))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    mine = [r for r in records if r["arm"] == target.name]
    failing = [r for r in mine if r["outcome"] not in ("pass", "skipped")]
    ran = [r for r in mine if r["outcome"] != "skipped"]
    if failing:
        print(f"verdict: {target.name} FAILS in {len(failing)} of {len(ran)} scenario(s):")
        for r in failing:
            detail = (r.get("error") or {}).get("message") or "; ".join(r.get("failures", [])[:3])
            print(f"  {r['scenario']}: {r['outcome']}: {detail}")
        return 1
    if not ran:
        print(f"verdict: {target.name} could not be run in any scenario here")
        return 1
    print(f"verdict: {target.name} passes all {len(ran)} scenario(s) that ran here")
    return 0


def cmd_matrix(args) -> int:
    """Every scenario x arm named in scenarios/expectations.yaml; exit 1 on any drift from it, either way."""
    from harness.expectations import drift, load_expectations

    expected = load_expectations()
    scenarios = select(load_all(), args.scenario)
    missing = [s.name for s in scenarios if s.name not in expected]
    if missing:
        raise UsageError(f"scenarios/expectations.yaml: no entry for scenario(s) {', '.join(missing)}")
    arm_names = sorted({a for s in scenarios for a in expected[s.name]}, key=lambda a: (a != "none", a))
    arms = _arms(arm_names)
    plan = [(s, a) for s in scenarios for a in arm_names if a in expected[s.name]]
    records, path = execute("matrix", scenarios, arms, jobs=args.jobs, keep_traces=args.keep_traces, plan=plan)
    print(_write_latest(records, path))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    moved = []
    for r in records:
        for problem in drift(r, expected[r["scenario"]][r["arm"]]):
            moved.append(f"  {r['scenario']} x {r['arm']}: {problem}")
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from scenarios/expectations.yaml:")
        print("\n".join(moved))
        return 1
    print(f"matrix: all {len(records)} cells as expected")
    return 0


def _load_record(ref: str) -> dict:
    """FILE (a .json record or list, or a .jsonl whose last record is taken) or FILE:N (N-th line, from 1)."""
    from harness.record import read_records

    path_text, _, line = ref.rpartition(":") if ref.rpartition(":")[2].isdigit() else (ref, "", "")
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"{path}: no such record file")
    try:
        if path.suffix == ".jsonl":
            records = read_records(path)
        else:
            data = json.loads(path.read_text())
            records = data if isinstance(data, list) else [data]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a record file: {exc}") from None
    if not records:
        raise UsageError(f"{path}: holds no records")
    index = int(line) - 1 if line else len(records) - 1
    if not 0 <= index < len(records):
        raise UsageError(f"{ref}: record {index + 1} does not exist ({len(records)} in the file)")
    record = records[index]
    if "scenario_spec" not in record:
        raise UsageError(f"{ref}: field 'scenario_spec': missing (a record from before it was stored)")
    return record


def cmd_rerun(args) -> int:
    """Run a record's scenario (as stored in it, seed included) with the same arm, and compare the outcome."""
    from harness.arms import Arm, resolve_arm
    from harness.record import package_versions, sha256_file
    from harness.report import markdown_table
    from harness.scenario import Scenario

    record = _load_record(args.record)
    scenario = Scenario.model_validate_json(json.dumps(record["scenario_spec"]))
    patches = []
    for patch in record.get("arm_patches") or []:
        path = ROOT / patch["file"] if not Path(patch["file"]).is_absolute() else Path(patch["file"])
        if not path.is_file():
            raise UsageError(f"{args.record}: field 'arm_patches': {patch['file']} no longer exists")
        if sha256_file(path) != patch["sha256"]:
            raise UsageError(f"{args.record}: field 'arm_patches': {patch['file']} changed since the record was made")
        patches.append(path)
    arm = Arm(record["arm"], tuple(patches)) if patches else resolve_arm("upstream")
    now = package_versions()
    for name, then in (record.get("versions") or {}).items():
        if now.get(name) != then:
            print(f"note: {name} is {now.get(name)} now, {then} in the record", file=sys.stderr)
    records, path = execute("rerun", [scenario], [arm], jobs=1)
    print(markdown_table([record, records[0]]))
    same = records[0]["outcome"] == record["outcome"]
    print(f"rerun: outcome {records[0]['outcome']} ({'same as' if same else 'differs from'} the record's "
          f"{record['outcome']}); records: {path}")
    return 0 if same else 1


def cmd_bench(args) -> int:
    """Measured lm_head collective cost per arm (tiny model, repeated steps) and its projection to real sizes."""
    from harness import bench
    from harness.arms import resolve_arm

    scenarios = {s.name: s for s in load_all()}
    plan, arms = [], {}
    for name, arm_refs in bench.BENCH_PLAN:
        scenario = scenarios[name].model_copy(update={"repeat": args.repeat, "warmup": 1})
        for ref in arm_refs:
            arm = resolve_arm(str(ROOT / ref) if ref.endswith(".diff") else ref)
            arms[arm.name] = arm
            plan.append((scenario, arm.name))
    records, path = execute("bench", [s for s, _ in plan], list(arms.values()), jobs=args.jobs, plan=plan)
    measured = bench.measured_table(records)
    rows = bench.projection_rows(bench.real_models(), worlds=tuple(args.world), bandwidth_gbps=args.bandwidth)
    projected = bench.projection_table(rows, args.bandwidth)
    png = bench.chart(rows, RESULTS_DIR / "bench-lm-head.png", args.bandwidth, world=max(args.world))
    from harness.record import host_description

    text = (f"## Measured (tiny Qwen3-VL, {records[0].get('host') or host_description()}; "
            f"{args.repeat} timed steps after 1 warm-up)\n\n{measured}\n\n"
            f"## Projected per rank and step (bf16 params, fp32 reduce; {args.bandwidth:g} GB/s)\n\n{projected}\n\n"
            f"chart: {png.relative_to(ROOT)}; records: {path.relative_to(ROOT)}\n")
    (RESULTS_DIR / "bench.md").write_text(text)
    print(text)
    return 0


def cmd_noise_floor(args) -> int:
    """Run a correct arm over several seeds and print the largest error per precision and reference: the
    measurement each tolerance in harness/tolerances.py must sit above."""
    from harness.tolerances import TOLERANCES

    scenarios = select(load_all(), args.scenario)
    seeded = [s.model_copy(update={"seed": s.seed + k}) for k in range(args.seeds) for s in scenarios]
    records, path = execute("noise-floor", seeded, _arms([args.arm]), jobs=args.jobs)
    floors = {}
    for r in records:
        if r["outcome"] not in ("pass", "mismatch") or not r.get("parity"):
            continue
        precision = r["settings"]["precision"]
        for ref_name, parity in [("oracle", r["parity"])] + [(k, v) for k, v in r["parity"].items()
                                                                if isinstance(v, dict) and "logprob_max_abs" in v]:
            floor = floors.setdefault((precision, ref_name), {"logprob_abs": 0.0, "entropy_abs": 0.0, "grad_rel": 0.0})
            for metric, key in (("logprob_abs", "logprob_max_abs"), ("entropy_abs", "entropy_max_abs"),
                                ("grad_rel", "grad_worst_rel")):
                value = parity.get(key)
                if isinstance(value, (int, float)):
                    floor[metric] = max(floor[metric], value)
    print(f"noise floor of arm {args.arm} over {args.seeds} seed(s), {len(records)} runs ({path.name}):")
    for (precision, ref_name), floor in sorted(floors.items()):
        tol = TOLERANCES.get((precision, ref_name))
        bounds = ", ".join(f"{m} {v:.3g}" + (f" (tolerance {getattr(tol, m):g})" if tol else "")
                           for m, v in floor.items())
        print(f"  {precision:<11} vs {ref_name:<13} {bounds}")
    bad = [r for r in records if r["outcome"] not in ("pass", "mismatch")]
    for r in bad:
        print(f"  not measured: {r['scenario']} seed run: {r['outcome']}: {(r.get('error') or {}).get('message')}")
    return 0


def cmd_report(args) -> int:
    """The records of one or more results files (JSON lines, or the JSON list of --json) as a table, a markdown
    summary with drift from scenarios/expectations.yaml (CI's step summary), or JUnit XML."""
    from harness.ci_report import junit_xml, load_records, summary_markdown
    from harness.report import markdown_table, summary_counts, versions_line

    paths = [Path(p) for p in args.results] or [_newest_results()]
    records = [r for path in paths for r in load_records(path)]
    fmt = getattr(args, "format", "table")
    if fmt == "summary":
        print(summary_markdown(records, title=args.title), end="")
        return 0
    if fmt == "junit":
        print(junit_xml(records, title=args.title), end="")
        return 0
    print(markdown_table(records))
    print()
    print(summary_counts(records))
    print(versions_line(records))
    return 0


def _newest_results() -> Path:
    files = sorted(RESULTS_DIR.glob("*.jsonl"))
    if not files:
        raise UsageError("results/: no results file yet (run `make repro` first)")
    return files[-1]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
        p.add_argument("--jobs", type=int, default=1, help="runs at once (each run starts ranks processes)")
        p.add_argument("--json", help="also write the records as one JSON list to this file")
        p.add_argument("--keep-traces", action="store_true", help="keep each rank's profiler trace")

    p = sub.add_parser("repro", help="the scenarios tagged repro with arms none (before verl #6659) and upstream")
    common(p)
    p = sub.add_parser("verify", help="the verdict for one patch (default: upstream verl)")
    common(p)
    p.add_argument("--patch", help="unified diff against verl; its arm is named after the file stem")
    p.add_argument("--alone", action="store_true", help="do not run arms none and upstream beside it")
    p = sub.add_parser("run", help="chosen scenarios x chosen arms")
    common(p)
    p.add_argument("--arm", action="append", help="arm name or diff path (repeatable; default upstream)")
    p = sub.add_parser("rerun", help="run a record again (FILE or FILE:LINE) and compare its outcome")
    p.add_argument("record")
    p = sub.add_parser("matrix", help="every scenario x arm of scenarios/expectations.yaml; exit 1 on drift")
    common(p)
    p = sub.add_parser("bench", help="lm_head collective cost per arm: measured, and projected to real sizes")
    p.add_argument("--repeat", type=int, default=5, help="timed steps per run after one warm-up")
    p.add_argument("--bandwidth", type=float, default=300.0, help="bus bandwidth in GB/s for the projection")
    p.add_argument("--world", type=int, nargs="+", default=[8, 64], help="world sizes to project to")
    p.add_argument("--jobs", type=int, default=1)
    p = sub.add_parser("noise-floor", help="largest errors of a correct arm over several seeds (sets tolerances)")
    p.add_argument("--arm", default="fsdp2-lmhead-forward")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--scenario", action="append")
    p.add_argument("--jobs", type=int, default=1)
    p = sub.add_parser("list", help="scenarios and arms")
    p.add_argument("--names", action="store_true", help="only the scenario names, one a line")
    p = sub.add_parser("report", help="the records of results files (default: the newest) as a table, summary or JUnit")
    p.add_argument("results", nargs="*", help="results files: JSON lines, or the JSON list of --json")
    p.add_argument("--format", choices=("table", "summary", "junit"), default="table",
                   help="table (default); summary: markdown with drift from scenarios/expectations.yaml; junit: XML")
    p.add_argument("--title", help="heading of the summary, name of the JUnit test suite")
    from harness.sweep import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    return parser


def cmd_sweep(args) -> int:
    from harness.sweep import main as sweep_main

    return sweep_main(args)


COMMANDS = {
    "list": cmd_list,
    "repro": lambda args: cmd_run(args, list(REPRO_ARMS), "repro"),
    "run": lambda args: cmd_run(args, args.arm or ["upstream"], "run"),
    "verify": cmd_verify,
    "report": cmd_report,
    "rerun": cmd_rerun,
    "bench": cmd_bench,
    "matrix": cmd_matrix,
    "noise-floor": cmd_noise_floor,
    "sweep": cmd_sweep,
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
