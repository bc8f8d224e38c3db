"""The one runner and its executors (run/executors.py): run_plan drives the local pool and the Ray executor through
one interface (Executor), and owns everything else: plan order, progress lines, stamping, Ctrl-C. Here an executor
of this test's own runs a trivial callable on real threads, through that interface alone; the local pool runs real
cells in test_devices_plan.py, the Ray executor a real cluster in tests/distributed/test_ray.py."""

from __future__ import annotations

import inspect
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from harness.launch import launch as launch_mod
from harness.plan.arms import resolve_arm
from harness.records.results import Record
from harness.records.store import ResultsFile, read_records
from harness.run import executors, runner
from harness.run.interrupt import Interrupted
from harness.run.ray_executor import RayExecutor

pytestmark = pytest.mark.unit

INTERFACE = [name for name in vars(executors.Executor) if not name.startswith("_")]


@pytest.mark.parametrize("kind", [executors.LocalPool, RayExecutor])
def test_both_executors_offer_the_interface_the_runner_uses(kind):
    assert INTERFACE == ["plan", "submit", "outcome", "running", "cancel", "close"]
    assert hasattr(kind(1 if kind is executors.LocalPool else "auto"), "jobs")
    for name in INTERFACE:
        wanted = inspect.signature(getattr(executors.Executor, name))
        assert inspect.signature(getattr(kind, name)).parameters.keys() == wanted.parameters.keys(), name


class ThreadsOnANode:
    """An executor of this test's: each cell a trivial callable on a real thread, its record judged "pass" on a
    named node, stamped with that node's host; `hold` cells wait until cancelled."""

    def __init__(self, hold: set[int] = frozenset()):
        self.jobs, self.hold, self.pool = 2, hold, ThreadPoolExecutor(2)
        self.started: dict[int, float] = {}
        self.cancelled: list[int] = []
        self.released = threading.Event()
        self.closed = False

    def plan(self, pairs):
        return executors.planned_cells(pairs, gpus=0)

    def submit(self, job) -> Future:
        return self.pool.submit(self.run, job)

    def run(self, job):
        self.started[job.index] = time.monotonic()
        if job.index in self.hold:
            launch_mod.STOP.set()  # as the signal handler does on Ctrl-C
            assert self.released.wait(30), "the runner never cancelled the pending jobs"
            return None
        record = Record(scenario=job.cell.scenario.name, arm=job.cell.arm.name, outcome="pass", wall_s=0.1)
        record.node = "node-7 (10.0.0.7)"
        return executors.Ran(record, {"host": "node-7"})

    def outcome(self, job, future):
        return future.result()

    def running(self):
        return {i: (at, "node-7") for i, at in self.started.items()}

    def cancel(self, jobs):
        self.cancelled = sorted(j.index for j in jobs)
        self.released.set()

    def close(self):
        self.closed = True
        self.pool.shutdown()


@pytest.fixture
def plan(scenario, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "ResultsFile", lambda command: ResultsFile(command, tmp_path))
    upstream = resolve_arm("upstream")
    return [(scenario(name, device="cpu"), upstream) for name in ("fsdp2-multigpu", "fsdp2-1gpu", "direct-1gpu")]


def test_the_runner_stamps_writes_and_tells_what_any_executor_ran(plan, capsys):
    executor = ThreadsOnANode()
    result = runner.run_plan("test", plan, executor=executor)
    assert executor.closed
    assert [r.scenario for r in result.records] == ["fsdp2-multigpu", "fsdp2-1gpu", "direct-1gpu"]  # plan order
    on_disk = read_records(result.path)
    assert [on_disk[line - 1] for line in result.lines] == result.records
    # stamped by the runner, with what the executor said of the place it ran (its host), and nothing else of it
    assert [(r.stamp.host, r.stamp.command, r.node) for r in result.records] == [
        ("node-7", "test", "node-7 (10.0.0.7)")
    ] * 3
    assert all(r.stamp.scenario_spec and r.stamp.finished_at for r in result.records)
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert len(progress) == 3 and all(line.endswith("  on node-7 (10.0.0.7)") for line in progress), progress
    assert [line.split()[0] for line in progress] == ["[1/3]", "[2/3]", "[3/3]"]


