"""upstream: what the harness found, as a directory a verl maintainer can use (docs/UPSTREAM.md).

Writes OUT (default results/upstream/):
  test_fsdp2_untied_lm_head_fused_on_cpu.py  the self-contained regression test (harness/upstream/test_template.py.in)
  fix.diff                                    the candidate, checked with `git apply --check` on a copy of verl
  repro_same_length.py                        the minimal reproducer of verl's same-length packing defect
  REPORT.md, REPORT-same-length.md            issue-ready text, every number from this invocation's runs
To get those numbers it runs the harness's cells (records in results/*.jsonl, as any command), the generated test
under each arm with plain pytest, and the reproducer; --no-report writes the three files only (and checks them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.errors import UsageError
from harness.paths import PATCHES_DIR, RESULTS_DIR, ROOT
from harness.plan.arms import installed_verl_dir, resolve_arm
from harness.plan.diffs import ENCODING, read_patch, shown
from harness.upstream.report import BF16_SCENARIO

CANDIDATE = "fsdp2-lmhead-forward"
# The harness's cells behind REPORT.md: W=1 and W=2 in fp32 and verl's default bf16, each without #6659, with it,
# and with the candidate; the same-length batch on installed verl for REPORT-same-length.md.
REPORT_CELLS = [
    ("fsdp2-1gpu", ("none", "upstream", CANDIDATE)),
    ("fsdp2-multigpu", ("none", "upstream", CANDIDATE)),
    (BF16_SCENARIO, ("none", "upstream", CANDIDATE)),
    ("engine-same-length", ("upstream",)),
]
GENERATED_TEST_ARMS = ("none", "upstream", CANDIDATE)
REPRO_SAME_LENGTH = "repro_same_length.py"


def diff_body(text: str) -> str:
    """The diff without the description our patch files carry above the first `--- ` line."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
    if start is None:
        raise UsageError("no '--- ' line: not a unified diff")
    return "".join(lines[start:])


