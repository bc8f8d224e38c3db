"""The runner's planning (run/runner.py): what is decided before any launch. Nothing here starts torchrun: every
cell is one this machine cannot run (more ranks than any machine has GPUs, or the triton backend on CPU)."""

from __future__ import annotations

import pytest

from harness.launch import launch as launch_mod
from harness.plan.arms import resolve_arm
from harness.records.results import Record
from harness.records.store import ResultsFile, read_records
from harness.run import executors, runner


@pytest.fixture
def unrunnable(scenario):
    """Two cells this machine cannot run, for two different reasons."""
    return [
        scenario("direct-1gpu", device="cuda", ranks=64),
        scenario("direct-1gpu", device="cpu", fused_backend="triton"),
    ]


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("launched a cell that was planned as skipped")

    monkeypatch.setattr(launch_mod, "launch", refuse)


def test_a_skip_is_decided_when_planning_and_leaves_no_run_directory(tmp_path, unrunnable, no_launch, monkeypatch):
    monkeypatch.setattr(launch_mod, "RUNS_DIR", tmp_path / "runs")
    results = ResultsFile("test", tmp_path)
    records = [runner.run_cell("test", s, resolve_arm("upstream"), results=results)[0] for s in unrunnable]
    results.close()
    assert [r.outcome for r in records] == ["skipped", "skipped"]
    assert records[0].verdict.skipped_reason.startswith("needs 64 CUDA device(s), ")
    assert records[1].verdict.skipped_reason == "the triton fused backend needs CUDA"
    assert [r.device for r in records] == ["cuda", "cpu"]
    assert all(r.run_dir is None for r in records)
    assert not (tmp_path / "runs").exists()  # no run directory, not even an empty one
    assert read_records(results.path) == records


def test_launch_refuses_a_cell_that_cannot_run_here(unrunnable):
    for scenario in unrunnable:
        with pytest.raises(ValueError, match="plan with planned_device"):
            launch_mod.launch(scenario, "upstream", None)


def test_a_plan_fingerprints_each_arm_once_and_says_each_records_line(tmp_path, unrunnable, no_launch, monkeypatch):
    calls = []
    fingerprint = executors.arm_fingerprint
    monkeypatch.setattr(executors, "arm_fingerprint", lambda arm: calls.append(arm.name) or fingerprint(arm))
    monkeypatch.setattr(runner, "ResultsFile", lambda command: ResultsFile(command, tmp_path))
    upstream = resolve_arm("upstream")
    result = runner.run_plan("test", [(s, upstream) for s in unrunnable * 2], quiet=True)
    assert calls == ["upstream"]
    assert result.lines == [1, 2, 3, 4]  # the records as they landed, each named FILE:N
    on_disk = read_records(result.path)
    assert [on_disk[line - 1] for line in result.lines] == result.records


def test_append_returns_the_records_line(tmp_path):
    results = ResultsFile("test", tmp_path)
    assert [results.append(Record(scenario=f"s{n}", arm="upstream", outcome="pass")) for n in range(3)] == [1, 2, 3]
    results.close()
