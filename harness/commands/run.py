"""repro, run, verify, matrix: plan cells, run them through the one runner, print the verdict table."""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError
from harness.inputs.scenario import load_chosen, scenario_names
from harness.paths import results_dir, shown_path
from harness.plan.arms import resolve_arm
from harness.records.results import Record
from harness.run.runner import PlanResult, run_plan

REPRO_ARMS = ("none", "upstream")


def plan_cells(scenarios, arms) -> list[tuple]:
    """(scenario, Arm) cells; a scenario that lists its own arms runs only those of the requested ones."""
    return [(s, a) for s in scenarios for a in arms if s.arms is None or a.name in s.arms]


def finish(result: PlanResult, json_path: str | None, whole_whys: set[str] | None = None) -> str:
    """The table every run command prints, also kept as results/latest.md; --json writes the records.
    whole_whys: the arms whose cut whys are listed whole under the table (verify: the patch's only; the others'
    stay one line each, whole in latest.md and the records)."""
    from harness.render.tables import summary_counts, terminal_report, verdict_table, versions_line
    from harness.render.untrusted import report_text

    records = result.records
    text = (
        f"{verdict_table(records)}\n\n{summary_counts(records)}\n{versions_line(records)}\n"
        f"records: {shown_path(result.path)}\n"
    )
    # Error messages and names from the ranks and the patch: escaped as on the terminal (a lone surrogate, an escape
    # sequence), so writing it never fails and `cat` shows it safely (render/untrusted.py).
    (results_dir() / "latest.md").write_text(report_text(text), encoding="utf-8")
    if json_path:
        write_json(records, json_path)
    print(terminal_report(records, text, whole_whys))
    return text


def write_json(records: list[Record], json_path: str) -> None:
    """--json: the records as a list, each as its results line writes it."""
    Path(json_path).write_text(json.dumps([r.written() for r in records], indent=1, default=str))


def run_cells(command: str, args, cells: list[tuple], reuse: frozenset[str] = frozenset()) -> PlanResult:
    """The cells through the runner, on this host's threads, or with --ray ADDRESS as tasks of that Ray cluster
    (ray is imported only then). reuse: the arms whose cells may stand on an earlier record with the same inputs
    (plan/reuse.py); none on Ray (a node's environment is its own)."""
    executor = None
    if getattr(args, "ray", None):
        from harness.run.ray_executor import RayExecutor

        executor, reuse = RayExecutor(args.ray), frozenset()
    return run_plan(command, cells, jobs=args.jobs, keep_traces=args.keep_traces, reuse=reuse, executor=executor)


def _run(
    command: str, args, scenarios, arms, reuse: frozenset[str] = frozenset(), whole_whys: set[str] | None = None
) -> PlanResult:
    result = run_cells(command, args, plan_cells(scenarios, arms), reuse)
    finish(result, args.json, whole_whys)
    return result


def checked_inputs(names: list[str] | None) -> tuple[list, dict]:
    """(the selected scenarios, scenarios/expectations.yaml), the files used read and validated now, before the first
    cell starts: a typo in either stops the command in a second, not after every cell has run. Only the chosen
    scenarios' files are read: another file that does not load is no concern of this command."""
    from harness.inputs.expectations import check_scenario_names, load_expectations

    scenarios = load_chosen(names)
    expected = load_expectations()
    check_scenario_names(expected, scenario_names())
    return scenarios, expected


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
    from harness.inputs.release_plan import load_release_plan

    scenarios, expected = checked_inputs(args.scenario)
    if not args.scenario:
        scenarios = [s for s in scenarios if "repro" in s.tags]
    arms = [resolve_arm(n) for n in (*REPRO_ARMS, load_release_plan().candidate)]
    result = _run("repro", args, scenarios, arms)
    line = expectation_line(result.records, expected)
    print(line)
    print_stub(result.records, expected)
    drifted = not line.startswith("as expected:") or any(r.outcome == "hang" for r in result.records)
    return EXIT_COUNTED if drifted else EXIT_OK


