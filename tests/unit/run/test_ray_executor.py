"""The Ray executor's pieces that need no cluster (run/ray_executor.py): the record of a lost task, and the killing
of what a dead worker's launch left on its node. The cluster itself: tests/distributed/test_ray.py."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from harness.launch import launch as launch_mod
from harness.plan.arms import resolve_arm
from harness.run import executors
from harness.run.ray_executor import kill_leftovers, lost_record, ray_address


def test_a_lost_ray_task_is_an_error_record_naming_its_node_and_worker(scenario):
    cell = executors.planned_cells([(scenario("fsdp2-multigpu", device="cpu"), resolve_arm("upstream"))])[0]

    class WorkerCrashedError(Exception):
        pass

    where = {"node": "gpu-7 (10.0.0.7)", "node_id": "abc", "pid": 4242}
    record = lost_record(cell, WorkerCrashedError("The worker died unexpectedly.\nmore"), where)
    assert (record.outcome, record.node, record.verdict.error.type) == ("error", "gpu-7 (10.0.0.7)", "RayTaskLost")
    assert record.verdict.error.message == (
        "the Ray task of this cell was lost on node gpu-7 (10.0.0.7) (Ray worker pid 4242): "
        "WorkerCrashedError: The worker died unexpectedly."
    )
    assert "before it reported its node" in lost_record(cell, RuntimeError("x"), None).verdict.error.message


@pytest.fixture
def sleepers():
    started = []

    def start(*argv) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *map(str, argv)])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_dead_workers_leftovers_are_killed_and_nothing_else(tmp_path, monkeypatch, sleepers):
    monkeypatch.setattr(launch_mod, "RUNS_DIR", tmp_path / "runs")
    run_dir = tmp_path / "runs" / "b1" / "fsdp2-multigpu__upstream"
    other_cell = tmp_path / "runs" / "b1" / "fsdp2-1gpu__upstream"
    run_dir.mkdir(parents=True)
    other_cell.mkdir(parents=True)
    torchrun = sleepers(run_dir / "launch.json", "harness.rank.torchrun")  # named by its command line
    forked_rank = sleepers("harness.rank.preload")  # a forked rank: named by its progress file only
    stranger = sleepers("not-ours")  # a pid reused by another program since
    elsewhere = sleepers(other_cell / "launch.json", "harness.rank.torchrun")
    (run_dir / "progress_rank0").write_text(f"{forked_rank.pid} step")
    (run_dir / "progress_rank1").write_text(f"{stranger.pid} step")
    killed = kill_leftovers("b1", "fsdp2-multigpu__upstream")
    assert sorted(killed) == sorted([torchrun.pid, forked_rank.pid])
    # killed and reaped (kill_leftovers waits for them: Popen then sees no child and says 0)
    assert not psutil.pid_exists(torchrun.pid) and not psutil.pid_exists(forked_rank.pid)
    assert stranger.poll() is None and elsewhere.poll() is None
    assert psutil.pid_exists(stranger.pid)


def test_auto_takes_ray_address_first(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_address("auto") == "10.0.0.1:6379"
    assert ray_address("head:6379") == "head:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address("auto") == "auto"


def test_releases_refuses_ray_in_one_line(cli_in_process):
    line = cli_in_process.usage_error("releases", "--ray", "auto")
    assert line.startswith("error: --ray auto: release environments are built on this host only"), line
