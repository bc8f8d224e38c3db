"""Reach on real cells (commands/reach.py): a fixture PR on the installed verl adds a branch under Ulysses SP that
only one head layout takes (query and key of one shape: tests/fixtures/coverage/ulysses-equal-heads.diff). On
engine-sp2 (4 query / 2 KV heads, SP 2: verl repeats no KV head) its branch is never taken; the reach finds the
variant that takes it (as many KV heads as query heads) and judges the patch there beside its base. Four cells of
verl's engine with SP, a minute each on 2 cores: nightly."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent.parent / "fixtures" / "coverage" / "ulysses-equal-heads.diff"
FILE = "verl/models/transformers/monkey_patch.py"


@pytest.mark.nightly
def test_the_reach_finds_the_head_layout_that_takes_the_branch_and_judges_it(launching_cli):
    done = launching_cli(
        "verify", "--patch", str(FIXTURE), "--scenario", "engine-sp2", "--differential", "--reach-seconds", "900"
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    reach = [line for line in lines if line.startswith("reach: ")]
    assert reach and reach[0].startswith("reach: 2 piece(s) of the changed code"), done.stdout[-3000:]
    found = [line for line in lines if line.startswith("  engine-sp2-kv4 (engine-sp2 with 4 KV heads")]
    assert found, done.stdout[-3000:]
    assert f"ran {FILE} line 132; `if query_states.shape == key_states.shape:` true; against its base: " in found[0]
    assert "against its base: new" not in found[0]  # the branch only copies: the base's outcome
    assert any(line.strip().startswith("keep it: cp ") and "engine-sp2-kv4.yaml" in line for line in lines)
    # The block counts the reached scenario's lines: every changed line ran, every branch was taken.
    assert f"  {FILE}: 2 of 2 changed line(s) ran, 2 of 2 branch(es) taken" in lines, done.stdout[-3000:]