def expectation_line(records: list[Record], expected: dict) -> str:
    """One line: "as expected: 12/12 (scenarios/expectations.yaml)", or the cells that drifted, each named; the
    cells whose arm does not apply to this verl are neither (a line per arm after it)."""
    from harness.inputs.expectations import EXPECTATIONS_FILE, drift, not_applied_lines

    where = shown_path(EXPECTATIONS_FILE)
    not_run = not_applied_lines(records)
    records = [r for r in records if r.verdict.not_applied is None]
    moved, unknown = [], []
    for r in records:
        entry = (expected.get(r.scenario) or {}).get(r.arm)
        if entry is None:
            unknown.append(f"{r.scenario} x {r.arm}")
        elif drift(r, entry):
            moved.append(f"{r.scenario} x {r.arm}: {drift(r, entry)[0]}")
    same = len(records) - len(moved) - len(unknown)
    if not moved and not unknown:
        return "\n".join([f"as expected: {same}/{len(records)} ({where})", *not_run])
    parts = [f"DRIFT: {same}/{len(records)} as expected ({where})"]
    parts += [f"  drift: {m}" for m in moved] + [f"  no expectation: {u}" for u in unknown]
    return "\n".join(parts + not_run)


def cmd_run(args) -> int:
    scenarios, expected = checked_inputs(args.scenario)
    result = _run("run", args, scenarios, [resolve_arm(n) for n in args.arm or ["upstream"]])
    print_stub(result.records, expected)
    return EXIT_COUNTED if any(r.outcome == "hang" for r in result.records) else EXIT_OK


def _record_lines(path: Path) -> dict:
    """(run_dir, finished_at) -> the record's line in its results file (records land in the order runs end)."""
    from harness.records.store import read_records

    try:
        return {(r.run_dir, r.stamp.finished_at): i + 1 for i, r in enumerate(read_records(path))}
    except OSError:
        return {}


def cmd_verify(args) -> int:
    """The patch beside none and upstream; the verdict leads with what the patch changes against upstream beside it
    and counts what it breaks or leaves broken in its own code, not upstream's own failures in code it does not
    touch nor a known verl defect (judge_change/patch_verdict.py; --absolute: every failure but a known defect's). Exit
    (harness/errors.py): EXIT_OK nothing counted against it; EXIT_COUNTED something is; EXIT_NOT_JUDGED nothing
    judged (does not apply, cannot run here) or usage.
    The output ends with the block about the patch (render/verify_closing.py, print_verdict): what it changes, its
    failures by cause, the warnings its runs raised that upstream's did not, the cost flags and the verdict line;
    after it only where to look further (records, rank logs, the picture, expectation stubs), a line each."""
    from harness.judge_change.patch_verdict import judge_patch

    scenarios, expected = checked_inputs(args.scenario)
    if args.alone and (getattr(args, "differential", False) or getattr(args, "pr", None)):
        raise UsageError("verify: --differential judges the patch against upstream run beside it: not with --alone")
    if getattr(args, "absolute", False) and (getattr(args, "differential", False) or getattr(args, "pr", None)):
        raise UsageError("verify: --absolute and --differential are two verdicts: choose one")
    target = resolve_arm(args.patch or "upstream")
    beside = beside_arms(target.name, args)
    scenarios, left_out = verify_scenarios(scenarios, args.nightly, named=bool(args.scenario))
    families = FamilyView(target, scenarios, chosen=bool(args.scenario))
    scenarios, left_out = families.scenarios, families.kept(left_out)
    from harness.render.pictures import import_in_background

    import_in_background()  # the picture's matplotlib, while the cells run
    # The arms beside the patch are the same cells from one patch to the next: an earlier run's records stand
    # where every input is the same (plan/reuse.py); the patch itself always runs.
    arms = [target] + [resolve_arm(n) for n in beside]
    result = _run("verify", args, scenarios, arms, reused_arms(args, beside), {target.name})
    code, reached = _reach(args, target, result, scenarios, left_out)  # the scenarios that run the code none ran
    differential = bool(getattr(args, "differential", False) or getattr(args, "pr", None))
    verdict = judge_patch(target.name, result.records, expected, differential, by_change_files(args, target))
    coverage = None
    if code is not None and verdict.not_applied is None:  # what of the patch ran, line by line (commands/ran_lines.py)
        from harness.commands.ran_lines import patch_ran_lines
        from harness.judge_change.patch_coverage import hunk_coverage

        verdict.ran_lines, verdict.ran_note = patch_ran_lines(code, target.name, result.records, left_out, result.path)
        verdict.ran_lines += reached
        coverage = hunk_coverage(code.hunks, [r for r in result.records if r.arm == target.name])
    if verdict.not_applied is None:  # "is my recipe hit?": each recipe's answer (judge_change/recipe_verdict.py)
        from harness.judge_change.recipe_verdict import recipe_answers

        verdict.recipes = recipe_answers(target.name, result.records, coverage, families.defects())
    print_verdict(verdict, result.path, target.patches, result.records, families.lines(result.records))
    if getattr(args, "comment", None):  # the verdict as a pull request's comment body (commands/pr_comment.py)
        from harness.commands.pr_comment import write_comment

        print(write_comment(args, verdict, result, left_out))
    from harness.render.pictures import verify_picture

    print(verify_picture(result.records, target.name))
    stub_line = stub_file_line([r for r in result.records if r.arm in ("none", "upstream")], expected, target.name)
    if stub_line:
        print(stub_line)
    if left_out:  # the closing lines: what was left out and how to run it
        print(left_out_lines(left_out, rerun_command(args)))
    return verdict.exit_code


