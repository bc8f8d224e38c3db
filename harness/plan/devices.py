"""Where each cell runs, decided in this one place: the device a scenario gets here (CUDA or CPU) or why it cannot
run here (planned_device), which GPUs this host shows, which of them each concurrent CUDA cell holds, and how many
cells run at once (default_jobs). launch/ and run/ ask; none decides on its own.

The count is found without torch (importing it costs the driver about 3 s): no NVIDIA device node, or a CPU build
of torch, means no GPU; else `nvidia-smi -L` lists them, narrowed by CUDA_VISIBLE_DEVICES as CUDA would narrow
them. A cell's ranks see only the devices it holds (CUDA_VISIBLE_DEVICES in its environment), so two cells never
share a GPU: a cell that finds too few free waits for a running one to give its back.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

# CUDA on Linux needs the NVIDIA driver's control device (/dev/dxg under WSL); without any of these no GPU is usable.
NVIDIA_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg")
# Tests (and a rehearsal on a CPU host): pretend this host has N GPUs, ids 0..N-1, instead of asking the driver.
FAKE_GPUS = "HARNESS_FAKE_GPUS"
_SMI_LINE = re.compile(r"^GPU (\d+):.*\(UUID: ([^)]+)\)")


def visible_gpus() -> list[str]:
    """The ids (as CUDA_VISIBLE_DEVICES names them) of the GPUs a process started from here may use, in order."""
    fake = os.environ.get(FAKE_GPUS)
    if fake is not None:
        known = [(str(i), None) for i in range(int(fake or 0))]
    elif not any(os.path.exists(node) for node in NVIDIA_NODES) or not torch_has_cuda():
        return []
    else:
        known = _driver_gpus()
    return narrowed(known, os.environ.get("CUDA_VISIBLE_DEVICES"))


def torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build, from its package metadata (importing it costs seconds): a CPU
    wheel (`2.13.0+cpu`) uses no GPU however many the driver lists."""
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return False
    return "+cpu" not in version


def _driver_gpus() -> list[tuple[str, str | None]]:
    """(index, UUID) of every GPU the driver lists; the /dev/nvidiaN nodes when nvidia-smi cannot say."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        found = [m.groups() for m in map(_SMI_LINE.match, listed.stdout.splitlines()) if m]
        if listed.returncode == 0:
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    nodes = sorted(int(p.name[6:]) for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit())
    return [(str(i), None) for i in nodes]


def narrowed(known: list[tuple[str, str | None]], cuda_visible: str | None) -> list[str]:
    """CUDA's reading of CUDA_VISIBLE_DEVICES: a comma list of indices or UUIDs, cut at the first entry that names
    no device (so "" and "-1" hide every GPU); unset: every device, by index."""
    if cuda_visible is None:
        return [index for index, _ in known]
    by_name = {name: index for index, uuid in known for name in (index, uuid) if name}
    picked: list[str] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        # A UUID entry may be a prefix of the device's UUID; "GPU-..." and "MIG-..." pass through unchecked
        # when the driver gave no UUIDs (a faked count).
        match = by_name.get(entry) or next((by_name[u] for u in by_name if entry and u.startswith(entry)), None)
        if match is None and entry.startswith(("GPU-", "MIG-")) and not any(uuid for _, uuid in known):
            match = entry
        if match is None or match in picked or entry in picked:
            break
        picked.append(entry)
    return picked


class DevicePool:
    """The GPUs of one plan: a CUDA cell takes `ranks` of them for its whole launch and gives them back after."""

    def __init__(self, ids: list[str]):
        self.ids = list(ids)
        self._free = list(ids)
        self._cond = threading.Condition()

    def take(self, count: int, stop: threading.Event) -> list[str] | None:
        """count free devices, waiting for them as long as needed; None if `stop` is set first."""
        if count > len(self.ids):
            raise ValueError(f"a cell of {count} ranks can never run on {len(self.ids)} GPU(s); plan skips it")
        with self._cond:
            while len(self._free) < count:
                if stop.is_set():
                    return None
                self._cond.wait(0.2)
            taken, self._free = self._free[:count], self._free[count:]
            return taken

    def give(self, ids: list[str]):
        with self._cond:
            self._free = [i for i in self.ids if i in self._free or i in ids]  # in the host's order again
            self._cond.notify_all()

    @contextmanager
    def held(self, count: int, stop: threading.Event):
        """The devices for one launch (None if stopped while waiting), given back however the launch ends."""
        taken = self.take(count, stop)
        try:
            yield taken
        finally:
            if taken is not None:
                self.give(taken)


def fitting_jobs(cuda_ranks: list[int], gpus: int, cpu_default: int = 1) -> int:
    """JOBS when none is given: on CPU as before (one at a time); with CUDA cells, as many as fit side by side on
    this host's GPUs when every one is as large as the largest."""
    if not cuda_ranks or not gpus:
        return cpu_default
    return max(1, gpus // max(cuda_ranks))


def cell_environment(env: dict, devices: list[str] | None) -> dict:
    """env with only `devices` visible to CUDA (None: env as it is). PCI bus order makes an index name the GPU
    nvidia-smi lists under it (CUDA's own default orders the fastest first)."""
    if devices is None:
        return env
    if "CUDA_VISIBLE_DEVICES" not in env:  # ids are nvidia-smi's indices; else they mean what the user's did
        env = dict(env, CUDA_DEVICE_ORDER=env.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))
    return dict(env, CUDA_VISIBLE_DEVICES=",".join(devices))