def git_apply_check(diff: Path) -> str:
    """`git apply --check` inside a copy of the installed verl's parent directory (verl/ and nothing else), as a
    maintainer applies it at the top of a verl checkout. Returns a one-line summary; raises UsageError if it fails."""
    git = shutil.which("git")
    if git is None:
        raise UsageError(f"{shown(diff)}: cannot check it: no git on PATH")
    with tempfile.TemporaryDirectory(prefix="harness-upstream-apply-") as tmp:
        shutil.copytree(installed_verl_dir(), Path(tmp) / "verl", ignore=shutil.ignore_patterns("__pycache__"))
        done = subprocess.run(
            [git, "apply", "--check", "-v", str(diff.resolve())], cwd=tmp, capture_output=True, text=True
        )
    if done.returncode != 0:
        raise UsageError(
            f"{shown(diff)}: git apply --check fails on installed verl: "
            f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    files = sorted(set(re.findall(r"^Checking patch (\S+)\.\.\.", done.stderr, re.M)))
    return f"`git apply --check` passes on installed verl ({', '.join(files)})."


def write_files(out: Path) -> dict:
    """The test, fix.diff (checked) and the reproducer; returns {"fix_check": ...}."""
    from harness.upstream.regression_test import TEST_FILE_NAME, render_test_file

    out.mkdir(parents=True, exist_ok=True)
    (out / TEST_FILE_NAME).write_text(render_test_file())
    source = PATCHES_DIR / f"{CANDIDATE}.diff"
    fix = out / "fix.diff"
    fix.write_bytes(diff_body(read_patch(source).decode(*ENCODING)).encode(*ENCODING))
    shutil.copyfile(Path(__file__).parent.parent / "upstream" / f"{REPRO_SAME_LENGTH}.in", out / REPRO_SAME_LENGTH)
    return {"fix_check": git_apply_check(fix)}


def _releases_table() -> str:
    """The release table docs/RELEASES.md keeps from `make releases`: verl, the two facts, one scenario (W=2)."""
    doc = ROOT / "docs" / "RELEASES.md"
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| ")] if doc.is_file() else []
    if not rows:
        return ""
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    keep = [i for i, h in enumerate(head) if i < 3 or h.startswith("direct-multigpu")]
    from harness.render.tables import markdown_table

    table = [[c.strip() for c in r.strip("|").split("|")] for r in rows if not set(r) <= set("|- ")]
    return markdown_table([head[i] for i in keep], [[r[i] for i in keep] for r in table[1:] if len(r) == len(head)])


def _run_reproducer(out: Path) -> tuple[str, int]:
    done = subprocess.run([sys.executable, REPRO_SAME_LENGTH], cwd=out, capture_output=True, text=True, timeout=300)
    kept = [line for line in (done.stdout + done.stderr).splitlines() if "is_fx_tracing" not in line]
    return "\n".join(kept), done.returncode


def _candidate_ran_lines(records: list) -> list[str]:
    """The closing block's per-hunk lines for the candidate's runs (what of fix.diff ran)."""
    from harness.commands.ran_lines import hunks_of_files, patch_ran_lines

    return patch_ran_lines(hunks_of_files(resolve_arm(CANDIDATE).patches), CANDIDATE, records)[0]


def cmd_upstream(args) -> int:
    from harness.inputs.scenario import load_all, select
    from harness.paths import shown_path
    from harness.render.tables import versions_line
    from harness.run.runner import run_plan
    from harness.upstream.regression_test import TEST_FILE_NAME
    from harness.upstream.report import find, render_report, render_same_length_report
    from harness.upstream.run_generated import run_generated_test

    out = Path(args.out) if args.out else RESULTS_DIR / "upstream"
    written = write_files(out)
    print(f"wrote {out}/: {TEST_FILE_NAME}, fix.diff ({written['fix_check']}), {REPRO_SAME_LENGTH}")
    if args.no_report:
        return 0

    scenarios = {s.name: s for s in select(load_all(), [name for name, _ in REPORT_CELLS])}
    if args.timeout_s:
        # A loaded host can push a cell past its scenario's timeout_s (a "hang" that proves nothing); the longer
        # timeout is part of each record's scenario_spec.
        scenarios = {n: s.model_copy(update={"timeout_s": args.timeout_s}) for n, s in scenarios.items()}
    arms = {name: resolve_arm(name) for _, names in REPORT_CELLS for name in names}
    plan = [(scenarios[name], arms[a]) for name, names in REPORT_CELLS for a in names]
    result = run_plan("upstream", plan, jobs=args.jobs)
    records = [r for r in result.records if r is not None]

    runs = []
    for arm in GENERATED_TEST_ARMS:
        run = run_generated_test(out / TEST_FILE_NAME, arm, out / ".runs")
        runs.append(run)
        print(
            f"generated test under {arm}: exit {run.returncode} in {run.wall_s:.0f} s: "
            + ", ".join(f"{n} {o}" for n, o in run.outcomes.items())
        )
    repro_output, repro_rc = _run_reproducer(out)
    print(f"{REPRO_SAME_LENGTH}: exit {repro_rc}")

    (out / "REPORT.md").write_text(
        render_report(
            records=[r for r in records if r.scenario != "engine-same-length"],
            runs=runs,
            candidate=CANDIDATE,
            fix_check=written["fix_check"],
            releases_table=_releases_table(),
            results_path=shown_path(result.path),
            out_dir=shown(out),
            ran_lines=_candidate_ran_lines(records),
        )
    )
    print(f"wrote {out}/REPORT.md")
    same_length = find(records, "engine-same-length", "upstream")
    # A separate report only when it is verl's defect: the reproducer, verl calls only, shows it (exit 1).
    if repro_rc == 1:
        (out / "REPORT-same-length.md").write_text(
            render_same_length_report(
                record=same_length, repro_output=repro_output, repro_rc=repro_rc, versions=versions_line(records)
            )
        )
        print(f"wrote {out}/REPORT-same-length.md")
    else:
        (out / "REPORT-same-length.md").unlink(missing_ok=True)
        print(f"{REPRO_SAME_LENGTH} does not reproduce (exit {repro_rc}): no REPORT-same-length.md\n{repro_output}")
    expected = {"none": False, "upstream": False, CANDIDATE: True}
    wrong = [r.arm for r in runs if (r.returncode == 0) != expected[r.arm]]
    if wrong:
        print(f"the generated test did not separate the arms as expected: {', '.join(wrong)}")
        return 1
    return 0
