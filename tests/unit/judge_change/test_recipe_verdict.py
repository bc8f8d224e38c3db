""" "Is my recipe hit?" (issue 64): for a recipe (a scenario with a `verl:` block, as `harness import` writes it),
verify's first lines say whether it runs the code the patch (or #6659) changes, from the lines that ran and the
settings that route there, then what the patch changes for it (judge_change/recipe_verdict.py)."""

from __future__ import annotations

import pytest

from harness.judge_change.patch_verdict import PatchVerdict
from harness.judge_change.recipe_verdict import recipe_answers
from harness.render.verdict_line import recipe_note
from harness.render.verify_closing import recipe_lines

pytestmark = pytest.mark.unit

VERL = {"algorithm.adv_estimator": {"value": "grpo", "kind": "not applicable", "why": "the rollout's"}}


def _spec(fused: bool, model: str = "tiny-qwen3-vl", backend: str = "torch", verl=VERL) -> dict:
    return {
        "path": "engine",
        "trainer": "v1",
        "model": model,
        "fused_backend": backend,
        "engine": {"use_fused_kernels": fused},
        "verl": verl,
    }


def _cells(record, name, spec, outcomes, ran=None):
    """The scenario under none, upstream and the candidate (ran: the candidate's patch_lines_run)."""
    cells = []
    for arm, outcome in outcomes.items():
        fields = {"patch_lines_run": ran} if arm == "cand" and ran is not None else {}
        cells.append(record(name, arm, outcome, scenario_spec=spec, **fields))
    return cells


def _coverage(records, lines=(7,)):
    from harness.judge_change.patch_coverage import HunkCoverage
    from harness.plan.diffs import HunkOrigin
    from harness.plan.patch_lines import PatchHunk

    hunk = PatchHunk(HunkOrigin("c.diff", "verl/models/transformers/qwen3_vl.py", 2, "@@"), tuple(lines), "f")
    ran_in = [
        r.scenario
        for r in records
        if r.arm == "cand" and 7 in (r.measures.patch_lines_run or {}).get("verl/models/transformers/qwen3_vl.py", [])
    ]
    return [HunkCoverage(hunk, sorted(set(ran_in)))]


def test_a_recipe_without_the_fused_head_is_told_the_patch_does_not_affect_it(record):
    """The issue's case: verl's default use_fused_kernels false; a pass under every arm is no pass of the fix."""
    records = _cells(
        record, "run-qwen3-vl-8b", _spec(False), {"none": "pass", "upstream": "pass", "cand": "pass"}, ran={}
    )
    answers = recipe_answers("cand", records, _coverage(records))
    assert recipe_lines(answers) == [
        "recipe run-qwen3-vl-8b: your recipe does not run the fused head (use_fused_kernels false): the patch (cand) "
        "does not affect it; set actor_rollout_ref.model.use_fused_kernels=True to judge the fused path",
        "  upstream: pass; cand: pass: the same outcome, as it must be where the changed code never runs",
    ]
    from harness.render.verdict_line import verdict_line

    verdict = PatchVerdict("cand", ran=[r for r in records if r.arm == "cand"], recipes=answers)
    verdict.ran_note = "; but none of its changed lines ran in any of them: this verdict says nothing about the change"
    assert verdict_line(verdict) == (  # the recipes' word in place of the lines' (one "but", the more exact)
        "verdict: cand passes all 1 scenario(s) it is judged on here; but no recipe judged runs the code it changes "
        "(recipe lines above): nothing said about the change"
    )


def test_a_recipe_that_runs_the_changed_lines_says_so_and_what_the_patch_changes(record):
    records = _cells(
        record,
        "run-qwen3-vl-fused",
        _spec(True),
        {"upstream": "mismatch", "cand": "pass"},
        ran={"verl/models/transformers/qwen3_vl.py": [7]},
    )
    records[0].verdict.why = "grad lm_head.weight: relative error 1 > 0.0001"
    (answer,) = recipe_answers("cand", records, _coverage(records))
    assert answer.runs
    assert answer.answer == (
        "your recipe runs the code the patch (cand) changes: 1 of its 1 hunk(s) ran (use_fused_kernels true, backend "
        "torch, qwen3_vl.py, trainer v1)"
    )
    assert answer.change == (
        "upstream: mismatch (grad lm_head.weight: relative error 1 > 0.0001); cand: pass: cand fixes what upstream "
        "gets wrong for this recipe"
    )
    assert recipe_note([answer], 1) == ""


def test_a_fused_recipe_of_another_family_runs_none_of_the_patchs_lines(record):
    records = _cells(record, "run-qwen3-5", _spec(True, "tiny-qwen3-5"), {"upstream": "pass", "cand": "pass"}, ran={})
    (answer,) = recipe_answers("cand", records, _coverage(records))
    assert not answer.runs
    assert answer.answer == (
        "your recipe's model runs its fused head in qwen3_5.py, which the patch (cand) does not change (it changes "
        "qwen3_vl.py): it does not affect this recipe (use_fused_kernels true, backend torch, qwen3_5.py, trainer v1)"
    )
    # where its family file still has #6659's defect (plan/families.py), the answer says so: the recipe is hit
    (hit,) = recipe_answers("cand", records, _coverage(records), {"qwen3_5.py": "still gathers lm_head by hand"})
    assert hit.answer.endswith(
        "; but qwen3_5.py still gathers lm_head by hand: #6659's defect, which it leaves in your recipe's path"
    )


