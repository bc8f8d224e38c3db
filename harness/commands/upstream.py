"""upstream: every defect the harness found in verl's code (findings/findings.yaml, inputs/findings.py), as
evidence a verl maintainer can merge (docs/UPSTREAM.md).

Writes OUT/<finding>/ (default OUT results/upstream/) for each finding, or for those named:
  test_*_on_cpu.py   a pytest file in verl's CPU-test style (torch, transformers and verl only)
  fix.diff           the fix, for a defect on a branch verl ships, checked with `git apply --check` on installed verl
  REPORT.md          issue-ready text (a branch), or REVIEW.md: the body of a review comment (a pull request)
and proves each package: its test, with plain pytest in the environment of each ref the finding names
(upstream/prove.py), must fail where the defect is and pass where it is not; exit 1 otherwise, naming the ref. A ref
that cannot be run here (no verl repository: HARNESS_VERL_REPO) is "not run", never "does not hold": exit 0 where
everything that ran held (the rest said), 2 where nothing could be run.
#6659's REPORT.md also carries the harness's cells (REPORT_CELLS: records in results/*.jsonl, as any command);
--no-cells leaves them out, --no-report writes and checks the files only (seconds).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError
from harness.paths import ROOT, results_dir, shown_path
from harness.plan.arms import resolve_arm
from harness.render.untrusted import report_text
from harness.upstream.packages import diff_body, git_apply_check  # noqa: F401 - the names tests and docs use
from harness.upstream.report import BF16_SCENARIO

CANDIDATE = "fsdp2-lmhead-forward"
LM_HEAD_FINDING = "fsdp2-untied-lm-head"
SAME_LENGTH_FINDING = "same-length-position-ids"
SAME_LENGTH_FIX = str(ROOT / "findings" / "fixes" / "same-length-position-ids.diff")
# The harness's cells behind #6659's REPORT.md: W=1 and W=2 in fp32 and verl's default bf16, each without #6659,
# with it, and with the candidate; for the same-length finding, verl's engine on a same-length batch as installed,
# with the finding's fix (it runs: #6659's lm_head gradient is what is left), and with the fix and the candidate.
REPORT_CELLS = [
    ("fsdp2-1gpu", ("none", "upstream", CANDIDATE)),
    ("fsdp2-multigpu", ("none", "upstream", CANDIDATE)),
    (BF16_SCENARIO, ("none", "upstream", CANDIDATE)),
    ("engine-same-length", ("upstream", SAME_LENGTH_FIX, f"{CANDIDATE}+{SAME_LENGTH_FIX}")),
]
# verl's repository for the refs git:REF and pr-base:REF, where --verl-repo is not given (as the tests marked
# verl_repo read it).
VERL_REPO_ENV = "HARNESS_VERL_REPO"


def write_files(out: Path) -> dict:
    """#6659's package (the test and fix.diff, checked) into OUT itself; returns {"fix_check": ...}."""
    from harness.inputs.findings import load_findings, select_findings
    from harness.upstream.packages import write_package

    finding = select_findings(load_findings(), [LM_HEAD_FINDING])[0]
    return {"fix_check": write_package(finding, out)["fix_check"]}


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


def _candidate_ran_lines(records: list) -> list[str]:
    """The closing block's per-hunk lines for the candidate's runs (what of fix.diff ran)."""
    from harness.commands.ran_lines import code_of_files, patch_ran_lines

    return patch_ran_lines(code_of_files(resolve_arm(CANDIDATE).patches), CANDIDATE, records)[0]


def _run_cells(args, names: set[str]):
    """The harness's cells behind the reports of the findings named; (records, results file)."""
    from harness.inputs.scenario import load_all, select
    from harness.run.runner import run_plan

    wanted = [
        (s, arms)
        for s, arms in REPORT_CELLS
        if (LM_HEAD_FINDING in names and s != "engine-same-length")
        or (SAME_LENGTH_FINDING in names and s == "engine-same-length")
    ]
    if not wanted:
        return [], None
    scenarios = {s.name: s for s in select(load_all(), [name for name, _ in wanted])}
    if args.timeout_s:
        # A loaded host can push a cell past its scenario's timeout_s (a "hang" that proves nothing); the longer
        # timeout is part of each record's scenario_spec.
        scenarios = {n: s.model_copy(update={"timeout_s": args.timeout_s}) for n, s in scenarios.items()}
    plan = [(scenarios[name], resolve_arm(a)) for name, arms in wanted for a in arms]
    result = run_plan("upstream", plan, jobs=args.jobs)
    return [r for r in result.records if r is not None], result.path


def _cell_lines(records: list) -> list[str]:
    from harness.render.tables import error_cell

    return [
        f"- `{r.scenario}` under `{r.arm}` (W={r.world_size}): {r.outcome}"
        + (f": `{error_cell(r, 200)}`" if r.verdict.error else "")
        for r in records
    ]


