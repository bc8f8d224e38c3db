"""Run the generated regression test as a maintainer would: plain pytest, in a fresh process whose `import verl`
finds the arm's materialised copy (harness/plan/arms.py), nothing of the harness on its path, no project config.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from harness.plan.arms import materialise, resolve_arm

# Where the generated test writes its measured numbers when asked (its FSDP2_LM_HEAD_TEST_RESULTS variable).
NUMBERS_ENV = "FSDP2_LM_HEAD_TEST_RESULTS"


@dataclass
class GeneratedRun:
    arm: str
    returncode: int
    wall_s: float
    outcomes: dict  # test name -> "passed" | "failed" | "error" | "skipped"
    messages: dict  # test name -> first line of its failure message ("" when it passed)
    numbers: dict | None  # case -> per-rank numbers, as the test measured them (None if it got no numbers)
    output_tail: str = ""
    selected: list = field(default_factory=list)


def _junit_outcomes(path: Path) -> tuple[dict, dict]:
    outcomes, messages = {}, {}
    if not path.is_file():
        return outcomes, messages
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                text = (node.get("message") or node.text or "").strip()
                message = text.splitlines()[0] if text else ""
                break
        outcomes[name], messages[name] = outcome, message
    return outcomes, messages


def run_generated_test(
    test_file: Path, arm_name: str, work_dir: Path, *, select: str | None = None, timeout_s: float = 1200
) -> GeneratedRun:
    """pytest TEST_FILE with the arm's verl first on PYTHONPATH, in work_dir (which receives the JUnit file and the
    numbers). select: a -k expression."""
    arm = resolve_arm(arm_name)
    arm_dir = materialise(arm)
    return run_pytest(test_file, arm.name, work_dir, pythonpath=arm_dir, select=select, timeout_s=timeout_s)


def run_pytest(
    test_file: Path,
    label: str,
    work_dir: Path,
    *,
    python: str = sys.executable,
    pythonpath: Path | None = None,
    numbers_env: str = NUMBERS_ENV,
    select: str | None = None,
    timeout_s: float = 1200,
) -> GeneratedRun:
    """Plain pytest on TEST_FILE with PYTHON (a verl tree's environment, plan/verl_trees.py, or this one) and
    PYTHONPATH (an arm's materialised verl) only; the JUnit file and the test's numbers land in work_dir under
    LABEL. A run past timeout_s counts as a failed run (exit 124) with what it printed."""
    work_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.+-]", "_", label)
    junit, numbers = work_dir / f"junit-{safe}.xml", work_dir / f"numbers-{safe}.json"
    for stale in (junit, numbers):
        stale.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env[numbers_env] = str(numbers)
    # -c /dev/null and --noconftest: none of this project's pytest settings or conftest.py reach the run.
    cmd = [
        str(python),
        "-m",
        "pytest",
        str(test_file.resolve()),
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        os.devnull,
        "--noconftest",
        "--rootdir",
        str(test_file.resolve().parent),
        f"--junitxml={junit}",
    ]
    if select:
        cmd += ["-k", select]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=work_dir, env=env, capture_output=True, text=True, timeout=timeout_s)
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = 124
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else p or "" for p in (exc.stdout, exc.stderr)]
        output = "".join(parts) + f"\ntimed out after {timeout_s:g} s"
    wall = time.perf_counter() - t0
    outcomes, messages = _junit_outcomes(junit)
    return GeneratedRun(
        label,
        returncode,
        wall,
        outcomes,
        messages,
        json.loads(numbers.read_text()) if numbers.is_file() else None,
        output[-4000:],
        [select] if select else [],
    )
