"""A verify of a wrong fix as a user runs it (issue 49): the block about the patch closes the output, its verdict and
its failures grouped by cause within the last 17 lines. The user's wrong fix: full_tensor(grad_placements=
[Partial()]), a sum, with a cast (tests/fixtures/alternative_fixes/full-tensor-partial-sum-cast.diff). Two cells
(--alone: none's and upstream's outcomes from expectations.yaml)."""

from __future__ import annotations

import re
from pathlib import Path

SUM_FIX = Path(__file__).parent.parent / "fixtures/alternative_fixes/full-tensor-partial-sum-cast.diff"


def test_a_wrong_fixs_verdict_grouped_by_cause_is_in_the_last_19_lines(launching_cli):
    scenarios = ["--scenario", "fsdp2-multigpu", "--scenario", "engine-bf16-no-sync"]
    done = launching_cli("verify", "--patch", str(SUM_FIX), *scenarios, "--alone")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    # 15 lines, 2 for the model families the patch leaves with #6659's defect (plan/families.py) and 2 for what of
    # the patch's changed code ran (judge_change/changed_coverage.py: in all, then its one file)
    last = done.stdout.splitlines()[-19:]
    assert "failures of full-tensor-partial-sum-cast, by cause:" in last, last
    assert "  grad lm_head.weight: the sum over ranks instead of the mean (x W): fsdp2-multigpu" in last, last
    assert "  verl issue #7520 (no-sync-post-backward-without-forward): engine-bf16-no-sync" in last, last
    assert any(line.startswith("verdict: full-tensor-partial-sum-cast FAILS in 2 of 2 scenario(s)") for line in last)
    assert "  touches: verl/models/transformers/qwen3_vl.py" in last, last
    assert "  verl/models/transformers/qwen3_vl.py: 2 of 2 changed line(s) ran, in every scenario (2)" in last, last
    # after the verdict only where to look: a line each
    after = last[next(i for i, line in enumerate(last) if line.startswith("verdict: ")) + 1 :]
    assert [line.split(":", 1)[0] for line in after] == ["whole error, traceback, diagnosis", "rank logs", "picture"]


def test_the_wrong_fixs_update_fails_by_lm_heads_gradient_before_the_clip(launching_cli):
    """engine-update-adamw under the sum fix: the why once led with a visual bias's update; the cause now is lm_head's
    gradient, wrong before the clip, the other updates dragged along by the clip."""
    done = launching_cli("verify", "--patch", str(SUM_FIX), "--scenario", "engine-update-adamw", "--alone")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "  lm_head.weight's gradient wrong before the clip: engine-update-adamw" in done.stdout.splitlines()
    # The words around the relative error, not its digits (they move with the host's bits): lm_head's gradient
    # first, at the first optimizer step, then verl's grad_norm.
    assert re.search(
        r"lm_head\.weight's gradient wrong before the clip \(rel\. \S+ at step 1, mini-batch 1\); grad_norm: verl",
        " ".join(done.stdout.split()),
    ), done.stdout[-3000:]
    assert "parameter update(s) dragged along by the clip" in " ".join(done.stdout.split())
