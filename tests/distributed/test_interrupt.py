"""Ctrl-C on a real `harness repro`: every rank of every run ends within seconds, the finished records stay intact,
nothing is recorded for the interrupted runs, the user is told where the records are, exit code 130, no
process left behind, the preloaded parent it started included."""

from __future__ import annotations

import json
import os
import signal
import time

from harness.processes import client, kept, tree
from harness.records.results import Record


def test_ctrl_c_stops_every_rank_keeps_finished_records_and_exits_130(harness_cli):
    proc = harness_cli.start("repro", "--jobs", "2", start_new_session=True)
    # Interrupt once the first run is recorded and others are in flight.
    deadline = time.monotonic() + 300
    results = None
    while time.monotonic() < deadline:
        written = harness_cli.results_files("repro")
        if written:
            results = written[0]
            if results.read_text().count("\n") >= 1:
                break
        time.sleep(0.1)  # a poll reads one small file: the interrupt follows the first record closely
    assert results is not None, "no run finished in time"
    # Live processes below the command: torchrun and its ranks run in sessions of their own but are still its
    # descendants, so these are exactly this command's processes, not those of tests running beside it.
    in_flight = tree.live_descendants(proc.pid)
    assert in_flight, "expected runs in flight when interrupting"
    # The preloaded parent the command started is one of them (in its process group, as a terminal sees it).
    own = [parent.pid for parent in kept.parents_up() if parent.owner == proc.pid]
    assert own or not client.enabled(), "the command started no preloaded parent"
    assert set(own) <= in_flight, own
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took < 15, f"took {took:.1f}s to stop"
    assert "Traceback" not in err, err
    lines = results.read_text().splitlines()
    records = [Record.model_validate(json.loads(line)) for line in lines]  # every line complete
    from harness.commands.run import REPRO_ARMS
    from harness.inputs.release_plan import load_release_plan
    from harness.inputs.scenario import load_all

    # make repro's cells: the repro scenarios under none, upstream and the candidate
    planned = len([s for s in load_all() if "repro" in s.tags]) * (len(REPRO_ARMS) + 1)
    assert load_release_plan().candidate not in REPRO_ARMS
    assert f"interrupted: {len(records)} of {planned} runs recorded in {results}" in err, err
    assert 1 <= len(records) < planned
    assert all(r.outcome in ("pass", "error", "mismatch") for r in records)  # nothing recorded as a hang
    tree.wait_gone(list(in_flight), wait_s=1)  # the second it slept once, but done as soon as every one is gone
    alive = {pid for pid in in_flight if not tree.gone(pid)}
    assert not alive, f"processes left behind: {sorted(alive)}"