def test_verifying_upstream_answers_for_6659_from_the_settings(record):
    """No patch: the code in question is #6659's, the torch backend's fused forward of qwen3_vl.py."""
    fused = _cells(record, "r-fused", _spec(True), {"none": "error", "upstream": "mismatch"})
    triton = _cells(record, "r-triton", _spec(True, backend="triton"), {"none": "pass", "upstream": "pass"})
    off = _cells(record, "r-off", _spec(False), {"none": "pass", "upstream": "pass"})
    answers = {a.scenario: a for a in recipe_answers("upstream", fused + triton + off)}
    assert answers["r-fused"].runs and answers["r-fused"].answer.startswith("your recipe runs the code #6659 changed")
    assert answers["r-fused"].change.startswith("none: error; upstream: mismatch")
    assert not answers["r-triton"].runs and "the triton backend" in answers["r-triton"].answer
    assert answers["r-off"].answer.startswith("your recipe does not run the fused head (use_fused_kernels false)")


def test_only_recipes_are_answered(record):
    plain = _cells(record, "fsdp2-multigpu", _spec(True, verl={}), {"upstream": "pass", "cand": "pass"}, ran={})
    assert recipe_answers("cand", plain, _coverage(plain)) == []


def test_a_recipe_failing_exactly_as_upstream_beside_it_is_not_counted_against_the_patch(record):
    """An imported recipe has no expectation: the same root-cause error under upstream and the patch is upstream's
    own (judge_change/patch_verdict.py recipe_fails_as_upstream), so verify does not say FAILS for a patch that leaves
    it."""
    from harness.judge_change.patch_verdict import RECIPE_AS_UPSTREAM, judge_patch
    from harness.records.results import RankError

    spec = _spec(True, "tiny-qwen2-5-vl")
    records = _cells(record, "run-qwen2-5-vl", spec, {"upstream": "error", "cand": "error"}, ran={})
    message = "name '_flash_use_top_left_mask' is not defined"
    for r in records:
        r.verdict.error = RankError(type="NameError", message=message, phase="step", rank=0)
    verdict = judge_patch("cand", records, {})
    assert verdict.failing == [] and [(r.arm, k) for r, k, _ in verdict.as_upstream] == [("cand", RECIPE_AS_UPSTREAM)]
    from harness.errors import EXIT_NOT_JUDGED

    assert verdict.exit_code == EXIT_NOT_JUDGED  # nothing said about the patch: no finding either way (issue 74)
    from harness.render.verdict_line import verdict_line

    assert verdict_line(verdict) == (
        "verdict: cand NOT JUDGED: judged on no scenario here: each of the 1 fails exactly as upstream does (not "
        "counted, above)"
    )
    plain = _cells(record, "fsdp2-x", _spec(True, verl={}), {"upstream": "error", "cand": "error"}, ran={})
    for r in plain:
        r.verdict.error = RankError(type="NameError", message=message, phase="step", rank=0)
    assert len(judge_patch("cand", plain, {}).failing) == 1  # a shipped scenario: only expectations say so


def test_a_recipes_update_failing_at_the_same_first_wrong_number_as_upstream_is_upstreams(record):
    """An update's mismatch has no one-step parity: the cause (kind, subject, moment, parameters) tells it."""
    from harness.judge_change.patch_verdict import judge_patch
    from harness.records.results import Failure

    name = "model.language_model.layers.0.linear_attn.conv1d.weight"
    records = _cells(record, "run-qwen3-5", _spec(False, "tiny-qwen3-5"), {"upstream": "mismatch", "cand": "mismatch"})
    for r in records:
        r.measures.parity = None
        r.verdict.cause = Failure(kind="gradient", subject=name, moment="at step 1, mini-batch 1", parameters=[name])
    assert judge_patch("cand", records, {}).failing == []
    records[1].verdict.cause = Failure(kind="gradient", subject="lm_head.weight", moment="at step 1, mini-batch 1")
    assert len(judge_patch("cand", records, {}).failing) == 1  # another first wrong number: counted


def test_a_recipes_error_counts_as_upstreams_only_where_the_differential_verdict_calls_it_the_same(record):
    """One test of "fails as upstream" for recipes and `harness pr` (judge_change/base_change.py fails_as): the same
    error class with another root message is the patch's own failure in both, never upstream's in one and new in the
    other."""
    from harness.judge_change.base_change import NEW, against_base
    from harness.judge_change.patch_verdict import judge_patch
    from harness.records.results import Failure, RankError

    records = _cells(record, "run-qwen2-5-vl", _spec(True, "tiny-qwen2-5-vl"), {"upstream": "error", "cand": "error"})
    for r, message in zip(records, ("name 'a' is not defined", "name 'b' is not defined"), strict=True):
        r.verdict.error = RankError(type="NameError", message=message, phase="step", rank=0)
        r.verdict.cause = Failure(kind="error", subject="NameError")  # one cause, two root messages
    assert [c.kind for c in against_base("cand", records)] == [NEW]
    verdict = judge_patch("cand", records, {})
    assert verdict.as_upstream == [] and len(verdict.failing) == 1
