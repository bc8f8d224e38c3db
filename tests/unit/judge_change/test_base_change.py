"""A patch's records against its base's (judge_change/base_change.py), and the verdict's exit codes that follow
(judge_change/patch_verdict.py): new, fixed, same as the base, not judged here, from records shaped like the
runner's."""

from __future__ import annotations

import pytest
from record_builder import FLASH_ATTN, SUMMED, UNREDUCED, cell, error, unreduced  # tests/record_builder.py

from harness.judge_change.base_change import (
    FIXED,
    NEW,
    NO_BASE,
    NOT_JUDGED,
    SAME,
    UNCHANGED,
    against_base,
    change_against,
)
from harness.judge_change.patch_verdict import judge_patch

pytestmark = pytest.mark.unit


def test_a_failure_where_the_base_passes_is_new_and_a_pass_where_it_fails_is_fixed():
    new = change_against(unreduced("pr"), cell("upstream", "pass"))
    assert (new.kind, new.how) == (NEW, "the base passes")
    assert change_against(cell("pr", "pass"), unreduced("upstream")).kind == FIXED
    assert change_against(cell("pr", "pass"), cell("upstream", "pass")).kind == UNCHANGED
    assert change_against(cell("pr", "pass"), None).kind == NO_BASE


def test_the_bases_own_failure_left_as_it_is_is_the_same():
    """#6659's unreduced lm_head on verl's history: the same gradients, the same class, in both arms."""
    assert change_against(unreduced("pr"), unreduced("upstream")).kind == SAME


def test_failing_otherwise_than_the_base_is_new_and_says_how():
    """Another cause of the same gradient (x W is not unreduced), other gradients, another outcome, another error."""
    summed = cell("pr", "mismatch", cause=SUMMED, failing=["lm_head.weight"])
    found = change_against(summed, unreduced("upstream"))
    assert found.kind == NEW and found.how.startswith("another cause (the base: grad lm_head.weight"), found.how
    more = cell("pr", "mismatch", cause=UNREDUCED, failing=["lm_head.weight", "model.embed_tokens.weight"])
    found = change_against(more, unreduced("upstream"))
    assert (found.kind, found.how) == (NEW, "other failing parameters (also model.embed_tokens.weight)")
    raised = cell("pr", "error", err=error("AttributeError", "Qwen3_5GatedDeltaNet has no causal_conv1d_fn"))
    found = change_against(raised, unreduced("upstream"))
    assert (found.kind, found.how) == (NEW, "another outcome (the base: mismatch)")
    boom = cell("upstream", "error", err=error("RuntimeError", "boom"))
    found = change_against(raised, boom)
    assert found.kind == NEW and found.how == "another error (the base: RuntimeError: boom)"


def test_the_same_error_from_two_copies_of_verl_is_the_same():
    """The patch's verl is a copy under .cache/arms, the base's is site-packages: the path in a message is not a
    difference; a hang with the same (no) root is the same too."""
    mine = error("TypeError", "bad arg in /work/h/.cache/arms/pr-1/verl/models/transformers/qwen3_5.py:12")
    theirs = error("TypeError", "bad arg in /v/lib/python3.11/site-packages/verl/models/transformers/qwen3_5.py:12")
    assert change_against(cell("pr", "error", err=mine), cell("upstream", "error", err=theirs)).kind == SAME
    assert change_against(cell("pr", "hang"), cell("upstream", "hang")).kind == SAME


def test_a_base_that_stops_on_an_import_is_not_judged_here_and_names_the_package():
    found = change_against(cell("pr", "error", err=FLASH_ATTN), cell("upstream", "error", err=FLASH_ATTN))
    assert (found.kind, found.blocked, found.how) == (NOT_JUDGED, "flash_attn", "")
    found = change_against(unreduced("pr"), cell("upstream", "error", err=FLASH_ATTN))
    assert (found.kind, found.how) == (NOT_JUDGED, "the patch's arm: mismatch, the base's did not run")
    gone = error("ImportError", "cannot import name 'is_flash_attn_greater_or_equal_2_10' from 'transformers.utils'")
    found = change_against(cell("pr", "error", err=gone), cell("upstream", "error", err=gone))
    assert found.blocked == "transformers.utils (cannot import name is_flash_attn_greater_or_equal_2_10)"
    # the patch runs where its base could not (verl #7169's import crash): fixed, and how
    found = change_against(cell("pr", "pass"), cell("upstream", "error", err=gone))
    assert found.kind == FIXED and found.how.startswith("runs where its base cannot: transformers.utils")


