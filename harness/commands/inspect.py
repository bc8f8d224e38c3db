"""list and report: what there is to run, and what ran."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.errors import EXIT_OK
from harness.inputs.scenario import load_each
from harness.paths import shown_path
from harness.records.measures import Diagnosis
from harness.records.results import Record


def cmd_list(args) -> int:
    import sys

    scenarios, broken = load_each()  # a file that does not load is listed as such; the others still are
    for line in broken:
        print(f"does not load (every command that uses it stops on it): {line}", file=sys.stderr)
    if args.names:  # one scenario name a line: the nightly workflow's matrix is built from it
        print("\n".join(s.name for s in scenarios))
        return EXIT_OK
    from harness.inputs.expectations import load_expectations
    from harness.plan.arms import known_arms

    expected = load_expectations()
    for s in scenarios:
        extras = [k for k in ("compile", "cpu_offload", "forward_only") if getattr(s, k)]
        # The engine's batch comes from one of verl's trainers (docs/SCENARIOS.md, `trainer`).
        trainer = f"trainer={s.trainer} " if s.path == "engine" else ""
        print(
            f"{s.name:<24} ranks={s.ranks} device={s.device} precision={s.precision} {trainer}"
            f"{' '.join(extras)}  {s.description}".rstrip()
        )
        for line in verl_lines(s.verl):
            print(f"{'':<24} {line}")
        if s.name not in expected:
            print(
                f"{'':<24} NOTE: no entry in scenarios/expectations.yaml: give each arm an expected outcome "
                "and its reason there (make matrix and make test refuse it until then)"
            )
    arms = known_arms()
    print("arms: " + ", ".join(arms))
    for name, arm in arms.items():
        print(f"  {name:<24} {arm_summary(arm)}")
    return EXIT_OK


def verl_lines(resolved: dict) -> list[str]:
    """A scenario's `verl:` block as `harness list` shows it: how many names set fields, and each name that means
    nothing here with why."""
    from harness.inputs.verl_block import not_applicable_lines

    if not resolved:
        return []
    used = sum(1 for e in resolved.values() if e.get("kind") != "not applicable")
    lines = [f"verl: {used} of {len(resolved)} settings honoured (fields or fixed values)"]
    return lines + [f"  not applicable: {line}" for line in not_applicable_lines(resolved)]


def arm_summary(arm) -> str:
    """The start of an arm's diff description (the text above its first '---' line), one line."""
    if not arm.patches:
        return "the installed verl as it is (no diff)"
    text = Path(arm.patches[0]).read_text(errors="replace").split("\n--- ", 1)[0]
    text = " ".join(text.split()).removeprefix(f"Arm `{arm.name}`: ")
    if len(text) > 120:
        text = text[:120].rsplit(" ", 1)[0] + " …"
    return text or "(no description above the diff)"


def cmd_report(args) -> int:
    """The records of one or more results files (JSON lines, or the JSON list of --json) as a table, a markdown
    summary with drift from scenarios/expectations.yaml (CI's step summary), or JUnit XML."""
    from harness.records.history import newest_results_file
    from harness.records.store import load_records, unread_lines
    from harness.render.ci import junit_xml, summary_markdown
    from harness.render.tables import summary_counts, terminal_table, verdict_table, versions_line

    if getattr(args, "full", False):
        return report_full(args.results)
    paths = [Path(p) for p in args.results] or [newest_results_file()]
    records = [r for path in paths for r in load_records(path)]
    for line in unread_lines(paths):  # a line cut short is left out of the table, never in silence
        print(line, file=sys.stderr)
    if not args.results and args.format == "table":  # which file, when the user did not name one
        print(f"the newest results file: {shown_path(paths[0])} ({len(records)} record(s))")
        print("  another: make report ARGS=results/FILE.jsonl")
    if args.format == "summary":
        print(summary_markdown(records, title=args.title), end="")
    elif args.format == "junit":
        print(junit_xml(records, title=args.title), end="")
    else:
        table = verdict_table(records) if args.format == "wide" else terminal_table(records)
        print(f"{table}\n\n{summary_counts(records)}\n{versions_line(records)}")
        arm = verified_arm(paths[0], records) if len(paths) == 1 else None
        from harness.commands.ran_lines import report_ran_lines

        for line in [*report_ran_lines(records, arm), *draw_pictures(records, patch=arm)]:
            print(line)
    return EXIT_OK


# Not patches: the arms verify runs beside one (commands/run.py REPRO_ARMS).
BESIDE_A_PATCH = ("none", "upstream")


def verified_arm(path: Path, records: list[Record]) -> str | None:
    """The arm a verify's results file judges (records/store.py names it <UTC>-verify-<pid>.jsonl): its one arm
    beside none and upstream, or upstream where it verified upstream itself. None: not a verify's file."""
    if "-verify-" not in path.name:
        return None
    patches = {r.arm for r in records} - set(BESIDE_A_PATCH)
    if len(patches) == 1:
        return patches.pop()
    return "upstream" if not patches and any(r.arm == "upstream" for r in records) else None


