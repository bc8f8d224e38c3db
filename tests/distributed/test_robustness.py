"""Robustness of the harness itself, each failure provoked for real (torchrun, gloo, verl's patched forward):

- a rank that hangs is reported as a hang naming the stuck ranks and their phase, the run ends at its timeout,
  and no process of it outlives the launch;
- a rank that crashes while its peer waits in a collective is the error's root cause, and torchrun ends the
  waiting peer at once instead of letting it sit out the collective timeout;
- results files written in parallel never interleave, and a file cut mid-line by a kill still reads;
- runs launched in parallel never share a run directory.

Four launches in all (2 + 2 + 1 + 1 ranks), the faults injected by the diffs in tests/fixtures/faults/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.launch.run_dir import rank_pids, rank_progress
from harness.paths import ROOT
from harness.processes import tree

FAULTS = Path(__file__).parent.parent / "fixtures" / "faults"


@pytest.fixture
def fault_run(run_cell, scenario):
    """fault_run(scenario name, fault, **scenario fields) -> (record, run dir): the scenario on CPU under the arm
    of tests/fixtures/faults/<fault>.diff, launched and judged through the runner."""

    def run(name: str, fault: str, **fields):
        record = run_cell(scenario(name, device="cpu", **fields), str(FAULTS / f"{fault}.diff"))
        return record, ROOT / record.run_dir

    return run


class _RecordingPopen(subprocess.Popen):
    """The real Popen; it only remembers the pids of the torchruns it started (or of their stand-ins, which have the
    preloaded parent fork torchrun), for the no-orphans check (the preloaded parent, started on a process's first
    launch, outlives the run by design)."""

    started: list[int] = []

    def __init__(self, args, *rest, **kwargs):
        super().__init__(args, *rest, **kwargs)
        if "harness.rank.torchrun" in args or "--torchrun" in args:
            _RecordingPopen.started.append(self.pid)


def _live_processes_of(run_dir: Path, pids: list[int]) -> list[str]:
    """Every process of the run still running: the given pids, and anything whose command line names the run's
    spec (torchrun and each rank are started with it)."""
    alive = [f"pid {pid} state {tree.state(pid)}" for pid in pids if not tree.gone(pid)]
    spec = str(run_dir / "launch.json").encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in pids:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if spec in cmdline and not tree.gone(int(proc.name)):
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")
            alive.append(f"pid {proc.name}: {shown}")
    return alive


def _explain(record) -> str:
    log = ROOT / record.run_dir / "torchrun.log" if record.run_dir else None
    tail = log.read_text(errors="replace")[-2000:] if log and log.is_file() else ""
    return f"record: {json.dumps(record.written(), indent=1, default=str)[:3000]}\nlog tail:\n{tail}"


class _ClockThatSkipsAStuckWait:
    """launch()'s clock: the real one until every rank of the run has sat in phase `phase` for `stuck_s`, then
    `skip_s` ahead, so the run reaches its timeout seconds after its ranks are stuck instead of sitting it out.
    The scenario's timeout stays long (it is also gloo's collective timeout, which must not fire first)."""

    def __init__(self, batch_dir: Path, ranks: int, phase: str, stuck_s: float, skip_s: float):
        self.batch_dir, self.ranks, self.phase, self.stuck_s, self.skip_s = batch_dir, ranks, phase, stuck_s, skip_s
        self.offset, self.stuck_since, self.skipped_at = 0.0, None, None

    def perf_counter(self) -> float:
        if not self.offset:
            runs = [d for d in self.batch_dir.glob("*") if d.is_dir()]
            phases = [phase for d in runs for phase in rank_progress(d).values()]
            stuck = len(phases) == self.ranks and all(p == self.phase for p in phases)
            self.stuck_since = (self.stuck_since or time.monotonic()) if stuck else None
            if stuck and time.monotonic() - self.stuck_since >= self.stuck_s:
                self.offset, self.skipped_at = self.skip_s, time.monotonic()
        return time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


def test_hung_rank_is_a_hang_naming_the_stuck_ranks_and_their_stacks_and_leaves_no_process(
    monkeypatch, run_cell, scenario
):
    import uuid

    from harness.launch import launch as launch_mod

    timeout = 600  # never sat out: the clock below skips to it once both ranks are stuck in the forward
    _RecordingPopen.started = []
    monkeypatch.setattr(launch_mod.subprocess, "Popen", _RecordingPopen)
    batch = f"hang-{uuid.uuid4().hex[:8]}"
    # Both ranks in the forward for 1 s: rank 1's recv is the first statement of the patched forward, which a whole
    # forward of direct-multigpu takes 0.1-0.2 s to get through (its phase_times_s), so each rank is at its wait long
    # before; the 3 s this was were 2 s of a worker sat out for nothing.
    clock = _ClockThatSkipsAStuckWait(launch_mod.RUNS_DIR / batch, 2, "forward", stuck_s=1.0, skip_s=timeout)
    monkeypatch.setattr(launch_mod, "time", clock)

    record = run_cell(
        scenario("direct-multigpu", timeout_s=timeout, device="cpu"), str(FAULTS / "hang-rank1.diff"), batch_id=batch
    )
    run_dir = ROOT / record.run_dir

    assert record.outcome == "hang", _explain(record)  # the launcher's timeout ended it
    err = record.verdict.error
    # Rank 1 blocks in a recv that rank 0 never answers; rank 0 blocks in FSDP2's next all-gather: both are
    # stuck in the forward, and neither wrote a result.
    assert err.type == "Timeout"
    assert err.rank == [0, 1], _explain(record)
    assert "0: forward" in err.message and "1: forward" in err.message, err.message
    assert record.verdict.rank_errors == []  # gloo's own timeout (same length, started later) never fired
    # Ended by the launcher at the timeout (the clock skipped to it), stacks asked for and read (a wait of
    # launch._STACKS_WAIT_S at most), then the run killed: on the launcher's clock the run lasted its timeout and
    # less than another (a bound from the timeout, not from this host's speed).
    assert clock.skipped_at and timeout <= record.wall_s < 2 * timeout, _explain(record)
    # Where each rank waits: every rank's Python stack is in the record; rank 1's main thread is in the recv
    # the fault added, inside the patched forward.
    assert set(err.stacks) == {"0", "1"}, _explain(record)
    assert "qwen3_vl.py" in err.stacks["1"] and "in recv" in err.stacks["1"], err.stacks["1"]
    assert "distributed_c10d.py" in err.waits_in["1"] and "recv" in err.waits_in["1"], err.waits_in
    assert "File " in err.stacks["0"] and err.waits_in["0"], err.stacks["0"]
    # One log file per rank and stream beside torchrun.log, which still has every rank's lines too.
    for rank in (0, 1):
        assert (run_dir / f"rank{rank}.stderr.log").is_file(), sorted(p.name for p in run_dir.iterdir())
    assert not (run_dir / "rank-logs").exists()

    # No orphans: torchrun and both ranks are gone (a zombie counts as gone: it is not running).
    pids = rank_pids(run_dir)
    assert sorted(pids) == [0, 1]
    assert len(_RecordingPopen.started) == 1
    torchrun_pid = _RecordingPopen.started[0]
    assert tree.state(torchrun_pid) is None  # the launcher reaped it
    # A forked torchrun (the record says fork) is the parent's child: its pid is in the run dir. A sandboxed cell's
    # (the arm is a diff: docs/SANDBOX.md) are its PID namespace's, not this host's; its processes end with the
    # namespace's pid 1 (tests/unit/processes/test_sandbox.py), and a fresh one's command lines name the run's spec.
    forked = run_dir / "torchrun.pid"
    assert forked.is_file() == record.rank_start.startswith("fork"), record.rank_start
    sandboxed = record.sandbox == "sandboxed"
    launched = [torchrun_pid] + ([int(forked.read_text())] if forked.is_file() and not sandboxed else [])
    assert not _live_processes_of(run_dir, ([] if sandboxed else list(pids.values())) + launched)


def test_crashed_rank_is_the_root_cause_and_ends_the_run_at_once(fault_run):
    record, run_dir = fault_run("direct-multigpu", "crash-rank1", timeout_s=120)
    end = time.time()

    assert record.outcome == "error", _explain(record)  # not a hang: the run did not sit out its timeout
    err = record.verdict.error
    assert err.rank == 1, _explain(record)
    assert err.type == "RuntimeError" and "injected fault on rank 1" in err.message
    assert err.phase == "forward"
    # Rank 0, waiting in a collective for rank 1, either failed on the broken connection (a secondary error,
    # kept but not the root cause) or was stopped by torchrun before it could write anything.
    by_rank = {e.rank: e for e in record.verdict.rank_errors}
    assert by_rank[1] == err
    assert set(by_rank) <= {0, 1}
    if 0 in by_rank:  # seen: gloo's "Connection closed by peer", as rank 1 exited (torchrun blames rank 0)
        assert "injected fault" not in by_rank[0].message
        assert "connection" in by_rank[0].message.lower(), by_rank[0]
    # torchrun tore down the waiting rank: nowhere near the 120 s collective timeout. Measured from the moment
    # rank 1 wrote its error (its result file), so a slow setup on a loaded machine does not count.
    teardown = end - (run_dir / "rank1.json").stat().st_mtime
    assert teardown < 30, teardown
    pids = rank_pids(run_dir)
    assert sorted(pids) == [0, 1]
    # A sandboxed cell's pids are its PID namespace's (see the hang's test above).
    assert not _live_processes_of(run_dir, [] if record.sandbox == "sandboxed" else list(pids.values()))


def test_rank_killed_by_a_signal_is_the_root_cause_with_its_signal(fault_run):
    record, _ = fault_run("direct-multigpu", "kill-rank1", timeout_s=120)
    assert record.outcome == "error", _explain(record)
    err = record.verdict.error
    assert (err.type, err.rank, err.signal, err.phase) == ("RankKilled", 1, "SIGKILL", "forward"), err
    assert "rank 1 was killed by SIGKILL" in err.message


def test_patch_that_breaks_verls_import_is_an_error_of_the_patch_phase_naming_file_and_line(fault_run):
    from harness.plan.arms import materialise, resolve_arm

    record, _ = fault_run("direct-1gpu", "syntax-error", timeout_s=120)
    arm_dir = materialise(resolve_arm(str(FAULTS / "syntax-error.diff")))  # the copy the run imported (cached)
    assert record.outcome == "error", _explain(record)
    err = record.verdict.error
    assert err.type == "SyntaxError" and err.phase == "patch", err
    file, _, line = err.location.rpartition(":")
    assert file.endswith("verl/models/transformers/qwen3_vl.py") and str(arm_dir) in file, err
    assert 349 < int(line) < 360, err


_WRITER = r"""
import sys
import time
from pathlib import Path
from harness.records.store import ResultsFile
from harness.records.results import Record

