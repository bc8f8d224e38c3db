"""A user's own copy of the checkout and the CLI run from it, as a user edits and runs theirs (tests that add a
scenario or break an input file): the code and data copied, `python -m harness` started there with a clean PATH
and its own results directory. tests/ is on sys.path (its conftest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.paths import ROOT


def copy_checkout(where: Path) -> Path:
    """A copy of the checkout's code and data under `where`: its scenarios/ is the user's to edit."""
    copy = where / "checkout"
    # With the harness's bytecode: copytree's copy2 keeps each source's mtime, which a .pyc is checked against, so
    # the copy's first command loads it compiled instead of compiling every module it imports (~0.1 s of CPU).
    for part in ("harness", "scenarios", "models", "patches"):
        shutil.copytree(ROOT / part, copy / part)
    return copy


def harness_in(
    checkout: Path, *args: str, results: Path, timeout: float, share_parent: bool = False
) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` run from the copy, its records in `results`.

    share_parent: its cells are forked by this pytest process's preloaded parent rather than by one the copy's
    command starts (a preload of its own: about 10 s of CPU), as HarnessCli's share_parent does, for a test whose
    subject is what the command does with the user's files. The copy's code is this checkout's, copied with its
    mtimes, so its code stamp, and with this process's key variables its parent's key, are the same; where they
    differ (a PYTHONPATH of the user's, say) the command starts its own, as without."""
    env = {"HARNESS_RESULTS_DIR": str(results), "PATH": "/usr/bin:/bin", "HARNESS_PRELOAD_KEEP_S": "0"}
    if share_parent:
        env.update(_shared_parent())
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        # Not kept for a later command (harness/processes/client.py keep_s): the copy is gone after the test.
        env=env,
    )


def parent_lent_to_children() -> dict:
    """What a child's environment needs to borrow this pytest process's preloaded parent (started here if need be):
    its token (harness/processes/client.py shared_with_children); {} where there is none to share."""
    from harness.processes import client
    from harness.rank.environment import rank_environment

    return client.shared_with_children(rank_environment(None))


def _shared_parent() -> dict:
    """The variables a parent's key reads, as this process has them (the copy's command runs with a clean
    environment), and the token of this process's parent."""
    from harness.processes import client

    return {**client.key_variables(dict(os.environ)), **parent_lent_to_children()}