def by_change_files(args, target) -> list[str] | None:
    """The files the patch changes where verify's verdict is by change, its default (issue 74: what the patch changes
    against upstream beside it leads; upstream's own failures in code it does not touch are not counted); None for
    the absolute verdict: --absolute, --alone (nothing beside it to compare with), no patch (verify of upstream)."""
    if getattr(args, "absolute", False) or args.alone or not target.patches:
        return None
    from harness.judge_change.patch_verdict import patch_changes

    return patch_changes(target.patches)[1]


def _reach(args, target, result, scenarios: list, left_out: list) -> tuple:
    """(the patch's code: lines, branches, config defaults; the reach's lines): with --reach-seconds (pr's default),
    the scenarios that run the changed code no default scenario ran are looked for and, where found, their cells
    (both arms) join the result's records, judged with the others (commands/reach.py)."""
    mine = [r for r in result.records if r.arm == target.name]
    if not target.patches or any(r.verdict.not_applied is not None for r in mine):
        return None, []  # no diff, or one that does not apply to this verl: no code of it ran
    from harness.commands.ran_lines import code_of_files
    from harness.commands.reach import reach_further

    code = code_of_files(target.patches)  # lines and branches per file, a config's defaults
    reached = reach_further(args, target, code, result.records, scenarios, left_out, run_cells)
    result.records = result.records + reached.records
    result.lines = result.lines + [None] * len(reached.records)  # theirs are in the reach's own results files
    if reached.records and getattr(args, "json", None):  # --json holds every record the verdict judges
        write_json(result.records, args.json)
    return code, reached.lines


def beside_arms(target: str, args) -> list[str]:
    """The arms verify runs beside the patch: none and upstream for the absolute verdict (which lists both); only
    upstream, the base, for a differential one (harness pr's: judge_change/base_change.py reads the base alone), where
    none (#6659 undone, merged onto the base) was a quarter of a pull request's cell time for nothing its verdict
    says."""
    if args.alone:
        return []
    differential = bool(getattr(args, "differential", False) or getattr(args, "pr", None))
    if differential and target != "upstream":
        return ["upstream"]
    return [n for n in REPRO_ARMS if n != target]


def rerun_command(args) -> tuple[str, str]:
    """The command the user ran and its make form, as the hint to run what it left out names them: `pr CHECKOUT
    RANGE` for a pull request (verify --pr is pr's own re-entry into verify), else verify."""
    if getattr(args, "pr", None):
        checkout, text = args.pr
        return f"python -m harness pr {checkout} {text}", f"make pr CHECKOUT={checkout} RANGE={text}"
    return "python -m harness verify", "make verify"


class FamilyView:
    """verify and verl's model families (plan/families.py): the scenarios tagged `family` kept only where the patch
    touches their model's file (all of them when --scenario chose them), and the closing block's lines on the
    family files the patch leaves with #6659's defect."""

    def __init__(self, target, scenarios: list, chosen: bool):
        from harness.plan.families import patch_family_view

        self.touched, self.reads = patch_family_view(target.patches)
        self.arm, self.chosen, self.patched = target.name, chosen, bool(target.patches)
        self.scenarios = self.kept(scenarios)

    def defects(self) -> dict[str, str]:
        """family file -> how its fused head still reads lm_head, where the patch leaves #6659's defect there."""
        from harness.plan.families import DEFECT_WORDS

        reads = self.reads if isinstance(self.reads, list) else []
        return {r.file: DEFECT_WORDS[r.read][0] for r in reads if r.defect}

    def kept(self, scenarios: list) -> list:
        """The scenarios a verify of this patch runs (or, nightly ones, names as left out) of those given."""
        from harness.plan.families import family_scenarios

        return scenarios if self.chosen else family_scenarios(scenarios, self.touched)[0]

    def lines(self, records: list[Record]) -> list[str]:
        from collections import Counter

        from harness.plan.families import family_lines, scenario_family_file

        by_name = {s.name: s for s in self.scenarios}
        ran = {r.scenario for r in records if r.arm == self.arm and r.outcome != "skipped" and r.scenario in by_name}
        judged = Counter(scenario_family_file(by_name[name]) for name in ran)
        return family_lines(self.reads, dict(judged), self.touched, self.patched)


