"""Ctrl-C on a real `harness repro`: every rank of every run ends within seconds, the finished records stay intact,
nothing is recorded for the interrupted runs, the user is told where the records are, exit code 130, no
process left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from harness.paths import RESULTS_DIR, ROOT


def _workers_of(batch_dirs: set[str]) -> list[int]:
    """Pids of rank processes whose spec lies in one of these run batches."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
            state = open(f"/proc/{entry}/stat").read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X") and any(d in cmdline for d in batch_dirs):
            pids.append(int(entry))
    return pids


def test_ctrl_c_stops_every_rank_keeps_finished_records_and_exits_130():
    before = set(RESULTS_DIR.glob("*-repro-*.jsonl"))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "repro", "--jobs", "2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    # Interrupt once the first run is recorded and others are in flight.
    deadline = time.monotonic() + 300
    results = None
    while time.monotonic() < deadline:
        new = set(RESULTS_DIR.glob("*-repro-*.jsonl")) - before
        if new:
            results = new.pop()
            if results.read_text().count("\n") >= 1:
                break
        time.sleep(0.5)
    assert results is not None, "no run finished in time"
    batches = {p.name for p in (ROOT / ".cache" / "runs").iterdir()
               if p.is_dir() and p.stat().st_mtime >= time.time() - 400}
    in_flight = _workers_of(batches)
    assert in_flight, "expected runs in flight when interrupting"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took < 15, f"took {took:.1f}s to stop"
    assert "Traceback" not in err, err
    lines = results.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line complete
    assert f"interrupted: {len(records)} of 8 runs recorded in results/{results.name}" in err, err
    assert 1 <= len(records) < 8
    assert all(r["outcome"] in ("pass", "error", "mismatch") for r in records)  # nothing recorded as a hang
    time.sleep(1)
    assert not _workers_of(batches), "rank processes left behind"
