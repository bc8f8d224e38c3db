"""The environment every rank runs in, the contract between the user's side (launch/ starts ranks with it,
processes/ preloads a parent for it) and the rank's: the arm's verl first on PYTHONPATH, then this repository."""

from __future__ import annotations

import os
from pathlib import Path

from harness.paths import CACHE_DIR, ROOT


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
