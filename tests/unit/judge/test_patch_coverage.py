"""Lines that ran, counted one way (issue 64): the live closing block (verify: the diff files) and `make report`
(the diffs the records keep) give the same per-hunk lines for the same records, and a new function's hunk counts
only the scenarios whose ranks ran its body, never those that only imported its file (judge/patch_coverage.py)."""

from __future__ import annotations

import hashlib

import pytest

from harness.commands.ran_lines import hunks_of_files, patch_ran_lines, report_ran_lines
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
    hunks = hunks_of_files([PATCH])
    body = [n for h in hunks for n in h.lines]
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


def test_a_new_functions_hunk_counts_only_the_scenarios_that_ran_its_body(record):
    hunks, records = _records(record)
    lines, _ = patch_ran_lines(hunks, ARM, records)
    assert "  hunk 2 of qwen3_vl.py (_fused_ppo_head): ran in 2 scenario(s) (a-fused, b-fused)" in lines
    assert "  hunk 3 of qwen3_vl.py (forward_with_torch_backend): ran in 2 scenario(s) (a-fused, b-fused)" in lines


def test_the_live_block_and_make_report_give_the_same_per_hunk_lines_for_the_same_records(record):
    hunks, records = _records(record)
    live, _ = patch_ran_lines(hunks, ARM, records)
    report = report_ran_lines(records, ARM)
    per_hunk = [line for line in live if line.startswith("  hunk ")]
    assert len(per_hunk) == len(hunks) == 3  # the candidate's three hunks, each a line
    assert [line for line in report if line.startswith("  hunk ")] == per_hunk
    assert report[0] == live[0] == "the patch's lines that ran, by hunk (3 cell(s) watched):"
