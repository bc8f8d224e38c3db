"""bisect: `harness bisect CHECKOUT GOOD..BAD --scenario S [--arm A]`, the first commit of a verl checkout's history
where one cell's outcome (its signature: outcome, root error type, failing parameters; plan/bisect_search.py) changes.

Each commit it tries runs as `harness run --verl CHECKOUT@COMMIT --scenario S --arm A` in a process of its own: the
commit's tree environment of plan/verl_trees.py (keyed by the commit, built once, reused by any later command), its
record stamped and written to a results file as that command writes every record. Only the commits that change
something under verl/ are tried; a commit whose cell cannot be built or run here is skipped (plan/bisect_search.py).
The answer says what changed: the outcome and cause on each side of the first changed commit, and whether it made the
cell better (failing -> passing), worse (passing -> failing) or different (failing another way, both causes named).
A known cause (records/known_failures.py) is named on a side only where that commit's tree holds the code it
describes (`git grep` on the commit); elsewhere its words are left out, and the cell's why says the rest.
Exit (harness/errors.py): EXIT_OK the commit found (or, where skips leave it open, the commits it may be);
EXIT_NOT_JUDGED usage, or GOOD or BAD cannot run; EXIT_INTERRUPTED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import git
from harness.errors import EXIT_INTERRUPTED, EXIT_NOT_JUDGED, EXIT_OK, UsageError
from harness.paths import ROOT, VERL_SPEC_ENV, VERL_TREE_ENV
from harness.plan.bisect_search import (
    Result,
    Signature,
    Step,
    commits_touching_verl,
    direction,
    parse_range,
    search,
    signature_of,
)
from harness.processes.wire import KEEP
from harness.records.record_head import record_head


def run_commit(checkout: Path, commit: str, scenario: str, arm: str) -> Step:
    """One cell on the commit's tree, as `harness run` runs it; its signature, or None where it cannot run here."""
    env = {k: v for k, v in os.environ.items() if k not in (VERL_SPEC_ENV, VERL_TREE_ENV)}
    env[KEEP] = "0"  # every commit's environment is a different parent: none is kept up after its run
    with tempfile.TemporaryDirectory(prefix="bisect-") as tmp:
        out = Path(tmp) / "records.json"
        cmd = [sys.executable, "-m", "harness", "run", "--verl", f"{checkout}@{commit}"]
        cmd += ["--scenario", scenario, "--arm", arm, "--json", str(out)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        if done.returncode in (EXIT_INTERRUPTED, -2, -15):  # the run was interrupted (Ctrl-C, SIGTERM): so is bisect
            raise KeyboardInterrupt
        records_line = next((ln for ln in done.stdout.splitlines() if ln.startswith("records: ")), "")
        if done.returncode == EXIT_NOT_JUDGED or not out.is_file():
            why = (done.stderr.strip().splitlines() or ["no record written"])[-1]
            return Step(commit, None, seconds, f"cannot run here: {why}")
        records = json.loads(out.read_text())
    if len(records) != 1:
        return Step(commit, None, seconds, f"cannot run here: {len(records)} records, not the one cell")
    signature = signature_of(records[0])
    note = records_line.removeprefix("records: ")
    head = record_head(records[0])
    if signature is None:
        why = (head.verdict.why or head.outcome) if head else "a record of another shape"
        note = f"cannot run here: {why}; {note}"
    return Step(commit, signature, seconds, note, why=(head.verdict.why or "") if head else "")


WHY_CHARS = 240  # a side's cause in the answer; whole: its record (`report --full`)


def cause_on_tree(checkout: Path, commit: str, why: str) -> str:
    """A side's cause, from its record's why: a known cause (records/known_failures.py known_cause_in) is kept only
    where the commit's tree holds the code it describes; else its words are cut and that is said."""
    from harness.records.known_failures import known_cause_in

    known = known_cause_in(why)
    if known and known["code"]:
        file, text = known["code"]
        if git.run(checkout, "grep", "-q", "-F", text, commit, "--", file).code != 0:
            why = why.replace(f"; {known['words']}", "").replace(known["words"], "").strip()
            why += f" (not {known['name']}: this tree has no {text} in {file})"
            return why
    return why if len(why) <= WHY_CHARS or known else why[: WHY_CHARS - 1] + "…"


def _side(checkout: Path, commit: str | None, label: str, signature: Signature, steps: dict) -> str:
    """One side of the first changed commit: which commit, its outcome and its cause."""
    step = steps.get(commit)
    why = cause_on_tree(checkout, commit, step.why) if step and step.why and signature.failing else ""
    named = _describe(checkout, commit)[:60] if commit else "?"
    return f"  {label} ({named}): {signature.words()}" + (f": {why}" if why else "")


def _describe(checkout: Path, commit: str) -> str:
    return git.run(checkout, "log", "-1", "--date=short", "--format=%h %ad %s", commit).text().strip() or commit[:12]


def _step_line(n: int, step: Step, checkout: Path) -> str:
    got = step.signature.words() if step.signature else "skipped"
    line = f"[{n}] {_describe(checkout, step.commit)[:72]:<72}  {got}  {step.seconds:.1f}s"
    return line + (f"\n      {step.note}" if step.note else "")


def _endpoint(step: Step, which: str) -> Signature:
    if step.signature is None:
        raise UsageError(f"bisect: {which} {step.commit[:12]} cannot run here ({step.note}): give another {which}")
    return step.signature


CHANGE_WORDS = {
    "better": "it made the cell better: failing -> passing",
    "worse": "it made the cell worse: passing -> failing",
    "different": "it made the cell fail another way (both causes above)",
}


def result_lines(result: Result, checkout: Path, wall_s: float, steps: dict | None = None) -> list[str]:
    """The answer: GOOD's outcome, the first changed commit with the outcome and cause on each side of it and what
    it did to the cell (plan/bisect_search.py direction), or the commits it may be; what was run. steps: commit ->
    its Step, GOOD's and BAD's included."""
    steps = steps or {}
    lines = [f"GOOD's outcome: {result.good.words()}"]
    if result.first_changed:
        lines.append(f"first commit where it changes: {_describe(checkout, result.first_changed)}")
        before = result.before or next(iter(steps), None)  # GOOD's step is the first run
        lines.append(_side(checkout, before, "before it", result.good, steps))
        if result.changed:
            lines.append(_side(checkout, result.first_changed, "at it", result.changed, steps))
            lines.append(f"  {CHANGE_WORDS[direction(result.good, result.changed)]}")
    else:
        lines.append(f"it changes at one of these {len(result.candidates)} commits (the others between were skipped):")
        lines += [f"  {_describe(checkout, c)}" for c in result.candidates]
    ran = sum(1 for s in result.steps if s.signature is not None)
    skipped = len(result.steps) - ran
    lines.append(f"{ran + 2} commit(s) run, {skipped} skipped, in {wall_s:.0f} s")
    return lines


def cmd_bisect(args) -> int:
    checkout = Path(args.checkout).resolve()
    if not checkout.is_dir():
        raise UsageError(f"bisect: no such directory {args.checkout}")
    scenarios = args.scenario or []
    if len(scenarios) != 1:
        raise UsageError("bisect: give exactly one --scenario (the cell whose outcome is searched)")
    from harness.inputs.scenario import load_chosen

    load_chosen(scenarios)  # an unknown name is one line before anything runs
    arm = args.arm or "upstream"
    good, bad = parse_range(checkout, args.range)
    commits, left_out = commits_touching_verl(checkout, good, bad)
    print(
        f"bisect {scenarios[0]} x {arm} over {args.range}: {len(commits)} commit(s) touch verl/"
        f" ({left_out} that change nothing there are left out: the same verl as their parent)",
        flush=True,
    )
    t0 = time.perf_counter()
    counter = iter(range(1, 10**6))

    steps: dict[str, Step] = {}  # every commit run, GOOD first: the causes on each side of the answer

    def run(commit: str) -> Step:
        step = steps[commit] = run_commit(checkout, commit, scenarios[0], arm)
        print(_step_line(next(counter), step, checkout), flush=True)
        return step

    try:
        good_sig = _endpoint(run(good), "GOOD")
        bad_sig = _endpoint(run(bad), "BAD")
        result = search(commits, run, good_sig, bad_sig)
    except KeyboardInterrupt:
        # Each commit's record is written by its own run as it finishes; the step lines above name the files.
        print(f"interrupted: after {next(counter) - 1} commit(s), each one's record in the file its line names")
        return EXIT_INTERRUPTED
    print("\n".join(result_lines(result, checkout, time.perf_counter() - t0, steps)))
    return EXIT_OK