def test_on_ctrl_c_the_runner_cancels_what_is_pending_and_keeps_what_finished(plan):
    executor = ThreadsOnANode(hold={2})
    try:
        with pytest.raises(Interrupted) as stopped:
            runner.run_plan("test", plan, executor=executor, quiet=True)
    finally:
        launch_mod.STOP.clear()
    assert 2 in executor.cancelled and executor.closed  # (a job that finished meanwhile may be named too)
    assert (stopped.value.recorded, stopped.value.total) == (2, 3)
    assert [r.scenario for r in read_records(stopped.value.path)] == ["fsdp2-multigpu", "fsdp2-1gpu"]


def test_the_local_pool_runs_a_planned_skip_without_a_launch_and_says_when_a_cell_began(scenario, monkeypatch):
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: pytest.fail("launched a cell planned as skipped"))
    pool = executors.LocalPool(jobs=None)
    [cell] = pool.plan([(scenario("direct-1gpu", device="cpu", fused_backend="triton"), resolve_arm("upstream"))])
    assert pool.jobs == 1  # CPU: one at a time, as before
    job = executors.Job(0, cell, None, False, "b1")
    future = pool.submit(job)
    ran = pool.outcome(job, future)
    pool.close()
    assert ran.record.outcome == "skipped" and ran.facts == {}
    assert list(pool.running()) == [0] and pool.running()[0][1] == ""


def _sealed_arm(tmp_path):
    from harness.plan import tree_seal

    arm_dir = tmp_path / "arm-1"
    (arm_dir / "verl").mkdir(parents=True)
    (arm_dir / "verl" / "__init__.py").write_text("")
    tree_seal.seal(arm_dir, arm_dir.name, arm_dir / "verl")
    return arm_dir


@pytest.mark.parametrize("how", ["removed", "changed", "raised"])
def test_a_tree_gone_under_a_cell_is_the_harness_failure_never_a_finding(scenario, monkeypatch, tmp_path, how):
    """Issue 71: `.cache` trees deleted mid-run gave a traceback and exit 1 ("breaks"). A cell whose arm copy was
    removed or changed while it ran (its ranks then fail on it, or the launch itself does) is one line, exit 3, and
    no record: its outcome says nothing of the code."""
    from harness.errors import EXIT_CRASH, HarnessFailure
    from harness.launch.launch import RawRun
    from harness.plan import tree_seal

    arm_dir = _sealed_arm(tmp_path)

    def launch(s, arm, arm_dir, **kwargs):
        if how == "changed":
            (arm_dir / "verl" / "__init__.py").chmod(0o644)
            (arm_dir / "verl" / "__init__.py").write_text("broken")
            return RawRun(s, arm, "cpu", s.ranks, None, skipped_reason="ran")
        tree_seal.remove(arm_dir)
        if how == "raised":
            raise FileNotFoundError(arm_dir / "patch_lines.json")
        return RawRun(s, arm, "cpu", s.ranks, None, skipped_reason="ran")

    monkeypatch.setattr(launch_mod, "launch", launch)
    [cell] = executors.planned_cells([(scenario("fsdp2-multigpu", device="cpu"), resolve_arm("upstream"))])
    with pytest.raises(HarnessFailure) as exc:
        executors.launch_and_judge(cell, arm_dir)
    words = "removed while the command ran" if how != "changed" else "changed while the command ran (changed verl"
    assert f"cached tree arm-1 was {words}" in str(exc.value) and "fsdp2-multigpu x upstream is not judged" in str(
        exc.value
    )
    assert exc.value.exit_code == EXIT_CRASH


def test_the_verl_tree_environment_a_command_runs_in_is_watched_too(monkeypatch, tmp_path):
    from harness.plan import verl_trees

    monkeypatch.setattr(verl_trees, "TREES_DIR", tmp_path / "verl-trees")
    env = tmp_path / "verl-trees" / "0.9.1-abc"
    env.mkdir(parents=True)
    monkeypatch.setattr(executors.sys, "prefix", str(env))
    assert executors._tree_environment() == env.resolve()
    monkeypatch.setattr(executors.sys, "prefix", str(tmp_path / "venv"))
    assert executors._tree_environment() is None