directory, tag, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
results = ResultsFile("parallel", directory)
print(results.path, flush=True)
while not go.exists():  # start appending together (within a millisecond; a spin took a core from the other's start)
    time.sleep(0.001)
for i in range(200):
    results.append(Record(scenario="s", arm=tag, outcome="pass", writer=tag, seq=i, payload=tag * 4000))
results.close()
"""


def test_results_files_written_in_parallel_never_interleave(tmp_path):
    from harness.records.store import read_records

    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path / "results"), tag, str(go)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    paths = [Path(w.stdout.readline().strip()) for w in writers]  # both files exist before either appends
    go.touch()
    for w in writers:
        assert w.wait(timeout=60) == 0

    assert sorted((tmp_path / "results").iterdir()) == sorted(paths) and paths[0] != paths[1]
    for path, tag in zip(paths, ("a", "b")):
        lines = path.read_text().splitlines()
        assert len(lines) == 200
        records = [json.loads(line) for line in lines]  # every line is one whole JSON object
        assert [r["seq"] for r in records] == list(range(200))
        assert all(r["writer"] == tag and r["payload"] == tag * 4000 for r in records)
        # Every line is signed by the driver that wrote it (records/signing.py); readers drop the MAC from the record.
        assert all(isinstance(r.pop("mac"), str) for r in records)
        assert [r.written() for r in read_records(path)] == records


def test_a_results_file_cut_by_a_kill_still_reads_and_reports(tmp_path, record, cli_in_process):
    from harness.records.store import read_records

    records = [record(scenario=f"scn-{i}", world_size=2, wall_s=1.5 + i) for i in range(3)]
    path = tmp_path / "cut.jsonl"
    whole = "".join(json.dumps(r.written()) + "\n" for r in records)
    cut = json.dumps(dict(records[0].written(), scenario="scn-cut"))
    path.write_text(whole + cut[: len(cut) // 2])  # the kill came mid-write of the fourth line

    assert read_records(path) == records
    done = cli_in_process("report", path)  # what it prints and exits with: no interpreter of its own needed
    assert done.returncode == 0, done.stderr
    for r in records:
        assert r.scenario in done.stdout
    assert "scn-cut" not in done.stdout


def test_parallel_launches_never_share_a_run_dir(run_cell, scenario):
    """Two runs of one scenario x arm at once, even within one batch (as noise-floor's seeds are), each get
    their own directory and their own complete record."""
    import uuid

    direct = scenario("direct-1gpu", device="cpu", timeout_s=120)
    batch = f"robustness-{uuid.uuid4().hex[:8]}"
    records, failures = [None, None], []

    def one(i):
        try:
            records[i] = run_cell(direct, "upstream", batch_id=batch)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    run_dirs = [ROOT / record.run_dir for record in records]
    assert run_dirs[0] != run_dirs[1]
    assert run_dirs[0].parent == run_dirs[1].parent  # same batch, side by side
    pids = []
    for record, run_dir in zip(records, run_dirs):
        assert record.outcome == "pass", _explain(record)
        assert sorted(p.name for p in run_dir.glob("rank*.json")) == ["rank0.json"]
        # The result in each directory is that run's own rank: the pid that announced progress there.
        pids.append(json.loads((run_dir / "rank0.json").read_text())["pid"])
        assert pids[-1] == rank_pids(run_dir)[0]
        assert json.loads((run_dir / "launch.json").read_text())["out_dir"] == str(run_dir)
    assert pids[0] != pids[1]