def stub_file_line(records: list[Record], expected: dict, arm: str) -> str | None:
    """verify's expectation stubs (none's and upstream's cells without an entry) written to a file beside the
    results, named in one line after the verdict, rather than printed whole there."""
    from harness.inputs.expectations import EXPECTATIONS_FILE, stub_yaml

    stub = stub_yaml(records, expected)
    if not stub:
        return None
    path = results_dir() / f"verify-{arm}-expectations-stub.yaml"
    path.write_text(stub)
    cells = stub.count("\n    outcome:")
    return (
        f"no expectation for {cells} cell(s): observed, paste-ready for {shown_path(EXPECTATIONS_FILE)} "
        f"(write each reason): {shown_path(path)}"
    )


def reused_arms(args, beside: list[str]) -> frozenset[str]:
    """The arms whose cells verify may take from an earlier run: those beside the patch, unless --fresh or
    --keep-traces (a reused record has no trace)."""
    return frozenset() if args.fresh or args.keep_traces else frozenset(beside)


def verify_scenarios(chosen: list, nightly: bool, named: bool = False) -> tuple[list, list]:
    """(scenarios verify runs, those it leaves out): what `make test` runs, so scenarios tagged nightly (minutes
    a cell) only with --nightly, or where --scenario names them (named: a scenario named runs, nightly or not).
    Nothing left to run is a usage error."""
    if nightly or named:
        return chosen, []
    kept = [s for s in chosen if "nightly" not in s.tags]
    left_out = [s for s in chosen if "nightly" in s.tags]
    if not kept:
        names = ", ".join(s.name for s in left_out)
        raise UsageError(f"verify: every scenario chosen is tagged nightly ({names}): add --nightly to run them")
    return kept, left_out


def left_out_lines(left_out: list, command: tuple[str, str] = ("python -m harness verify", "make verify")) -> str:
    """The closing lines of a verify (or pr: command, rerun_command's) that left scenarios out: which, and how to
    run them."""
    names = ", ".join(s.name for s in left_out)
    return (
        f"left out: {len(left_out)} scenario(s) tagged nightly, as make test leaves them ({names})\n"
        f"  run them too: {command[0]} --nightly ({command[1]} ARGS=--nightly), or make matrix"
    )


def print_verdict(
    verdict, results_path: Path, patches=(), records: list[Record] | None = None, families: list[str] = ()
) -> None:
    """verify's closing block about the patch (render/verify_closing.py writes it): the data it says beyond the
    verdict gathered here, what the patch is (its diffs' description and files) and where the counted cells' records
    are in the results file; families: FamilyView.lines."""
    from harness.judge_change.patch_verdict import patch_changes
    from harness.render.verify_closing import AboutPatch, ClosingContext, closing_lines

    about = None
    if patches:
        description, files = patch_changes(patches)
        about = AboutPatch(tuple(shown_path(Path(p)) for p in patches), description, tuple(files))
    context = ClosingContext(
        about=about,
        families=tuple(families),
        results=shown_path(results_path),
        record_lines=_record_lines(results_path) if verdict.counted else {},
    )
    print("\n".join(closing_lines(verdict, records or [], context)))


def cmd_matrix(args) -> int:
    """Every scenario x arm named in scenarios/expectations.yaml; exit 1 on any drift from it, either way."""
    from harness.inputs.expectations import drift_lines, not_applied_lines

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
    not_run = not_applied_lines(result.records)
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from scenarios/expectations.yaml:\n" + "\n".join(moved + not_run))
        return EXIT_COUNTED
    ran = sum(r.verdict.not_applied is None for r in result.records)
    print("\n".join([f"matrix: all {ran} cells as expected", *not_run]))
    return EXIT_OK
