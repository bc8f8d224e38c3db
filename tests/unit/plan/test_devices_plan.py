"""The GPU plan of one host (plan/devices.py, run/executors.py): with a faked device count, concurrent CUDA cells
hold disjoint GPUs, a cell waits for free ones, JOBS defaults to what fits, and the record names the devices.
Nothing here starts torchrun: launch is replaced by a stand-in that only notes what it was given."""

from __future__ import annotations

import threading
import time

import pytest

from harness.launch import launch as launch_mod
from harness.plan import devices
from harness.plan.arms import resolve_arm
from harness.records.store import ResultsFile, read_records
from harness.run import executors, runner


@pytest.fixture
def gpus(monkeypatch):
    """This host shows N GPUs (ids 0..N-1), CUDA_VISIBLE_DEVICES unset."""

    def fake(count: int):
        monkeypatch.setenv(devices.FAKE_GPUS, str(count))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return fake


class StandInLaunch:
    """launch's stand-in: holds each cell for a moment, noting (start, end, devices) and the most at once."""

    def __init__(self, tmp_path, hold_s=0.15):
        self.tmp_path, self.hold_s = tmp_path, hold_s
        self.spans: list[tuple[float, float, list[str]]] = []
        self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, scenario, arm_name, arm_dir, *, keep_traces=False, batch_id=None, cuda_devices=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        start = time.monotonic()
        time.sleep(self.hold_s)
        end = time.monotonic()
        with self.lock:
            self.running -= 1
            self.spans.append((start, end, list(cuda_devices or [])))
        run_dir = self.tmp_path / f"run-{start}"
        run_dir.mkdir()
        return launch_mod.RawRun(scenario, arm_name, "cuda", scenario.ranks, run_dir, cuda_devices=cuda_devices)

    def overlapping_holders(self) -> list:
        """Pairs of spans that ran at the same time on a shared GPU (none, if the plan is right)."""
        return [
            (a, b)
            for n, a in enumerate(self.spans)
            for b in self.spans[n + 1 :]
            if a[0] < b[1] and b[0] < a[1] and set(a[2]) & set(b[2])
        ]


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    launched = StandInLaunch(tmp_path)
    monkeypatch.setattr(launch_mod, "launch", launched)
    monkeypatch.setattr(runner, "ResultsFile", lambda command: ResultsFile(command, tmp_path))
    return launched


def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    known = [("0", "GPU-aaa"), ("1", "GPU-bbb"), ("2", "GPU-ccc"), ("3", None)]
    assert devices.narrowed(known, None) == ["0", "1", "2", "3"]
    assert devices.narrowed(known, "2,0") == ["2", "0"]
    assert devices.narrowed(known, "") == []
    assert devices.narrowed(known, "-1") == []
    assert devices.narrowed(known, "1,7,0") == ["1"]  # cut at the first entry that names no device
    assert devices.narrowed(known, "1,1") == ["1"]
    assert devices.narrowed(known, "GPU-bb,3") == ["GPU-bb", "3"]  # a UUID prefix names its device