def test_the_patchs_arm_is_not_judged_only_for_an_optional_gpu_package():
    """liger_kernel absent here is this host's lack; a module no environment has is the patch's own failure."""
    liger = cell("pr", "error", err=error("ModuleNotFoundError", "No module named 'liger_kernel.ops'"))
    found = change_against(liger, cell("upstream", "pass"))
    assert (found.kind, found.blocked, found.how) == (NOT_JUDGED, "liger_kernel", "the base: pass")
    typo = cell("pr", "error", err=error("ModuleNotFoundError", "No module named 'verl.utils.nowhere'"))
    assert change_against(typo, cell("upstream", "pass")).kind == NEW


def test_against_base_takes_every_scenario_the_patch_ran_in_order():
    records = [
        unreduced("pr", "a"),
        unreduced("upstream", "a"),
        cell("pr", "skipped", "b"),
        cell("upstream", "pass", "b"),
        cell("pr", "pass", "c"),
        cell("none", "error", "c", err=FLASH_ATTN),
    ]
    assert [(c.scenario, c.kind) for c in against_base("pr", records)] == [("a", SAME), ("c", NO_BASE)]


# -- the exit codes that follow (judge_change/patch_verdict.py) ---------------------------------------------------


def test_a_pull_request_that_leaves_the_bases_failures_as_they_are_exits_0_and_verify_still_says_it_fails():
    """harness pr's verdict counts what the patch changes; verify on the installed verl keeps the absolute truth: a
    patch that leaves #6659's unreduced lm_head fails there (no known_defect excuses it)."""
    records = [unreduced("pr", "fsdp2-multigpu"), unreduced("upstream", "fsdp2-multigpu")]
    records += [cell("pr", "pass", "fsdp2-1gpu"), cell("upstream", "pass", "fsdp2-1gpu")]
    assert judge_patch("pr", records, {}, differential=True).exit_code == 0
    absolute = judge_patch("pr", records, {})
    assert absolute.exit_code == 1 and [r.scenario for r, _ in absolute.failing] == ["fsdp2-multigpu"]


def test_a_pull_request_that_breaks_a_scenario_exits_1():
    raised = error("AttributeError", "Qwen3_5GatedDeltaNet has no causal_conv1d_fn")
    records = [cell("pr", "error", "engine-qwen3-5-multigpu", err=raised), cell("upstream", "pass", "fsdp2-1gpu")]
    records += [cell("upstream", "pass", "engine-qwen3-5-multigpu"), cell("pr", "pass", "fsdp2-1gpu")]
    verdict = judge_patch("pr", records, {}, differential=True)
    assert verdict.exit_code == 1 and [c.scenario for c in verdict.of_kind(NEW)] == ["engine-qwen3-5-multigpu"]


def test_cells_this_host_cannot_run_are_never_the_patchs_failure_and_all_of_them_is_not_judged():
    blocked = [cell("pr", "error", "a", err=FLASH_ATTN), cell("upstream", "error", "a", err=FLASH_ATTN)]
    judged = [unreduced("pr", "b"), unreduced("upstream", "b")]
    for differential in (True, False):
        verdict = judge_patch("pr", blocked + judged, {}, differential=differential)
        assert [c.scenario for c in verdict.not_judged] == ["a"] and [r.scenario for r in verdict.judged] == ["b"]
        assert all(r.scenario != "a" for r, _ in verdict.failing)
        assert judge_patch("pr", blocked, {}, differential=differential).exit_code == 2
    # verify of upstream itself on such a tree: its own import stops are not judged either
    assert judge_patch("upstream", blocked[1:], {}).exit_code == 2
