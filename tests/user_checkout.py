"""A user's own copy of the checkout and the CLI run from it, as a user edits and runs theirs (tests that add a
scenario or break an input file): the code and data copied, `python -m harness` started there with a clean PATH
and its own results directory. tests/ is on sys.path (its conftest)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT


def copy_checkout(where: Path) -> Path:
    """A copy of the checkout's code and data under `where`: its scenarios/ is the user's to edit."""
    copy = where / "checkout"
    for part in ("harness", "scenarios", "models", "patches"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def harness_in(checkout: Path, *args: str, results: Path, timeout: float) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` run from the copy, its records in `results`."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        # Not kept for a later command (harness/processes/client.py keep_s): the copy is gone after the test.
        env={"HARNESS_RESULTS_DIR": str(results), "PATH": "/usr/bin:/bin", "HARNESS_PRELOAD_KEEP_S": "0"},
    )
