"""The environment every rank runs in, the contract between the user's side (launch/ starts ranks with it,
processes/ preloads a parent for it) and the rank's: the arm's verl first on PYTHONPATH, then this repository.

Torch-free: launch and the preloaded parent both import it."""

from __future__ import annotations

import os
from pathlib import Path

from harness.paths import CACHE_DIR, ROOT

# The forked or fresh torchrun's pid, which it sets for the ranks it starts (rank/torchrun.py): a rank's stand-in ends
# with it (processes/stand_in.py die_with_parent), and tells from it whether it had ended before the stand-in asked to.
TORCHRUN_PID = "HARNESS_TORCHRUN_PID"
# "1" in a cell that runs in the OS sandbox (processes/sandbox.py): it shares nothing it writes with other cells.
SANDBOXED = "HARNESS_SANDBOXED"

# The ranks' intra-op threads, where set (the nightly's other-host variant, `make test-other-host`): each rank calls
# torch.set_num_threads with it after its start, so that the preloaded parent stays one thread and forking stays safe
# (OMP_NUM_THREADS=2 itself makes every cell a fresh interpreter, 9x slower). Two threads split a reduction's sums
# otherwise than one, as another CPU does: the last bits of the measured numbers move (47 of fsdp2-multigpu x
# upstream's 74 parity figures, docs/TIME.md), and a test that holds only on one host's bits fails.
RANK_THREADS = "HARNESS_RANK_THREADS"


def rank_threads() -> int | None:
    """The ranks' intra-op threads asked for (RANK_THREADS), or None: torch's default under OMP_NUM_THREADS (1)."""
    value = os.environ.get(RANK_THREADS, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


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
