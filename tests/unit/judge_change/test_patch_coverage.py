"""Lines that ran, counted one way (issue 64): the live closing block (verify: the diff files) and `make report`
(the diffs the records keep) give the same lines for the same records, and a new function's lines count only the
scenarios whose ranks ran its body, never those that only imported its file (judge_change/changed_coverage.py)."""

from __future__ import annotations

import hashlib

import pytest

from harness.commands.ran_lines import code_of_files, patch_ran_lines, report_ran_lines
from harness.paths import ROOT

pytestmark = pytest.mark.unit

PATCH = ROOT / "patches" / "fsdp2-lmhead-forward.diff"
FILE = "verl/models/transformers/qwen3_vl.py"
ARM = "fsdp2-lmhead-forward"


def _line_of(start: str) -> int:
    """The line of the patched qwen3_vl.py that starts so."""
    from harness.plan.arms import installed_verl_dir
    from harness.plan.diffs import changed_lines

    text, _ = changed_lines(installed_verl_dir(), [(PATCH, PATCH.read_bytes())])[FILE]
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def _records(record):
    """Three cells of the candidate: two ran the fused head (the new function's body and its call sites), one
    (use_fused_kernels false) only imported the file, which runs the new function's `def` line."""
    hunks = code_of_files([PATCH])
    body = [n for h in hunks.hunks for n in h.lines]
    text = PATCH.read_text()
    stored = {"file": "patches/fsdp2-lmhead-forward.diff", "text": text}
    stored["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    definition = _line_of("def _fused_ppo_head(")  # run by the module's code on import
    ran = {"a-fused": body, "b-fused": body, "c-unfused": [definition]}
    records = []
    for name, lines in ran.items():
        r = record(name, ARM, patch_lines_run={FILE: lines})
        r.stamp.arm_patches = [stored]
        records += [r, record(name, "upstream")]
    return hunks, records


def test_a_new_functions_lines_count_only_the_scenarios_that_ran_its_body(record):
    code, records = _records(record)
    lines, _ = patch_ran_lines(code, ARM, records)
    assert f"  {FILE}: 14 of 14 changed line(s) ran" in lines
    assert "    by scenario: 14 line(s) in 2 (a-fused, b-fused); none in 1 (c-unfused)" in lines
    # Records from before the arcs were measured: the branches are said unmeasured, never "taken in no scenario".
    assert "    its 2 branch(es): not measured in these records (written before arcs)" in lines


def test_the_live_block_and_make_report_give_the_same_lines_for_the_same_records(record):
    code, records = _records(record)
    live, _ = patch_ran_lines(code, ARM, records)
    report = report_ran_lines(records, ARM)
    assert report == live
    assert live[0] == "the patch's changed code that ran (3 cell(s) watched): 14 of 14 changed line(s) ran"