def visible_cuda_devices() -> int:
    """GPUs this process may give its cells (plan/devices.py: found without importing torch)."""
    return len(visible_gpus())


def resolve_device(scenario, gpus: int | None = None) -> tuple[str | None, str | None]:
    """(device, skip reason). auto: CUDA when enough GPUs are visible for one rank each, else CPU. gpus: how many
    there are where the cell will run (default: this host's)."""
    gpus = visible_cuda_devices() if gpus is None else gpus
    if scenario.device == "cpu":
        return "cpu", None
    if scenario.device == "cuda":
        if gpus < scenario.ranks:
            return None, f"needs {scenario.ranks} CUDA device(s), {gpus} visible"
        return "cuda", None
    return ("cuda" if gpus >= scenario.ranks else "cpu"), None


def planned_device(scenario, gpus: int | None = None) -> tuple[str, str | None]:
    """(the device the scenario runs on here, why it cannot run here or None). The runner asks when it plans,
    before it launches anything, so a skipped cell leaves no run directory behind."""
    device, skip = resolve_device(scenario, gpus)
    if not skip and scenario.fused_backend == "triton" and device != "cuda":
        skip = "the triton fused backend needs CUDA"
    return device or scenario.device, skip


def default_jobs(cells: list, gpus: int) -> int:
    """JOBS when none is given: one at a time on CPU, as before; with CUDA cells, this host's GPUs divided by the
    largest CUDA cell's ranks."""
    return fitting_jobs([c.scenario.ranks for c in cells if c.device == "cuda" and not c.skip], gpus)


@contextmanager
def cell_devices(gpus: DevicePool | None, cell, stop: threading.Event):
    """The GPUs a CUDA cell holds for its launch, waited for until free (never shared with another cell), given
    back when it ends; None for a CPU or skipped cell, and when stopped while waiting."""
    if gpus is None or cell.device != "cuda" or cell.skip:
        yield None
        return
    with gpus.held(cell.scenario.ranks, stop) as taken:
        yield taken


def default_cell_gpus(cell) -> list[str] | None:
    """The GPUs a CUDA cell's ranks see where no pool gave it any (a cell run on its own): this host's first
    `ranks`; None for a CPU cell."""
    return visible_gpus()[: cell.scenario.ranks] if cell.device == "cuda" else None
