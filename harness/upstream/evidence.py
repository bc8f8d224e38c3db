"""REPORT.md's sections about the evidence itself: the stacks the test ran on, the commit that brought the defect,
who is hit, and verl's own checks on the test (upstream/verl_checks.py)."""

from __future__ import annotations

import functools
import subprocess

from harness.inputs.findings import Finding

_VERSIONS = "import torch, transformers; print(torch.__version__, transformers.__version__)"


@functools.cache
def stack_of(python: str) -> str:
    """torch and transformers of the environment PYTHON, in words (asked of that interpreter)."""
    done = subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return "torch and transformers: not importable there"
    torch_v, transformers_v = done.stdout.split()
    return f"torch {torch_v}, transformers {transformers_v}"


def versions_lines(proofs: list) -> list[str]:
    """One line per ref the test ran on: its verl, torch and transformers."""
    lines = []
    for p in proofs:
        if p.env is None:
            lines.append(f"- `{p.ref}`: not run ({p.why_not})")
        else:
            lines.append(f"- `{p.ref}`: {p.env.verl}; {stack_of(p.env.python)}")
    return lines


def facts_section(finding: Finding, proofs: list, checks=None, ci_stack: list[str] = ()) -> list[str]:
    """The sections REPORT.md gains: versions, the commit that brought it, who is hit, verl's checks."""
    from harness.upstream.verl_checks import checks_section

    lines = ["## The stacks the test ran on (this invocation)", "", *versions_lines(proofs), *ci_stack, ""]
    if finding.kind == "branch":
        lines += ["## Where it came from", "", finding.brought_by or "Not known (not bisected).", ""]
        lines += ["## Who is hit", "", finding.hits or "Not said.", ""]
    else:
        lines += ["## Who is hit", "", f"No release: the defect is in open pull request #{finding.pr}.", ""]
    if checks is not None:
        lines += checks_section(checks)
    return lines
