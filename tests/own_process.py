"""Python that imports verl, run in a process of its own (verl patches classes and registers devices: never in the
test process), forked by this pytest process's preloaded parent where it has one (harness/processes/client.py
Starter.module: an interpreter with torch, transformers and verl's dependencies imported already, which a fresh one
spends about 4 s of CPU on), else a fresh interpreter. Either way verl itself is imported in the child, as a rank
imports it: the installed verl, or an arm's copy first on its path; the child's environment is a rank's
(harness/rank/environment.py rank_environment)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.paths import ROOT


def run_module(
    name: str, *args: str, folder: Path, timeout: float, arm_dir: Path | None = None
) -> subprocess.CompletedProcess:
    """Module `name`, found in `folder`, run as __main__ with args, the arm's verl (`arm_dir`, else the installed
    one) imported: its exit code, stdout and stderr."""
    from harness.processes import client
    from harness.rank.environment import rank_environment

    env = rank_environment(arm_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env["PYTHONPATH"]])
    command = client.starter(env).module(name, *map(str, args))  # forked by the server where one is up, else fresh
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_code(
    code: str, *args: str, folder: Path, timeout: float, arm_dir: Path | None = None
) -> subprocess.CompletedProcess:
    """`code` as a script given args, written to a module of its own in `folder` (a test's tmp_path) and run as
    run_module runs one."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "own_process_script.py").write_text(code)
    return run_module("own_process_script", *args, folder=folder, timeout=timeout, arm_dir=arm_dir)
