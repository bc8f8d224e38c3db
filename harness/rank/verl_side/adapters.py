"""Environment adapters: the fewest changes that let verl 0.9.1's own engine run on a CPU-only host. None of them
changes verl's logic; each has a one-line reason, a test that fails if verl changes under it
(tests/installed_verl/test_adapters.py), and its name lands in the record of every run it was on.

  cpu-platform        verl's platform detection answers "nvidia"/"cuda" on a host with no accelerator, so every
                      `.to(get_device_id())` would ask for CUDA: a CPU platform is registered through verl's own
                      PlatformRegistry and set_platform before the engine module (which caches it) is imported.
                      Its device module is torch.cpu with the two peak-memory counters TrainingWorker logs after
                      every train_batch (torch.cpu has none: a CPU has no caching allocator; they read 0).
  engine-device       verl's EngineRegistry has FSDP engines for device cuda/npu only: its own VERL_ENGINE_DEVICE
                      override selects FSDPEngineWithLMHead, the class a CUDA host gets.
  offload-no-pin      verl builds CPUOffloadPolicy(pin_memory=True) for forward-only (ref) engines, where it is forced,
                      and for offload_policy; pinning needs an accelerator, so without one the policy is built with
                      pin_memory=False (offload stays on).

verl before #6086 (2026-06-04: the platform layer, verl/plugin/platform) has no PlatformRegistry: its
verl/utils/device.py already answers "cpu" on a host with no accelerator, but hands out torch.cpu, which lacks the
counters and the cache call its engine uses, and its EngineRegistry has no "cpu" entry nor the override. Two
adapters of the same purpose take the place of the first two there (`install_host_adapters` picks by the tree):

  cpu-device-module   verl.utils.device.get_torch_device answers the CPU device module above (peak counters 0,
                      empty_cache a no-op: a CPU has no caching allocator), and get_device_name "cpu" on a CPU run
                      (is_cuda_available read as False: a CPU run on a GPU host), before the engine modules import them.
  engine-device-cpu   EngineRegistry's "cuda" engines registered for "cpu" too: the class a CUDA host gets.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

CPU_PLATFORM, ENGINE_DEVICE, OFFLOAD_NO_PIN = "cpu-platform", "engine-device", "offload-no-pin"
CPU_DEVICE_MODULE, ENGINE_DEVICE_CPU = "cpu-device-module", "engine-device-cpu"
_installed: list[str] = []


class _CPUDeviceModule:
    """torch.cpu, plus max_memory_allocated / max_memory_reserved, which TrainingWorker._postprocess_output reads
    from the platform's device module after every train_batch: 0 (no accelerator allocator to count)."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    # verl's _get_current_mem_info tests `get_torch_device() == torch.cpu` to skip its CUDA counters: still true.
    def __eq__(self, other):
        return other is torch.cpu or other is self

    def __hash__(self):
        return hash(torch.cpu)

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device=None) -> int:
        return 0

    @staticmethod
    def empty_cache() -> None:
        """Called by verl before #6086 on its device module after offloads and steps; nothing cached on a CPU."""


def _make_cpu_platform_class():
    """verl's PlatformBase for a plain CPU host. device_module is torch.cpu, the value verl's own
    `_get_current_mem_info` already special-cases (verl/utils/profiler/performance.py)."""
    from contextlib import contextmanager as _cm

    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = _CPUDeviceModule()

        def _nothing_to_do(self, *args, **kwargs):
            """A CPU host has no device to select, synchronize, configure, empty or profile."""

        set_device = synchronize = set_allocator_settings = empty_cache = _nothing_to_do
        profiler_start = profiler_stop = _nothing_to_do

        def is_available(self):
            return True

        def current_device(self):
            # Used as `tensor.to(get_device_id())` / `module.to_empty(device=...)`: must name the CPU device.
            return torch.device("cpu")

        def device_count(self):
            return 1

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @_cm
        def nvtx_range(self, msg):
            yield

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    return PlatformCPU


def install_host_adapters(device_type: str = "cpu") -> list[str]:
    """cpu-platform and engine-device for a run on the CPU (nothing for a CUDA run). Keyed on the run's device, not
    on whether the host has a GPU: a 2-rank run on a 1-GPU host runs on the CPU with the GPU still visible, and
    verl would otherwise place it on CUDA beside gloo. Returns the names of the adapters now on."""
    import sys

    if _installed or device_type != "cpu":
        return list(_installed)
    if "verl.workers.engine.fsdp.transformer_impl" in sys.modules:
        raise RuntimeError("install_cpu_adapters() must run before verl's FSDP engine module is imported")
    try:
        from verl.plugin.platform import PlatformRegistry, platform_manager, set_platform
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("verl.plugin"):
            raise
        return _install_before_platform_layer()

    if platform_manager._current_platform is not None:
        raise RuntimeError(f"verl platform already resolved to {platform_manager._current_platform.device_name!r}")
    cls = PlatformRegistry.register(platform="cpu")(_make_cpu_platform_class())
    set_platform(cls())
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"
    from verl.utils.device import get_device_name

    assert get_device_name() == "cpu", get_device_name()
    _installed.extend([CPU_PLATFORM, ENGINE_DEVICE])
    return list(_installed)


def _install_before_platform_layer() -> list[str]:
    """cpu-device-module and engine-device-cpu, for a verl without verl/plugin/platform (before #6086)."""
    from verl.utils import device

    device.is_cuda_available = False  # get_device_name reads this module global: "cpu" on a CPU run
    device.is_npu_available = False
    module = _CPUDeviceModule()
    device.get_torch_device = lambda: module
    assert device.get_device_name() == "cpu", device.get_device_name()
    import verl.workers.engine  # noqa: F401 - registers the FSDP engines, importing get_torch_device as set above
    from verl.workers.engine.base import EngineRegistry

    for backends in EngineRegistry._engines.values():
        for devices in backends.values():
            if "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])
    _installed.extend([CPU_DEVICE_MODULE, ENGINE_DEVICE_CPU])
    return list(_installed)


@contextmanager
def offload_without_pinning(offloads: bool, device_type: str = "cpu"):
    """Yields the adapter's name while it is on (an engine that offloads, a CPU run), else None."""
    from verl.workers.engine.fsdp import transformer_impl

    original = transformer_impl.CPUOffloadPolicy
    active = offloads and device_type == "cpu"
    if active:
        transformer_impl.CPUOffloadPolicy = lambda pin_memory=True: original(pin_memory=False)
    try:
        yield OFFLOAD_NO_PIN if active else None
    finally:
        transformer_impl.CPUOffloadPolicy = original
