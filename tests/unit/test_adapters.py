"""Each environment adapter of rank/adapters.py stands on a fact about verl 0.9.1; these tests fail when verl changes
under one, so the adapter is revisited instead of silently doing something else. verl is imported in two
subprocesses (one without the adapters, one with), not in the test process, and no torchrun is started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.paths import ROOT

WITHOUT = """
import json, torch
from verl.utils.device import get_device_name
print(json.dumps({"device_name": get_device_name(), "accelerator": torch.accelerator.is_available()}))
"""

WITH = """
import inspect, json, os
from harness.rank.adapters import install_host_adapters, offload_without_pinning
facts = {"installed": install_host_adapters()}
from verl.utils.device import get_device_id, get_device_name
facts["device"] = [get_device_name(), str(get_device_id())]
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp import transformer_impl as t
facts["reads_override"] = "VERL_ENGINE_DEVICE" in inspect.getsource(EngineRegistry.get_engine_cls)
facts["override_class"] = EngineRegistry.get_engine_cls("language_model", "fsdp2") is t.FSDPEngineWithLMHead
del os.environ["VERL_ENGINE_DEVICE"]
try:
    EngineRegistry.get_engine_cls("language_model", "fsdp2")
    facts["cpu_engine"] = "known"
except Exception as exc:
    facts["cpu_engine"] = type(exc).__name__
src = inspect.getsource(t.FSDPEngine)
facts["pin_forced"] = "CPUOffloadPolicy(pin_memory=True)" in src and "self.engine_config.forward_only" in src
original = t.CPUOffloadPolicy
with offload_without_pinning(True) as name:
    facts["on"] = [name, t.CPUOffloadPolicy(pin_memory=True).pin_memory]
facts["restored"] = t.CPUOffloadPolicy is original
with offload_without_pinning(False) as name:
    facts["off"] = name
print(json.dumps(facts))
"""


# One process runs this module's tests (make test: --dist loadgroup), so each verl subprocess starts once, not once
# in each pytest process the tests were spread over.
pytestmark = pytest.mark.xdist_group("adapters")


def _facts(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def without():
    return _facts(WITHOUT)


@pytest.fixture(scope="module")
def with_adapters():
    return _facts(WITH)


def test_cpu_platform_is_needed_and_installs_through_verls_registry(without, with_adapters):
    # The reason for the adapter: with no accelerator verl still answers cuda.
    assert without == {"device_name": "cuda", "accelerator": False}
    assert with_adapters["installed"] == ["cpu-platform", "engine-device"]
    assert with_adapters["device"] == ["cpu", "cpu"]


def test_engine_device_override_selects_the_class_a_cuda_host_gets(with_adapters):
    assert with_adapters["reads_override"] and with_adapters["override_class"]
    assert with_adapters["cpu_engine"] != "known"  # the reason: no FSDP engine is registered for device cpu


def test_offload_policy_is_forced_with_pinning_for_the_ref_and_rebuilt_without_it(with_adapters):
    assert with_adapters["pin_forced"]
    assert with_adapters["on"] == ["offload-no-pin", False]
    assert with_adapters["restored"] and with_adapters["off"] is None


def test_a_cuda_run_gets_no_host_adapter():
    """Keyed on the run's device: a CUDA run keeps verl's own platform even where this host has no GPU."""
    from harness.rank.adapters import install_host_adapters

    assert install_host_adapters("cuda") == []