def test_a_faked_count_is_narrowed_by_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv(devices.FAKE_GPUS, "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert devices.visible_gpus() == ["3", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.visible_gpus() == ["0", "1", "2", "3"]
    assert devices.visible_cuda_devices() == 4


def test_a_cpu_build_of_torch_has_no_gpu_whatever_the_driver_lists(monkeypatch):
    monkeypatch.delenv(devices.FAKE_GPUS, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(devices, "NVIDIA_NODES", ("/",))  # a driver node "exists"
    monkeypatch.setattr(devices, "_driver_gpus", lambda: [("0", None), ("1", None)])
    monkeypatch.setattr(devices.metadata, "version", lambda name: "2.13.0+cpu")
    assert devices.visible_gpus() == []
    monkeypatch.setattr(devices.metadata, "version", lambda name: "2.13.0")  # PyPI's Linux wheel: CUDA
    assert devices.visible_gpus() == ["0", "1"]


def test_a_cell_sees_only_its_devices():
    env = devices.cell_environment({"PATH": "/bin"}, ["2", "3"])
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # ids the user's own CUDA_VISIBLE_DEVICES gave keep the order it meant
    env = devices.cell_environment({"CUDA_VISIBLE_DEVICES": "3,2"}, ["2"])
    assert env == {"CUDA_VISIBLE_DEVICES": "2"}
    assert devices.cell_environment({"PATH": "/bin"}, None) == {"PATH": "/bin"}
    assert devices.cell_environment({}, [])["CUDA_VISIBLE_DEVICES"] == ""  # a CPU cell on Ray: no GPU at all


def test_launch_gives_torchrun_the_cells_devices_only(scenario, gpus, tmp_path, monkeypatch):
    gpus(4)
    monkeypatch.setenv("HARNESS_PRELOAD", "0")  # no preloaded parent: nothing but the command is built
    monkeypatch.setattr(launch_mod, "RUNS_DIR", tmp_path / "runs")
    seen = {}
    monkeypatch.setattr(launch_mod, "_run_until_done", lambda raw, cmd, env: seen.update(env=env))
    raw = launch_mod.launch(scenario("fsdp2-multigpu"), "upstream", None, cuda_devices=["1", "3"])
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert (raw.device, raw.cuda_devices) == ("cuda", ["1", "3"])
    with pytest.raises(ValueError, match="cannot run here"):  # three ranks never run on two GPUs
        launch_mod.launch(scenario("fsdp2-multigpu", ranks=3, device="cuda"), "upstream", None, cuda_devices=["0"])


def test_jobs_default_to_what_fits(scenario, gpus):
    upstream = resolve_arm("upstream")
    two, four = scenario("fsdp2-multigpu"), scenario("fsdp2-multigpu", ranks=4)
    gpus(8)
    assert devices.default_jobs(executors.planned_cells([(two, upstream)] * 3), 8) == 4
    assert devices.default_jobs(executors.planned_cells([(two, upstream), (four, upstream)]), 8) == 2  # the largest
    cpu = scenario("fsdp2-multigpu", device="cpu")
    assert devices.default_jobs(executors.planned_cells([(cpu, upstream)] * 3), 8) == 1  # CPU: as before
    gpus(0)
    assert devices.default_jobs(executors.planned_cells([(two, upstream)] * 3), 0) == 1


def test_concurrent_cells_never_share_a_gpu_and_the_record_names_them(scenario, gpus, stand_in):
    gpus(4)
    upstream = resolve_arm("upstream")
    plan = [(scenario("fsdp2-multigpu"), upstream)] * 5 + [(scenario("fsdp2-1gpu"), upstream)] * 2
    result = runner.run_plan("test", plan, jobs=None, quiet=True)  # what fits: 4 GPUs // 2 ranks = 2 at once
    assert stand_in.most == 2
    assert not stand_in.overlapping_holders()
    assert [len(r.cuda_devices) for r in result.records] == [2] * 5 + [1] * 2
    assert all(set(r.cuda_devices) <= {"0", "1", "2", "3"} for r in result.records)
    on_disk = read_records(result.path)
    assert sorted(tuple(r.cuda_devices) for r in on_disk) == sorted(tuple(r.cuda_devices) for r in result.records)


def test_a_cell_waits_for_free_gpus_rather_than_share(scenario, gpus, stand_in):
    gpus(3)
    upstream = resolve_arm("upstream")
    result = runner.run_plan("test", [(scenario("fsdp2-multigpu"), upstream)] * 4, jobs=4, quiet=True)
    # four threads, but two 2-rank cells never fit on three GPUs: one at a time, each on two of them
    assert stand_in.most == 1
    assert not stand_in.overlapping_holders()
    starts = sorted(stand_in.spans)
    assert all(later[0] >= earlier[1] for earlier, later in zip(starts, starts[1:]))
    assert all(len(r.cuda_devices) == 2 for r in result.records)


def test_a_cpu_cell_holds_no_gpu_and_its_record_has_no_device_field(scenario, gpus):
    gpus(2)
    cell = executors.planned_cells([(scenario("fsdp2-multigpu", device="cpu"), resolve_arm("upstream"))])[0]
    with devices.cell_devices(devices.DevicePool(["0", "1"]), cell, threading.Event()) as held:
        assert held is None
    from harness.judge_cell.verdict import judge

    record = judge(launch_mod.RawRun(cell.scenario, "upstream", "cpu", 2, None, skipped_reason="not run"))
    assert "cuda_devices" not in record.written()


def test_a_stop_while_waiting_gives_no_devices():
    pool = devices.DevicePool(["0", "1"])
    stop = threading.Event()
    assert pool.take(2, stop) == ["0", "1"]
    stop.set()
    assert pool.take(1, stop) is None  # nothing free, and Ctrl-C came: the cell is not launched
    pool.give(["1", "0"])
    assert pool.take(2, threading.Event()) == ["0", "1"]  # given back in the host's order
