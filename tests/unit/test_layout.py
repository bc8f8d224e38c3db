"""The user's side stays light: the driver, spec, render and command packages import with torch (and ray) blocked,
so `harness list` and a usage error never pay for torch, nothing there depends on the rank side's stack, and ray is
imported only by a run given --ray (driver/ray_runner.py imports it in its functions)."""

from __future__ import annotations

import subprocess
import sys

from harness.paths import ROOT

USER_SIDE = (
    "harness.cli",
    "harness.driver.arms",
    "harness.driver.devices",
    "harness.driver.diffs",
    "harness.driver.launch",
    "harness.driver.ray_runner",
    "harness.driver.records",
    "harness.driver.runner",
    "harness.driver.shard_stats",
    "harness.driver.verdict",
    "harness.spec.scenario",
    "harness.spec.expectations",
    "harness.spec.tolerances",
    "harness.render.tables",
    "harness.render.ci",
    "harness.render.chart",
    "harness.commands.run",
    "harness.commands.inspect",
    "harness.commands.rerun",
    "harness.commands.noise_floor",
    "harness.commands.sweep",
    "harness.commands.bench",
    "harness.rank.phases",
)


def test_user_side_imports_with_torch_blocked():
    code = (
        "import sys\nfor name in ('torch', 'verl', 'transformers', 'ray'):\n    sys.modules[name] = None\n"
        "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in USER_SIDE)
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_list_runs_with_torch_blocked():
    code = "import sys\nsys.modules['torch'] = None\nfrom harness.cli import main\nraise SystemExit(main(['list']))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "fsdp2-multigpu" in done.stdout


def test_without_an_nvidia_driver_the_device_check_does_not_import_torch():
    """On a host with no NVIDIA device node no GPU can be used: the driver answers 0 without paying for torch."""
    import os

    import pytest

    from harness.driver.launch import _NVIDIA_NODES

    if any(os.path.exists(node) for node in _NVIDIA_NODES):
        pytest.skip("this host has an NVIDIA driver: the check asks torch")
    code = (
        "import sys\nfrom harness.driver.launch import visible_cuda_devices\n"
        "print(visible_cuda_devices(), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"]
