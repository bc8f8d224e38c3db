"""A rank's stand-in ends with the torchrun that started it (harness/processes/stand_in.py die_with_parent): a
torchrun killed outright leaves no stand-in, and so no forked rank, behind. Real processes: a parent that starts a
child and is SIGKILLed, as the driver's kill path kills a forked torchrun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.paths import ROOT
from harness.processes import tree
from harness.rank.environment import TORCHRUN_PID

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")]

CHILD = """
import sys, time
from harness.processes.stand_in import die_with_parent
if sys.argv[1] == "1":
    die_with_parent()
open(sys.argv[2], "w").close()
time.sleep(60)
"""
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]], start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def _child_of_a_killed_parent(tmp_path, ends_with_parent: bool) -> int:
    """Starts a parent whose child (in a session of its own, as torchrun starts a rank) calls die_with_parent or
    not, kills the parent once the child is up, and returns the child's pid."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(TORCHRUN_PID, None)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, "1" if ends_with_parent else "0", str(ready)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), "the child did not start"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    return child


def test_a_stand_in_ends_with_its_killed_parent_and_a_plain_child_would_not(tmp_path):
    child = _child_of_a_killed_parent(tmp_path / "a", ends_with_parent=True)
    tree.wait_gone([child], wait_s=10)
    assert tree.gone(child)
    # Without it the child outlives its parent: what a Ctrl-C'd command's rank did.
    plain = _child_of_a_killed_parent(tmp_path / "b", ends_with_parent=False)
    try:
        time.sleep(0.3)
        assert not tree.gone(plain)
    finally:
        tree.kill_all([plain])


def test_a_stand_in_whose_torchrun_ended_before_it_could_ask_ends_at_once(tmp_path):
    """Reparented before the call took: the torchrun it names is not its parent, and no signal would come."""
    code = "from harness.processes.stand_in import die_with_parent; die_with_parent(); print('still here')"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{TORCHRUN_PID: str(os.getpid() + 1_000_000)})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and "still here" not in done.stdout
    env[TORCHRUN_PID] = str(os.getpid())  # its parent: it goes on
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "still here" in done.stdout