def draw_pictures(records: list[Record], where: Path | None = None, patch: str | None = None) -> list[str]:
    """The outcome grid and the failing runs' gradient errors (SVG and PNG), next to results/latest.md; one line
    per picture. patch: the arm a verify judged; its failing cells are the ones drawn, where it has any (not the
    arms beside it)."""
    from harness.paths import results_dir

    where = where or results_dir()
    try:
        from harness.render import pictures
    except ImportError as exc:  # matplotlib is in the dev group (requirements-dev.txt)
        return [f"pictures: not drawn ({exc})"]
    grid = pictures.outcome_grid(records, where / "outcomes.svg")
    lines = [f"outcome grid: {shown_path(grid)} (and .png)"]
    patch_failures = [r for r in records if r.arm == patch and r.outcome == "mismatch"]
    drawn = patch_failures or records
    runs = pictures.pick_runs(drawn)
    if runs:
        path = pictures.grad_errors(runs, where / "grad-errors.svg")
        cells = ", ".join(f"{r.scenario} x {r.arm}" for r in runs)
        lines.append(f"gradient errors of {cells}: {shown_path(path)} (and .png)")
    from harness.render import update_chart

    update = update_chart.pick_update_run(drawn)
    if update is not None:
        path = update_chart.update_errors(update, where / "update-errors.svg")
        where_drawn = f"{shown_path(path)} (and .png)"
        lines.append(f"update errors per optimizer step of {update.scenario} x {update.arm}: {where_drawn}")
    return lines


def _diagnosis_lines(diagnosis: Diagnosis, known: bool = False) -> list[str]:
    """The diagnosis beyond the why line: the error's class, the log-probs, every failing gradient's fit, the
    residency. known: the why names a known cause (records/known_failures.py known_cause_in): the gradients that fit
    no pattern are counted in one line, their closest-alternative guesses left out (the cause is known)."""
    out = []
    d = diagnosis.error
    if d and d.error_class:  # an error of no known class: the why line says so
        out.append(f"diagnosis: error class {d.error_class}" + (f", concerning {d.object}" if d.object else ""))
    if diagnosis.log_probs:
        out.append(f"diagnosis: log-probs {diagnosis.log_probs.text}")
    if diagnosis.skipped_rows:
        out.append(f"diagnosis: {diagnosis.skipped_rows}")
    guesses = 0
    for name, g in sorted((diagnosis.grads or {}).items()):
        if known and g.pattern is None:
            guesses += 1
            continue
        numbers = "" if g.k is None else f" [k = {g.k:.4g}, residual {g.residual:.2g}]"
        out.append(f"diagnosis: grad {name}: {g.text}{numbers}")
    if guesses:
        out.append(
            f"diagnosis: {guesses} gradient(s) fit no known pattern; their closest-alternative guesses are left out: "
            "the cause is known (why, above)"
        )
    if diagnosis.residency:
        out.append(f"diagnosis: {diagnosis.residency}")
    return out


def full_report(record: Record, where: str) -> str:
    """Everything needed to understand one record without opening it: the outcome, why, the diagnosis, the
    whole error and the root rank's traceback tail, the other ranks' errors, the failures, and where the rank
    logs are."""
    from harness.render.tables import versions_line

    settings = record.settings.written() if record.settings else None
    out = [
        f"record {where}: {record.scenario} x {record.arm}: {record.outcome}",
        f"settings: {settings}; W={record.world_size}, {record.device}/{record.backend}",
        versions_line([record]),
    ]
    if record.verdict.why:
        out.append(f"why: {record.verdict.why}")
    from harness.records.known_failures import known_cause_in

    known = known_cause_in(record.verdict.why) is not None
    out += _diagnosis_lines(record.verdict.diagnosis or Diagnosis(), known)
    err = record.verdict.error
    if err:
        out.append(f"error (rank {err.rank}, phase {err.phase}): {err.type}: {err.full_message or err.message}")
        root = err.root_cause
        if root and root.written() and (root.type, root.message) != (err.type, err.message):
            out.append(f"root cause: {root.type}: {root.message}")
        if err.traceback_tail:
            out += [f"traceback tail (rank {err.rank}):", traceback_from_line_start(err.traceback_tail)]
        others = [e for e in record.verdict.rank_errors or [] if e.rank != err.rank]
        for e in others:
            out.append(f"rank {e.rank} (phase {e.phase}): {e.type}: {e.message}")
    for words in record.verdict.failure_words():
        out.append(f"failure: {words}")
    layout = record.measures.batch_layout
    if layout:  # the engine path: whose batch verl got, and its response lengths
        out.append(
            f"batch: the {layout.get('trainer')} trainer's, response_mask {layout.get('response_mask')}, response "
            f"lengths {layout.get('response_lengths')}"
        )
    remark = record.measures.parity.unread_rows_remark if record.measures.parity else None
    if remark:
        out.append(f"remark: {remark}")
    for file, lines in (record.measures.patch_lines_run or {}).items():
        out.append(f"the patch's lines run in {file}: {', '.join(map(str, lines)) or 'none'}")
    if record.measures.peak_rss_bytes is not None:
        out.append(f"peak resident memory of a rank (the largest): {record.measures.peak_rss_bytes / 2**20:,.0f} MiB")
    run_dir = record.run_dir
    if run_dir:
        out.append(f"rank logs: {run_dir}/torchrun.log (per-rank results: {run_dir}/rank<R>.json)")
    else:
        out.append("rank logs: not recorded (a record from before run_dir was kept)")
    return "\n".join(out)


# The rank keeps the last this many characters of a traceback (rank/worker.py describe_error).
TRACEBACK_TAIL_CHARS = 3000


def traceback_from_line_start(tail: str) -> str:
    """A tail the rank cut to its last TRACEBACK_TAIL_CHARS characters starts mid-line; it is shown from the
    first whole line, marked as cut."""
    if len(tail) >= TRACEBACK_TAIL_CHARS and not tail.startswith("Traceback") and "\n" in tail:
        tail = "  ...\n" + tail.split("\n", 1)[1]
    return tail.rstrip()


def report_full(refs: list[str]) -> int:
    from harness.records.history import newest_results_file
    from harness.records.store import load_record

    if len(refs) > 1:
        from harness.errors import UsageError

        raise UsageError("report --full: give one record, FILE or FILE:LINE")
    ref = refs[0] if refs else shown_path(newest_results_file())
    print(full_report(load_record(ref), ref))
    return EXIT_OK
