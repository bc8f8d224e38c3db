"""releases: which verl releases the lm_head defect hits, and how (scenarios/releases.yaml).

For each release: its own environment (plan/release_envs.py), two facts read from its source
(plan/release_facts.py), then the plan's scenarios run in that environment by `harness run`, once on the release
as released and once with the candidate patch where the patch applies. A patch that does not apply is a
"does not apply" cell naming the hunk (run/runner.py), not an error of the command. Every cell's record, with the
release and its facts added, goes to one results file; the table goes to results/releases.md.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_INTERRUPTED, EXIT_NOT_JUDGED, EXIT_OK, UsageError
from harness.inputs.release_plan import load_release_plan
from harness.inputs.scenario import load_all, select
from harness.paths import ROOT, results_dir, shown_path
from harness.plan.arms import UPSTREAM
from harness.plan.release_envs import ensure_env, installed_verl
from harness.plan.release_facts import release_facts
from harness.processes.bytecode import run_environment
from harness.processes.client import retire_kept
from harness.records.results import Record
from harness.records.store import ResultsFile, load_records
from harness.render.untrusted import report_text


def run_in_release(python: Path, scenarios: list[str], arm: str, jobs: int | None) -> list[Record]:
    """The records of `harness run` in the release's environment; where the arm's patch does not apply there, its
    cells are skipped records naming the diff and hunk (run/runner.py)."""
    with tempfile.TemporaryDirectory(prefix="harness-release-") as tmp:
        out = Path(tmp) / "records.json"
        cmd = [str(python), "-m", "harness", "run", "--arm", arm, "--json", str(out)]
        if jobs:  # else the release's harness picks what fits, as this one does
            cmd += ["--jobs", str(jobs)]
        for name in scenarios:
            cmd += ["--scenario", name]
        env = dict(run_environment(python), HARNESS_RESULTS_DIR=str(Path(tmp) / "results"))
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == EXIT_NOT_JUDGED:
            message = (done.stderr.strip().splitlines() or ["exit 2"])[-1].removeprefix("error: ")
            raise UsageError(f"{python}: harness run failed: {message}")
        if done.returncode == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        if not out.is_file():
            raise UsageError(
                f"{python}: harness run wrote no records (exit {done.returncode}): {done.stderr.strip()[-300:]}"
            )
        return load_records(out)


def cmd_releases(args) -> int:
    from harness.render.tables import release_table

    if args.ray:
        raise UsageError(
            f"--ray {args.ray}: release environments are built on this host only and do not travel to Ray nodes; "
            "run `harness releases` without --ray"
        )
    plan = load_release_plan()
    versions = args.release or list(plan.releases)
    names = [s.name for s in select(load_all(), args.scenario or list(plan.scenarios))]
    results = ResultsFile("releases", results_dir())
    records = []
    for version in versions:
        print(f"verl {version}: environment", flush=True)
        python = ensure_env(version, plan.pins_for(version), recompile=args.compile)
        facts = release_facts(installed_verl(python))
        for arm in (UPSTREAM, plan.candidate):
            print(f"verl {version}: {len(names)} scenario(s), arm {arm}", flush=True)
            for record in run_in_release(python, names, arm, args.jobs):
                stamp = record.stamp
                stamp.command, stamp.release, stamp.release_facts = "releases", version, facts
                stamp.release_python = shown_path(python)
                results.append(record)
                records.append(record)
        # Its second run borrowed the parent its first kept up (processes/client.py keep_s); no later command needs
        # this environment's.
        retire_kept(python=str(python))
    results.close()
    table = release_table(records, names, plan.candidate)
    (results_dir() / "releases.md").write_text(report_text(table + "\n"), encoding="utf-8")
    print(f"\n{table}\n\nrecords: {shown_path(results.path)}\ntable: {shown_path(results_dir() / 'releases.md')}")
    return EXIT_COUNTED if any(r.outcome == "hang" for r in records) else EXIT_OK
