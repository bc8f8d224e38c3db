"""Each environment adapter of rank/verl_side/adapters.py stands on a fact about verl 0.9.1; these tests fail when verl
changes under one, so the adapter is revisited instead of silently doing something else. verl is imported in two
processes of their own (adapter_facts.py: one without the adapters, one with), not in the test process, and no
torchrun is started. They are forked by the test process's preloaded parent where it has one (tests/own_process.py:
an interpreter's state before verl, with torch imported; two fresh interpreters cost ~25 s of the suite), else
fresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from own_process import run_module  # tests/own_process.py (tests/ is on sys.path: its conftest)

FACTS = Path(__file__).with_name("adapter_facts.py")

# One process runs this module's tests (make test: --dist loadgroup), so each verl subprocess starts once, not once
# in each pytest process the tests were spread over.
pytestmark = pytest.mark.xdist_group("adapters")


def _facts(which: str) -> dict:
    done = run_module(FACTS.stem, which, folder=FACTS.parent, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def without():
    return _facts("without")


@pytest.fixture(scope="module")
def with_adapters():
    return _facts("with")


def test_cpu_platform_is_needed_and_installs_through_verls_registry(without, with_adapters):
    # The reason for the adapter: with no accelerator verl still answers cuda.
    assert without == {"device_name": "cuda", "accelerator": False}
    assert with_adapters["installed"] == ["cpu-platform", "engine-device"]
    assert with_adapters["device"] == ["cpu", "cpu"]


def test_cpu_platform_gives_the_peak_memory_counters_verl_logs_after_train_batch(with_adapters):
    # torch.cpu has no allocator counters, TrainingWorker reads them after every train_batch of an actor update.
    assert with_adapters["memory_counters"] == {
        "torch_cpu_has_them": False,
        "verl_logs_them": True,
        "adapter_reads": [0, 0],
    }


def test_engine_device_override_selects_the_class_a_cuda_host_gets(with_adapters):
    assert with_adapters["reads_override"] and with_adapters["override_class"]
    assert with_adapters["cpu_engine"] != "known"  # the reason: no FSDP engine is registered for device cpu


def test_offload_policy_is_forced_with_pinning_for_the_ref_and_rebuilt_without_it(with_adapters):
    assert with_adapters["pin_forced"]
    assert with_adapters["on"] == ["offload-no-pin", False]
    assert with_adapters["restored"] and with_adapters["off"] is None


def test_the_adapters_for_older_trees_stay_off_on_the_installed_verl(with_adapters):
    # cpu-bert-padding: 0.9.1 has verl #7127's own fallbacks; keep-grads-on-exit: its train mode takes the flag.
    assert with_adapters["bert_padding"] == []
    assert with_adapters["keeps_zero_grad_on_exit"]


def test_a_cuda_run_gets_no_host_adapter():
    """Keyed on the run's device: a CUDA run keeps verl's own platform even where this host has no GPU."""
    from harness.rank.verl_side.adapters import install_host_adapters

    assert install_host_adapters("cuda") == []