def _lm_head_report(finding, proofs, records, results_path, written, out: Path) -> str:
    """#6659's REPORT.md as before (the harness's cells, the releases, the diagnosis), its test's runs being the
    proof's, and the proof's table."""
    from harness.upstream.finding_report import failures_section, proof_table
    from harness.upstream.report import render_report

    text = render_report(
        records=[r for r in records if r.scenario != "engine-same-length"],
        runs=[p.run for p in proofs if p.run is not None],
        candidate=CANDIDATE,
        fix_check=written["fix_check"],
        releases_table=_releases_table(),
        results_path=shown_path(results_path) if results_path else "not run (--no-cells)",
        out_dir=shown_path(out),
        ran_lines=_candidate_ran_lines(records) if records else [],
    )
    return "\n".join(
        [
            text,
            "## The test on each verl (this invocation)",
            "",
            proof_table(finding, proofs),
            "",
            *failures_section(proofs),
            "",
        ]
    )


def _summary(rows: list) -> str:
    from harness.render.tables import markdown_table

    return markdown_table(["finding", "refs", "fails on", "passes on", "s", "holds"], rows)


def _verl_checks(findings, written, repo: Path | None) -> dict:
    """verl's own pre-commit checks on each package's test at its target ref (upstream/verl_checks.py), printed a
    line each; {finding: PackageChecks, or None without a verl repository}."""
    from harness.upstream.verl_checks import check_package

    if repo is None:
        print("verl's pre-commit checks on the tests: not run (no verl repository: --verl-repo or HARNESS_VERL_REPO)")
        return {f.name: None for f in findings}
    checks = {f.name: check_package(repo, f, written[f.name]["test"]) for f in findings}
    for c in checks.values():
        print(f"verl's checks on {c.path} at {c.ref}: " + "; ".join(check.line() for check in c.checks))
    return checks


def cmd_upstream(args) -> int:
    from harness.inputs.findings import load_findings, select_findings
    from harness.upstream.ci_stack import ci_stack_lines
    from harness.upstream.evidence import facts_section
    from harness.upstream.finding_report import render_finding_report
    from harness.upstream.packages import write_package
    from harness.upstream.prove import holds_words, proofs_exit, prove

    findings = select_findings(load_findings(), args.names)
    out = Path(args.out) if args.out else results_dir() / "upstream"
    repo_text = args.verl_repo or os.environ.get(VERL_REPO_ENV)
    repo = Path(repo_text) if repo_text else None
    if repo is not None and not repo.is_dir():
        raise UsageError(f"--verl-repo {repo}: no such directory")
    written = {f.name: write_package(f, out / f.name) for f in findings}  # every package checked before anything runs
    for f in findings:
        w = written[f.name]
        print(
            f"wrote {shown_path(w['dir'])}/: {f.test.file}"
            + (f", fix.diff ({w['fix_check']})" if w["fix_check"] else "")
        )
    checks = _verl_checks(findings, written, repo)
    if args.no_report:
        return EXIT_OK if all(c is None or c.passed for c in checks.values()) else EXIT_COUNTED

    records, results_path = ([], None) if args.no_cells else _run_cells(args, {f.name for f in findings})
    rows, all_proofs = [], {}
    for f in findings:
        w = written[f.name]
        proofs = all_proofs[f.name] = prove(f, w["test"], repo, out / ".runs" / f.name, timeout_s=args.test_timeout_s)
        for p in proofs:
            took = f" in {p.run.wall_s:.0f} s" if p.run else ""
            print(f"{f.name} on {p.ref}: {p.verdict(f)}{took}")
        if f.name == LM_HEAD_FINDING:
            text = _lm_head_report(f, proofs, records, results_path, w, w["dir"])
        else:
            cells = _cell_lines([r for r in records if r.scenario in f.scenarios])
            text = render_finding_report(f, proofs, fix_check=w["fix_check"], out_dir=shown_path(w["dir"]), cells=cells)
        fix = w["dir"] / "fix.diff" if w["fix_check"] else None
        ci = ci_stack_lines(f, w["test"], fix, repo, out / ".runs" / f.name)
        print("\n".join(f"{f.name}: {line[2:]}" for line in ci))
        text = text.rstrip("\n") + "\n\n" + "\n".join(facts_section(f, proofs, checks[f.name], ci))
        (w["dir"] / f.report_name).write_text(report_text(text), encoding="utf-8")
        print(f"wrote {shown_path(w['dir'])}/{f.report_name}")
        rows.append(
            [
                f.name,
                ", ".join(f.expected()),
                ", ".join(p.ref for p in proofs if p.passed is False) or "-",
                ", ".join(p.ref for p in proofs if p.passed is True) or "-",
                f"{sum(p.run.wall_s for p in proofs if p.run):.0f}",
                holds_words(proofs, f),
            ]
        )
    print(_summary(rows))
    code, lines = proofs_exit(all_proofs, {f.name: f for f in findings})
    failed_checks = [
        f"{name}: verl's checks at {c.ref}" for name, c in checks.items() if c is not None and not c.passed
    ]
    if failed_checks:  # a package verl's own pre-commit would reject is counted like a ref that does not hold
        lines.append("not as verl's checks want: " + "; ".join(failed_checks))
        code = EXIT_COUNTED
    print("\n".join(lines))
    return code
