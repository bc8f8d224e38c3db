"""Records whole or absent (records/store.py, issue 65): a record's line is written in one write, and where that write
fails (a full disk, ENOSPC, a short write) the results file is cut back to what it held before it; the run then stops
with one line naming the file, keeping every complete line; a results directory that cannot be written or has no room
for a record is that line, exit 2, before any cell runs; `make report` names a line it cannot read. The logic is
checked with a descriptor of this test's that fails as a full disk does (always), and on a real filesystem that fills
up: a tiny tmpfs, where this host lets the test mount one (root on Linux), else skipped with the reason."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.records import store
from harness.records.measures import RaisedWarning
from harness.records.results import Record
from harness.records.store import RecordNotWritten, ResultsFile, read_records, write_whole

pytestmark = pytest.mark.unit


class FillingOut:
    """A results file's descriptor on a disk that fills up: the first `whole` writes go through; the next writes the
    first half of its bytes and says so (a short write, as write(2) does at the last free page); any later raises
    ENOSPC. `fail_sync`: the fsync raises ENOSPC instead (a filesystem that reserves blocks at writeback)."""

    def __init__(self, real, whole: int, fail_sync: bool = False):
        self.real, self.whole, self.fail_sync = real, whole, fail_sync
        self.writes, self.cut_to = 0, None

    def write(self, data: bytes) -> int:
        self.writes += 1
        if self.writes <= self.whole:
            return self.real.write(data)
        if self.writes == self.whole + 1 and not self.fail_sync:
            return self.real.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def sync(self):
        if self.fail_sync and self.writes > self.whole:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.real.sync()

    def truncate(self, size: int):
        self.cut_to = size
        self.real.truncate(size)

    def close(self):
        self.real.close()


def _record(i: int) -> Record:
    return Record(scenario=f"s{i}", arm="upstream", outcome="pass", wall_s=0.1)


@pytest.mark.parametrize("fail_sync", [False, True], ids=["short write then ENOSPC", "ENOSPC at fsync"])
def test_a_line_that_cannot_be_written_leaves_the_file_as_it_was_before_it(tmp_path, fail_sync):
    results = ResultsFile("run", tmp_path)
    results._out = FillingOut(results._out, whole=2, fail_sync=fail_sync)
    assert [results.append(_record(i)) for i in range(2)] == [1, 2]
    before = results.path.read_bytes()
    for _ in range(2):  # the short write, then ENOSPC: both leave the file as it was
        with pytest.raises(RecordNotWritten) as failed:
            results.append(_record(2))
        assert results.path.read_bytes() == before and results._out.cut_to == len(before)
        message = str(failed.value)
        assert "\n" not in message and message.startswith(f"{results.path}: record 3 not written (")
        assert message.endswith("; the file keeps its 2 complete record(s) and the run stops")
    results.close()
    assert [r.scenario for r in read_records(results.path)] == ["s0", "s1"]


def test_a_partial_line_that_cannot_be_cut_off_is_said_so():
    class Stuck:
        def write(self, data):
            return len(data) - 1

        def sync(self):
            pass

        def truncate(self, size):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    with pytest.raises(OSError) as failed:
        write_whole(Stuck(), b"0123456789\n", 0)
    assert "10 of the line's 11 bytes written" in str(failed.value)
    assert "the partial line could not be cut off: Input/output error" in str(failed.value)


def test_a_results_directory_that_cannot_be_written_or_has_no_room_is_one_line_before_anything(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError) as unwritable:
        ResultsFile("run", blocker / "results")
    assert str(unwritable.value) == f"{blocker / 'results'}: results cannot be written there: Not a directory"
    monkeypatch.setattr(store.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(UsageError) as full:
        ResultsFile("run", tmp_path / "results")
    assert str(full.value) == f"{tmp_path / 'results'}: no room for results: 4 KiB free, a record takes up to 256 KiB"
    assert not list((tmp_path / "results").glob("*.jsonl"))  # nothing written


def test_the_runner_stops_at_a_record_it_cannot_write_and_keeps_every_complete_line(scenario, tmp_path, monkeypatch):
    """A full disk mid-run: the cell whose record does not fit is the last; the cells still to run are cancelled,
    and the results file holds the records written before it, each whole."""
    from harness.plan.arms import resolve_arm
    from harness.run import runner

    made = []

    def filling(command):
        results = ResultsFile(command, tmp_path)
        results._out = FillingOut(results._out, whole=1)
        made.append(results)
        return results

    monkeypatch.setattr(runner, "ResultsFile", filling)
    upstream = resolve_arm("upstream")
    plan = [(scenario(name, device="cpu"), upstream) for name in ("fsdp2-multigpu", "fsdp2-1gpu", "direct-1gpu")]
    executor = _OneAtATime()
    with pytest.raises(RecordNotWritten) as failed:
        runner.run_plan("test", plan, executor=executor, quiet=True)
    assert executor.cancelled == [2] and executor.closed
    assert "record 2 not written" in str(failed.value)
    assert [r.scenario for r in read_records(made[0].path)] == ["fsdp2-multigpu"]
    assert made[0].path.read_bytes().endswith(b"}\n")


class _OneAtATime:
    """An executor of this test's: each cell a trivial "pass" on a thread, in plan order; the third waits until the
    runner cancels it (the cell still running when the disk fills)."""

    jobs = 1

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self.pool, self.cancelled, self.closed = ThreadPoolExecutor(1), [], False
        self.released = threading.Event()

    def plan(self, pairs):
        from harness.run import executors

        return executors.planned_cells(pairs, gpus=0)

    def submit(self, job):
        return self.pool.submit(self.run, job)

    def run(self, job):
        from harness.run import executors

        if job.index == 2:
            self.released.wait(30)
            return None
        return executors.Ran(Record(scenario=job.cell.scenario.name, arm="upstream", outcome="pass", wall_s=0.1), {})

    def outcome(self, job, future):
        return future.result()

    def running(self):
        return {}

    def cancel(self, jobs):
        self.cancelled = sorted(j.index for j in jobs)
        self.released.set()

    def close(self):
        self.closed = True
        self.pool.shutdown()


def test_report_names_a_line_it_cannot_read(tmp_path, cli_in_process):
    results = ResultsFile("run", tmp_path)
    results.append(_record(0))
    results.close()
    with open(results.path, "a") as cut:  # a kill in the middle of a write by an older harness
        cut.write('{"scenario": "s1", "ar')
    done = cli_in_process("report", results.path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"{results.path}:2: not a record (Unterminated string starting at: line 1 column 20 (char 19); the line's 22 "
        "characters: cut short), left out"
    ]
    assert "s0" in done.stdout and "s1" not in done.stdout


# -- a real filesystem that fills up --------------------------------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    """A tmpfs of `size` mounted on a folder of tmp_path, unmounted after; skipped where this host cannot mount."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk-{size}"
        where.mkdir()
        if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root on Linux (this host: not so); the descriptor tests above check it")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.decode().strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


