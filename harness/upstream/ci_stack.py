"""A package's test on verl's own CPU-CI stack, where one is given: a python whose torch and transformers are those
verl's cpu_unit_tests.yml pins (its uv.lock's cpu slice: torch 2.11.0, transformers 5.3.0 at main of 2026-08-22;
docs/UPSTREAM.md says how such a venv is built), named by $HARNESS_VERL_CI_PYTHON.

The test runs with plain pytest (upstream/run_generated.py), verl's tree on PYTHONPATH: the tree of the ref the
test targets (a shared clone, as upstream/verl_checks.py makes), that tree with fix.diff applied where the finding
has one and it applies, and a pull request's base. REPORT.md gets one line per run.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from harness.upstream.run_generated import run_pytest

CI_PYTHON_ENV = "HARNESS_VERL_CI_PYTHON"


def _said(run) -> str:
    """What a run gave, in words: its counts and its first failure's message."""
    counts = {}
    for outcome in run.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    said = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or f"no test ran (exit {run.returncode})"
    first = next((m for m in run.messages.values() if m), "")
    return said + (f": `{first[:160]}`" if first else "")


def _trees(repo: Path, finding, fix: Path | None, tmp: Path) -> list[tuple[str, Path | None, str]]:
    """(label, tree or None, why not) per tree to run: the target ref, with the fix, a pull request's base."""
    from harness.upstream.prove import NotProvable, merge_base, ref_commit
    from harness.upstream.verl_checks import clone_at, target_ref

    ref = target_ref(finding)
    try:
        commit = ref_commit(repo, ref)
    except NotProvable as exc:
        return [(ref, None, str(exc))]
    trees = [(f"`{ref}` ({commit[:12]})", clone_at(repo, commit, tmp / "target"), "")]
    if fix is not None:
        fixed = clone_at(repo, commit, tmp / "fixed")
        done = subprocess.run(["git", "apply", str(fix.resolve())], cwd=fixed, capture_output=True, text=True)
        why = "" if done.returncode == 0 else f"fix.diff does not apply: {done.stderr.strip().splitlines()[-1]}"
        trees.append((f"`{ref}` with fix.diff", fixed if not why else None, why))
    if finding.kind == "pr":
        base = merge_base(repo, ref_commit(repo, "main"), commit)
        trees.append((f"its base ({base[:12]})", clone_at(repo, base, tmp / "base"), ""))
    return trees


def ci_stack_lines(finding, test_file: Path, fix: Path | None, repo: Path | None, work_dir: Path) -> list[str]:
    """REPORT.md's lines for verl's CPU-CI stack: a run per tree, or why none ran."""
    from harness.upstream.evidence import stack_of

    python = os.environ.get(CI_PYTHON_ENV)
    if not python:
        return [f"- verl's CPU-CI stack: not run here (${CI_PYTHON_ENV} names no python of its pins)"]
    if repo is None:
        return ["- verl's CPU-CI stack: not run (no verl repository)"]
    stack = stack_of(python)
    lines = []
    with tempfile.TemporaryDirectory(prefix="harness-verl-ci-") as tmp:
        for label, tree, why in _trees(repo, finding, fix, Path(tmp)):
            if tree is None:
                lines.append(f"- verl's CPU-CI stack ({stack}), {label}: not run: {why}")
                continue
            run = run_pytest(
                test_file, f"ci-{tree.parent.name}-{tree.name}", work_dir, python=python, pythonpath=tree,
                numbers_env=finding.test.numbers_env,
            )  # fmt: skip
            lines.append(f"- verl's CPU-CI stack ({stack}), {label}: {_said(run)} ({run.wall_s:.0f} s)")
    return lines
