"""harness/driver_guard.py: on a verl tree (HARNESS_VERL_TREE set) the driver cannot import verl (the tree's verl is
a pull request's code, importable there): cli.main installs the refusal; an import is one clear error and exit 3, a
crash of the harness, never 1; locating verl without running it (find_spec) still works. Run in a fresh interpreter:
the test's own process may hold verl already."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.errors import EXIT_CRASH
from harness.paths import ROOT, VERL_TREE_ENV

pytestmark = pytest.mark.unit

PROBE = """
import importlib.util, sys, types
from harness import cli
probe = types.ModuleType("harness.commands._probe")
def cmd(args):
    spec = importlib.util.find_spec("verl")  # located, not run: what the driver does (plan/arms.py)
    print("located", bool(spec.submodule_search_locations), flush=True)
    import verl.trainer.main_ppo  # what the driver must never do there
    return 0
probe.cmd = cmd
sys.modules["harness.commands._probe"] = probe
cli.COMMANDS["status"] = ("_probe", "cmd", "")
code = cli.main(["status"])
print("verl in sys.modules:", "verl" in sys.modules, "| finders left:", any(
    type(f).__name__ == "RefuseVerl" for f in sys.meta_path))
sys.exit(code)
"""


def test_the_driver_on_a_verl_tree_never_imports_verl():
    env = {**os.environ, VERL_TREE_ENV: json.dumps({"path": str(ROOT), "version": "0.9.1"})}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_CRASH, done.stderr
    assert "located True" in done.stdout
    assert "error: the harness's driver imported 'verl' on a verl tree (HARNESS_VERL_TREE is set)" in done.stderr
    assert "verl in sys.modules: False | finders left: False" in done.stdout  # nothing ran; the guard lifted after


def test_without_a_tree_the_driver_is_left_as_it_is():
    from harness.driver_guard import lift_refusal, refuse_verl

    finder = refuse_verl()
    assert sys.meta_path[0] is finder and finder.find_spec("harness") is None  # only verl is answered for
    lift_refusal(finder)
    assert finder not in sys.meta_path
