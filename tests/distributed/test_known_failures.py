"""A fix that reads lm_head's weight outside its FSDP forward (tests/fixtures/alternative_fixes/
full-tensor-partial-avg-cast.diff) crashes under bf16 with no-sync accumulation with verl issue #7520's error, in
FSDP's post-backward. As a user runs it: the why line names the issue, `report --full` the backward phase."""

from __future__ import annotations

import re

from harness.paths import ROOT

FIX = ROOT / "tests/fixtures/alternative_fixes/full-tensor-partial-avg-cast.diff"


def test_the_7520_crash_is_named_and_placed_in_backward(launching_cli):
    done = launching_cli("run", "--arm", FIX, "--scenario", "engine-bf16-no-sync")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verl issue #7520" in done.stdout and "what avoids it: running the head through FSDP's forward" in (
        " ".join(done.stdout.split())  # the why may be wrapped over lines on the terminal
    ), done.stdout
    [results] = launching_cli.results_files("run")
    full = launching_cli("report", "--full", f"{results}:1")
    assert full.returncode == 0, full.stderr
    assert re.search(
        r"error \(rank \d, phase backward\): AttributeError: 'FSDPParam' object has no attribute", full.stdout
    ), full.stdout[:3000]
    assert "why: FSDP's no-sync post-backward on a unit whose forward never ran" in full.stdout
