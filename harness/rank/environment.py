"""The environment every rank runs in, the contract between the user's side (launch/ starts ranks with it,
processes/ preloads a parent for it) and the rank's: the arm's verl first on PYTHONPATH, then this repository."""

from __future__ import annotations

import os
from pathlib import Path

from harness.paths import CACHE_DIR, ROOT

# The forked or fresh torchrun's pid, which it sets for the ranks it starts (rank/torchrun.py): a rank's stand-in ends
# with it (processes/stand_in.py die_with_parent), and tells from it whether it had ended before the stand-in asked to.
TORCHRUN_PID = "HARNESS_TORCHRUN_PID"
# "1" in a cell that runs in the OS sandbox (processes/sandbox.py): it shares nothing it writes with other cells.
SANDBOXED = "HARNESS_SANDBOXED"


def rank_environment(arm_dir: Path | None) -> dict:
    """This process's environment with the arm's verl first on PYTHONPATH, then this repository."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in (arm_dir, ROOT) if p] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["HARNESS_COMPILE_CACHE"] = str(CACHE_DIR / "inductor")
    return env