def test_a_full_disk_at_the_start_is_one_line_and_exit_2_before_any_cell(tiny_disk, harness_cli):
    disk = tiny_disk("64k")
    done = harness_cli("run", "--scenario", "fsdp2-1gpu", env={"HARNESS_RESULTS_DIR": str(disk)}, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "[1/1]" not in done.stderr  # no cell ran
    assert done.stderr.strip().splitlines() == [
        f"error: {disk}: no room for results: 64 KiB free, a record takes up to 256 KiB"
    ]
    assert list(disk.iterdir()) == []


def test_a_disk_that_fills_up_mid_write_keeps_only_whole_lines(tiny_disk):
    """Records appended on a real tmpfs until it is full: the write that does not fit is a real short write or
    ENOSPC; after it the file holds only the whole lines before it, and the error says how many."""
    disk = tiny_disk("512k")
    results = ResultsFile("run", disk)  # 512 KiB free: room for a record
    (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 2 * 4096))  # two pages left
    padded = _record(0).model_copy(update={"warnings": [RaisedWarning(message="x" * 1500)]})
    written, failures, after = 0, [], []
    while len(failures) < 2:  # the write that does not fit, and one more after it
        try:
            written = results.append(padded)
        except RecordNotWritten as exc:
            failures.append(str(exc))
            after.append(results.path.read_bytes())
        assert written < 100
    results.close()
    assert written >= 2, written
    data = results.path.read_bytes()
    assert after == [data, data] and data.endswith(b"\n") and data.count(b"\n") == written
    assert len(read_records(results.path)) == written
    for failed in failures:  # on tmpfs a short write (what is left of the last page filled), or ENOSPC
        assert failed.startswith(f"{results.path}: record {written + 1} not written ("), failed
        assert failed.endswith(f"; the file keeps its {written} complete record(s) and the run stops")
        assert "bytes written: no room for the rest" in failed or "No space left on device" in failed
