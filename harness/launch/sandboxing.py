"""Which cells run in the OS sandbox (harness/processes/sandbox.py, docs/SANDBOX.md), and what a record says of it.

Every cell whose code is not the installed verl of this environment: an arm with diffs (patches/ included: a diff is
code from outside), a pull request's arm, and every cell of a command that runs on a verl tree (HARNESS_VERL_TREE,
plan/verl_trees.py). The installed verl's own `upstream` and `none` cells run as before.

Where the sandbox cannot be made here, such a cell needs --unsandboxed (HARNESS_UNSANDBOXED=1): without it the
command stops before any cell runs, saying why in one line (require).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.paths import VERL_TREE_ENV
from harness.processes import client, sandbox, wire
from harness.processes.cell_parent import CellParent

UNSANDBOXED_ENV = "HARNESS_UNSANDBOXED"
SANDBOXED = "sandboxed"


def code_from_outside(arm_dir: Path | None) -> bool:
    """The cell runs code other than this environment's installed verl."""
    return arm_dir is not None or bool(os.environ.get(VERL_TREE_ENV))


def allowed_unsandboxed() -> bool:
    return os.environ.get(UNSANDBOXED_ENV, "") not in ("", "0")


def require(arm_dirs: list[Path | None]):
    """UsageError (exit 2, before any cell runs) where a cell needs the sandbox, it cannot be made here and
    --unsandboxed was not given."""
    if allowed_unsandboxed() or not any(code_from_outside(d) for d in arm_dirs):
        return
    why = sandbox.available()
    if why:
        raise UsageError(
            f"code from outside the installed verl needs the OS sandbox, which this host cannot make ({why}); "
            f"--unsandboxed (or {UNSANDBOXED_ENV}=1) runs it without one (docs/SANDBOX.md)"
        )


def mode(arm_dir: Path | None) -> str:
    """What the record says (RawRun.sandbox): "sandboxed", or "none" and why."""
    if not code_from_outside(arm_dir):
        return "none (the installed verl)"
    if allowed_unsandboxed():
        return "none (--unsandboxed)"
    return SANDBOXED


@dataclass
class Start:
    """How a sandboxed cell starts: torchrun's command, the module torchrun starts per rank, what the record says,
    the environment torchrun's command gets, and the cell's own parent where it forks (None: fresh)."""

    launcher: list[str]
    entry: str
    rank_start: str
    env: dict
    cell_parent: CellParent | None


def start(policy: sandbox.Policy, env: dict, run_dir: Path, pid_file: str, failures: str) -> Start:
    """Forked where the preloaded parent for env is up and the cell's own parent (cell_parent.py) starts inside the
    sandbox: torchrun's stand-in asks the cell's parent, and so do the ranks'. Else torchrun and its ranks are
    fresh interpreters inside it (sandbox_exec.py). The preloaded parent's socket never enters the sandbox."""
    parent = client.parent_for(env)
    why = "HARNESS_PRELOAD=0" if parent is None else parent.refused
    if parent is not None and parent.refused is None:
        # A child of the parent runs the modules it preloaded from its own checkout (a lent parent's may be another
        # copy of this one): that checkout's code is what the cell reads, never the rest of it.
        theirs = Path(client.parent_checkout(parent))
        code = [str(theirs / part) for part in sandbox.CHECKOUT_PARTS if (theirs / part).is_dir()]
        policy.read_only += [path for path in code if path not in policy.read_only]
        cell = CellParent(policy, parent.socket, str(run_dir / "cell-parent.log"))
        if cell.ready:
            cell_env = dict(policy.env, **{wire.SOCKET: cell.socket})
            launcher = client.Starter(True, "").torchrun(pid_file, failures)
            return Start(launcher, client.STAND_IN, "fork (sandboxed)", cell_env, cell)
        cell.close()
        why = "the cell's own parent did not start: run_dir/cell-parent.log"
    policy.env[wire.ENABLED] = "0"
    launcher = [*client.Starter.sandbox_exec(str(policy.write())), *client.Starter(False, "").torchrun("", failures)]
    # Its environment too: sandbox_exec's memory, until it execs, holds what it was given.
    return Start(launcher, client.WORKER, f"fresh interpreter (sandboxed; {why})", dict(policy.env), None)
