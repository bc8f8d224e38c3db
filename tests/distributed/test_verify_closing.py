"""A verify of a wrong fix as a user runs it (issue 49): the block about the patch closes the output, its verdict and
its failures grouped by cause within the last 20 lines. The user's wrong fix: full_tensor(grad_placements=
[Partial()]), a sum, with a cast (tests/fixtures/alternative_fixes/full-tensor-partial-sum-cast.diff). One verify of
three cells (--alone: none's and upstream's outcomes from expectations.yaml), shared by the tests that check it: a
verify of its own each paid a command's start, planning, closing block and picture again (~2 s of CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SUM_FIX = Path(__file__).parent.parent / "fixtures/alternative_fixes/full-tensor-partial-sum-cast.diff"


# Its tests share one group, so that the module's verify runs once under make test's two processes.
@pytest.fixture(scope="module")
def wrong_fix(session_cli):
    names = ("fsdp2-multigpu", "engine-bf16-no-sync", "engine-update-adamw")
    scenarios = [arg for name in names for arg in ("--scenario", name)]
    return session_cli("verify", "--patch", str(SUM_FIX), *scenarios, "--alone")


@pytest.mark.xdist_group("verify-closing")
def test_a_wrong_fixs_verdict_grouped_by_cause_is_in_the_last_20_lines(wrong_fix):
    done = wrong_fix
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    # 16 lines (a cause a line), 2 for the model families the patch leaves with #6659's defect (plan/families.py)
    # and 2 for what of the patch's changed code ran (judge_change/changed_coverage.py: in all, then its one file)
    last = done.stdout.splitlines()[-20:]
    assert "failures of full-tensor-partial-sum-cast, by cause:" in last, last
    assert "  grad lm_head.weight: the sum over ranks instead of the mean (x W): fsdp2-multigpu" in last, last
    assert "  verl issue #7520 (no-sync-post-backward-without-forward): engine-bf16-no-sync" in last, last
    assert "  lm_head.weight's gradient wrong before the clip: engine-update-adamw" in last, last
    assert any(line.startswith("verdict: full-tensor-partial-sum-cast FAILS in 3 of 3 scenario(s)") for line in last)
    assert "  touches: verl/models/transformers/qwen3_vl.py" in last, last
    assert "  verl/models/transformers/qwen3_vl.py: 2 of 2 changed line(s) ran, in every scenario (3)" in last, last
    # after the verdict only where to look: a line each
    after = last[next(i for i, line in enumerate(last) if line.startswith("verdict: ")) + 1 :]
    assert [line.split(":", 1)[0] for line in after] == ["whole error, traceback, diagnosis", "rank logs", "picture"]


@pytest.mark.xdist_group("verify-closing")
def test_the_wrong_fixs_update_fails_by_lm_heads_gradient_before_the_clip(wrong_fix):
    """engine-update-adamw under the sum fix: the why once led with a visual bias's update; the cause now is lm_head's
    gradient, wrong before the clip, the other updates dragged along by the clip."""
    done = wrong_fix
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "  lm_head.weight's gradient wrong before the clip: engine-update-adamw" in done.stdout.splitlines()
    # The words around the relative error, not its digits (they move with the host's bits): lm_head's gradient
    # first, at the first optimizer step, then verl's grad_norm.
    assert re.search(
        r"lm_head\.weight's gradient wrong before the clip \(rel\. \S+ at step 1, mini-batch 1\); grad_norm: verl",
        " ".join(done.stdout.split()),
    ), done.stdout[-3000:]
    assert "parameter update(s) dragged along by the clip" in " ".join(done.stdout.split())
