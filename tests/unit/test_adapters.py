"""Each environment adapter of rank/adapters.py stands on a fact about verl 0.9.1; these tests fail when verl changes
under one, so the adapter is revisited instead of silently doing something else. One subprocess each: importing
verl is what is being checked (no torchrun)."""
from __future__ import annotations

import subprocess
import sys

from harness.paths import ROOT


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_cpu_platform_is_needed_and_installs_through_verls_registry():
    out = _python(
        "import torch\n"
        "from verl.utils.device import get_device_name\n"
        "print('before', get_device_name(), torch.accelerator.is_available())\n")
    # The reason for the adapter: with no accelerator verl still answers cuda.
    assert "before cuda False" in out, out
    out = _python(
        "from harness.rank.adapters import install_host_adapters\n"
        "print(install_host_adapters())\n"
        "from verl.utils.device import get_device_name, get_device_id\n"
        "print(get_device_name(), get_device_id())\n")
    assert "['cpu-platform', 'engine-device']" in out and "cpu cpu" in out, out


def test_engine_device_override_selects_the_class_a_cuda_host_gets():
    out = _python(
        "import inspect, os\n"
        "from harness.rank.adapters import install_host_adapters\n"
        "install_host_adapters()\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead\n"
        "print('reads override', 'VERL_ENGINE_DEVICE' in inspect.getsource(EngineRegistry.get_engine_cls))\n"
        "print('cls', EngineRegistry.get_engine_cls('language_model', 'fsdp2') is FSDPEngineWithLMHead)\n"
        "del os.environ['VERL_ENGINE_DEVICE']\n"
        "try:\n"
        "    EngineRegistry.get_engine_cls('language_model', 'fsdp2')\n"
        "    print('cpu known')\n"
        "except Exception as exc:\n"
        "    print('cpu unknown', type(exc).__name__)\n")
    assert "reads override True" in out and "cls True" in out, out
    assert "cpu unknown" in out, out  # the reason: no FSDP engine is registered for device cpu


def test_offload_policy_is_forced_with_pinning_for_the_ref_and_rebuilt_without_it():
    out = _python(
        "import inspect\n"
        "from harness.rank.adapters import install_host_adapters, offload_without_pinning\n"
        "install_host_adapters()\n"
        "from verl.workers.engine.fsdp import transformer_impl as t\n"
        "src = inspect.getsource(t.FSDPEngine)\n"
        "print('forced', 'CPUOffloadPolicy(pin_memory=True)' in src and 'self.engine_config.forward_only' in src)\n"
        "original = t.CPUOffloadPolicy\n"
        "with offload_without_pinning(True) as name:\n"
        "    print('on', name, t.CPUOffloadPolicy(pin_memory=True).pin_memory)\n"
        "print('restored', t.CPUOffloadPolicy is original)\n"
        "with offload_without_pinning(False) as name:\n"
        "    print('off', name)\n")
    assert "forced True" in out and "on offload-no-pin False" in out and "restored True" in out, out
    assert "off None" in out, out
